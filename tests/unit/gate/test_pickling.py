"""compat/gate/read/pickling.py: a worker's views come back equal to what it read, built by their classes."""

from __future__ import annotations

import pickle

import pytest

from compat.gate.read.files import read_file
from compat.gate.read.pickling import by_fields
from compat.gate.read.tensors import TensorInfo
from compat.gate.read.views import EntryFault, FileView, ReadFailure, SampleView

from .conftest import spec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("cls", [TensorInfo, EntryFault, SampleView, ReadFailure, FileView])
def test_views_pickle_as_their_fields(cls):
    # the class and its fields, in order: unpickling calls the class, not __setstate__ over every field
    assert cls.__reduce__.__qualname__.startswith(by_fields.__qualname__)


def test_read_views_survive_a_round_trip(tmp_path):
    import torch

    good, bad = tmp_path / "data_0.pt", tmp_path / "hs_0.safetensors"
    torch.save(spec(layers=3), good)
    bad.write_bytes(b"\x05")
    views = [read_file(str(good)), read_file(str(bad))]
    faulty = FileView("x.pt", 3, (SampleView("x.pt", 0, views[0].samples[0].layout, None, (),
                                             faults=(EntryFault("loss_mask", "missing", "re-extract"),)),))
    for view in (*views, faulty):
        back = pickle.loads(pickle.dumps(view, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == view and type(back) is FileView
    assert views[0].samples and views[1].failure is not None  # one read, one refused: both kinds crossed


def test_a_prefix_crosses_as_its_float32_bytes():
    import numpy as np

    from compat.gate.value_stats import Prefix

    rows = np.random.default_rng(0).standard_normal((4, 3, 64), dtype=np.float32)
    back = pickle.loads(pickle.dumps(Prefix((1, 2, 3, 4), rows), protocol=pickle.HIGHEST_PROTOCOL))
    assert back.ids == (1, 2, 3, 4) and back.rows.dtype == np.float32 and np.array_equal(back.rows, rows)
    back.rows[0, 0, 0] = 7.0  # its own writable memory, not a view of the pickle's bytes
    assert rows[0, 0, 0] != 7.0
