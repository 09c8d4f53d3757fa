"""Reading hidden-state files without loading tensor data, apart from judging them (``compat.gate.rules``).

- ``layouts``: the layouts in use and how to tell them apart by their keys;
- ``files``: one file into a ``FileView`` by its suffix (``read_file``); ``samples``: a stored dict into a
  ``SampleView`` of its layout;
- ``safetensors_header``: the safetensors header, checked by the format's rules (the reference
  implementation's validation); ``zip_archive``: a zip archive whose directory is checked against the file
  before anything is read, and whose members are read (inflated) only as far as declared and asked;
  ``torch_header``: a ``torch.save`` archive's pickle with tensor stubs (allow-listed globals, no container
  reached twice); ``torch_load``: ``torch.load`` that never unpickles arbitrary objects, and values from a
  deflated archive inflated on demand;
- ``views``, ``tensors``: what reading yields (samples, layers as ``TensorInfo``, faults, failures);
- ``tensor_data``: lazy access to the tensor values (``--values``, ``--reference``): memory-mapped, or inflated
  on demand, in parts of bounded size; ``paths``: a name those libraries open whatever bytes it holds.

Header checks import neither torch nor safetensors.
"""

from compat.gate.read.files import DATA_SUFFIXES, read_file
from compat.gate.read.layouts import Layout
from compat.gate.read.tensors import TensorInfo
from compat.gate.read.views import EntryFault, FailureKind, FileView, ReadFailure, SampleView

__all__ = ["DATA_SUFFIXES", "EntryFault", "FailureKind", "FileView", "Layout", "ReadFailure", "SampleView",
           "TensorInfo", "read_file"]
