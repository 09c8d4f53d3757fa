"""Reading hidden-state files without loading tensor data, apart from judging them (``compat.gate.rules``).

- ``layouts``: the layouts in use and how to tell them apart by their keys;
- ``files``: one file into a ``FileView`` by its suffix (``read_file``); ``samples``: a stored dict into a
  ``SampleView`` of its layout;
- ``safetensors_header``, ``torch_header``: header-only readers; ``torch_load``: ``torch.load`` that never
  unpickles arbitrary objects;
- ``views``, ``tensors``: what reading yields (samples, layers as ``TensorInfo``, faults, failures);
- ``tensor_data``: lazy, memory-mapped access to the tensor values (``--values``, ``--reference``).

Header checks import neither torch nor safetensors.
"""

from compat.gate.read.files import DATA_SUFFIXES, read_file
from compat.gate.read.layouts import Layout
from compat.gate.read.tensors import TensorInfo
from compat.gate.read.views import EntryFault, FailureKind, FileView, ReadFailure, SampleView

__all__ = ["DATA_SUFFIXES", "EntryFault", "FailureKind", "FileView", "Layout", "ReadFailure", "SampleView",
           "TensorInfo", "read_file"]
