"""compat/gate/rules/header.py: one sample's header: layer_count, layer_shape, seq_len, hidden_size, dtype,
token_ids and loss_mask (the last two also under --values), each finding on a file the test writes."""

from __future__ import annotations

import pytest
import torch

from compat.findings import Status

from .conftest import H, ids, layered, model_config, one, spec, write_data_config, write_eagle, write_vllm

BROKEN, UNKNOWN = Status.BROKEN, Status.UNKNOWN


def _spec(**change):
    def write(gate):
        entries = spec()
        entries.update(change)
        gate.write("data_0.pt", entries)
    return write


def _vllm(hidden):
    return lambda gate: write_vllm(gate.root / "hs_0.safetensors", ids(6), hidden)


def _eagle(hidden, **kw):
    return lambda gate: write_eagle(gate.root / "data_0.ckpt", ids(6), hidden, **kw)


def _model(gate):
    return model_config(gate.root.parent / "model")


# (rule, writer, options, status, words); options may name "model": the model directory is made for it.
CASES = [
    ("layer_count", _spec(), {"layers": 5}, BROKEN, "3 layers where 5 were expected (--layers)"),
    ("layer_count", _spec(), {"layers": 4}, BROKEN, "(one layer too many or too few"),
    ("layer_count", _spec(), {"layer_ids": (1, 2, 3, 4, 5)}, BROKEN, "where 5 [1, 2, 3, 4, 5] were expected"),
    ("layer_count", _spec(hidden_states=[torch.zeros(H) for _ in range(12)]), {"layers": 3}, BROKEN,
     "(one entry per token, not per layer: see layer_shape)"),
    ("layer_count", _eagle(torch.cat(layered(6, H, 3), dim=-1), target=layered(6, H, 1)[0]),
     {"layers": 4, "hidden_size": H}, BROKEN, "EAGLE-3's target, the final-norm state, is not counted"),
    ("layer_shape", _vllm(torch.zeros(6, H)), {}, BROKEN, "hidden_states has shape [6, 16]: vLLM's extraction writes"),
    ("layer_shape", _spec(hidden_states=[]), {}, BROKEN, "no layers at all: hidden_states is empty"),
    ("layer_shape", _spec(hidden_states=[h[None] for h in layered(6, H, 3)]), {}, BROKEN,
     "a batch dimension of 1 kept"),
    ("layer_shape", _spec(hidden_states=[torch.ones(6) for _ in range(10)]), {}, BROKEN,
     "A list of 10 one-dimensional tensors is one [10, hidden] tensor"),
    ("layer_shape", _spec(hidden_states=[torch.ones(6, H, 2, 2)] * 3), {}, BROKEN,
     "3 of 3 layers are not [T, hidden] (rank 2): 3 of [6, 16, 2, 2]"),
    ("layer_shape", _spec(hidden_states=[torch.zeros(6, 0)] * 3), {}, BROKEN, "a layer with no hidden dimension"),
    ("layer_shape", _spec(hidden_states=layered(6, H, 2) + [torch.zeros(6, H + 1)]), {}, BROKEN,
     "layers disagree in shape"),
    ("seq_len", _spec(hidden_states=layered(9, H, 3)), {}, BROKEN, "3 rows too many, the batch looks concatenated"),
    ("seq_len", _spec(hidden_states=layered(4, H, 3)), {}, BROKEN, "2 rows missing (prefix-cache hits"),
    ("hidden_size", _spec(), {"hidden_size": 32}, BROKEN, "layers have hidden size 16, expected 32 (--hidden-size)"),
    ("hidden_size", _eagle(torch.ones(6, 3 * H)), {"hidden_size": 20}, BROKEN, "width 48 is not a multiple of 20"),
    ("dtype", _spec(hidden_states=layered(6, H, 2) + layered(6, H, 1, torch.float32)), {}, BROKEN,
     "layers disagree in dtype: bfloat16, float32"),
    ("dtype", _spec(hidden_states=[torch.ones(6, H, dtype=torch.long)] * 3), {}, BROKEN,
     "layers are int64, not a floating-point dtype"),
    ("dtype", _spec(), {"dtype": "float16"}, BROKEN, "layers are bfloat16, expected float16 (--dtype)"),
    ("token_ids", _spec(input_ids=[3, 4, 5, 6, 7, 8]), {}, BROKEN, "input_ids is not a tensor"),
    ("token_ids", _spec(input_ids=torch.ones(6, dtype=torch.float32)), {}, BROKEN,
     "expected a non-empty 1-D integer tensor"),
    ("token_ids", _spec(input_ids=ids(6, start=60)), {"values": True, "model": True}, BROKEN,
     "token ids range over [60, 65], outside the vocabulary of 64"),
    ("loss_mask", _spec(loss_mask=None), {}, BROKEN, "loss_mask is missing"),
    ("loss_mask", _spec(loss_mask=torch.ones(6, 2, dtype=torch.long)), {}, BROKEN, "expected 1-D integer or bool"),
    ("loss_mask", _spec(loss_mask=torch.ones(5, dtype=torch.long)), {}, BROKEN, "loss_mask has 5 entries for 6 tokens"),
    ("loss_mask", _spec(loss_mask=torch.tensor([0, 1, 2, 1, 1, 1])), {"values": True}, BROKEN,
     "loss_mask holds values other than 0 and 1: [2]"),
    ("loss_mask", _spec(loss_mask=torch.zeros(6, dtype=torch.long)), {"values": True}, BROKEN,
     "loss_mask is all zero: none of its 6 tokens would be trained (1 of 1 masks in its directory are)"),
]


@pytest.mark.parametrize(("rule", "write", "options", "status", "says"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_header_rules(gate, rule, write, options, status, says):
    write(gate)
    if options.pop("model", False):
        options["model"] = _model(gate)
    one(gate.findings(rule, **options), status, says)


def test_a_float_mask_is_allowed(gate):
    _spec(loss_mask=torch.ones(6))(gate)
    found = one(gate.findings("loss_mask"), BROKEN, "loss_mask is float32, not integer or bool")
    assert found.allowed and "cast by trainers" in found.allowed
    assert gate.run().exit_code == 0


def test_a_mask_that_is_no_tensor_is_read_as_missing(gate):
    _spec(loss_mask=[1, 1, 1, 1, 1, 1])(gate)
    assert [f.message for f in gate.findings("loss_mask")] == ["loss_mask is a list, not a tensor",
                                                               "loss_mask is missing"]


def test_every_mask_of_a_directory_all_zero_is_one_finding(gate):
    for i in range(2):
        entries = spec()
        entries["input_ids"] = ids(6, start=3 + 7 * i)
        entries["loss_mask"] = torch.zeros(6, dtype=torch.long)
        gate.write(f"data_{i}.pt", entries)
    one(gate.findings("loss_mask", values=True), BROKEN, "every loss_mask is all zero (2 of 2 samples)")


def test_one_all_zero_mask_among_others(gate):
    for i in range(3):
        entries = spec()
        entries["input_ids"] = ids(6, start=3 + 7 * i)
        if i == 0:
            entries["loss_mask"] = torch.zeros(6, dtype=torch.long)
        gate.write(f"data_{i}.pt", entries)
    found = one(gate.findings("loss_mask", values=True), BROKEN, "loss_mask is all zero: none of its 6 tokens")
    assert found.consumer_location.startswith("data_0.pt") or "data_0.pt" in str(found.place)


@pytest.mark.parametrize("write", [_spec(), _vllm(torch.stack(layered(6, H, 3), dim=1)),
                                   _eagle(layered(6, H, 1)[0])], ids=["speculators", "vllm", "eagle"])
def test_a_sound_sample_has_no_header_finding(gate, write):
    write(gate)
    result = gate.run(hidden_size=H, layers=None, values=True)
    assert result.exit_code == 0 and not result.failing(), [(f.check, f.message) for f in result.failing()]


def test_a_float32_checkpoint_written_through_vllm_auto_expects_the_dataset_s_dtype(gate, tmp_path):
    """speculators' generator runs the engine with dtype="auto", which runs a float32 checkpoint in the platform's
    preferred dtype: with its data_config.json, a float32 config.json does not make bfloat16 layers wrong; without
    one (no writer known), it does. Samples that differ from the dataset's dtype stand out either way."""
    model = model_config(tmp_path / "model", torch_dtype="float32")
    gate.write("data_0.pt", spec())
    assert [f.status for f in gate.findings("dtype", model=model)] == [BROKEN]
    write_data_config(gate.root, [0, 1, 2], H)
    assert not gate.findings("dtype", model=model)
    gate.write("data_1.pt", spec(dtype=torch.float16))
    gate.write("data_2.pt", spec())
    [odd] = gate.findings("dtype", model=model)
    assert "data_1.pt" in str(odd.consumer_location) and "expected bfloat16" in odd.message
