"""Readers and rules on small files of each layout: detection, forcing, damaged files, value rules, and the
guarantee that the gate leaves data files untouched."""

from __future__ import annotations

import hashlib
import json
import os
import pickle

import pytest

from compat.errors import CompatError
from compat.gate import GateOptions, Layout, read_file, run_gate
from compat.gate.expect import read_model_config
from compat.gate.read.safetensors_header import HeaderError, read_header

from .gate_files import layered, write_data_config, write_eagle, write_speculators, write_vllm

torch = pytest.importorskip("torch")

H = 32


def _ids(n: int) -> torch.Tensor:
    return torch.arange(3, 3 + n)


def _run(*paths, **kw):
    return run_gate(GateOptions(paths=tuple(paths), **kw))


def _rules(result) -> set[str]:
    return {f.check for f in result.failing()}


def test_each_layout_is_detected_and_passes(tmp_path):
    write_speculators(tmp_path / "spec" / "data_0.pt", _ids(9), layered(9, H, 4))
    write_vllm(tmp_path / "vllm" / "hs_0.safetensors", _ids(9), layered(9, H, 3))
    write_eagle(tmp_path / "eagle" / "data_0.ckpt", _ids(9), layered(9, H, 1, torch.float16)[0])
    for sub, layout, layers in (("spec", Layout.SPECULATORS_PT, 4), ("vllm", Layout.VLLM_SAFETENSORS, 3),
                                ("eagle", Layout.EAGLE, 1)):
        (view,) = read_file(str(tmp_path / sub / os.listdir(tmp_path / sub)[0])).samples
        assert view.layout is layout and len(view.layers) == layers and view.tokens == 9
        result = _run(tmp_path / sub, hidden_size=H, values=True)
        assert result.exit_code == 0, [f.message for f in result.failing()]
        assert dict(result.summary.layouts) == {layout.value: 1}


def test_eagle3_concatenated_layers_and_target_are_split_by_hidden_size(tmp_path):
    layers = layered(7, H, 4, torch.float32)
    write_eagle(tmp_path / "data_0.ckpt", _ids(7), torch.cat(layers[:3], dim=-1), target=layers[3])
    (view,) = read_file(str(tmp_path / "data_0.ckpt"), hidden_size=H).samples
    assert [t.shape for t in view.layers] == [(7, H)] * 4 and view.layers[-1].name == "target"
    # --layers counts the captured layers: EAGLE-3's target (the final-norm state) is not one of them.
    assert _run(tmp_path, hidden_size=H, layers=3, values=True).exit_code == 0
    (count,) = _run(tmp_path, hidden_size=H, layers=4).failing()
    assert count.check == "layer_count" and "target" in count.message
    assert "hidden_size" in _rules(_run(tmp_path, hidden_size=H + 8))


def test_list_file_holds_several_samples_and_findings_name_the_sample(tmp_path):
    good = {"input_ids": _ids(5), "hidden_states": layered(5, H, 2), "loss_mask": torch.ones(5, dtype=torch.long)}
    bad = {"input_ids": _ids(6), "hidden_states": layered(5, H, 2), "loss_mask": torch.ones(6, dtype=torch.long)}
    torch.save([good, bad], tmp_path / "batch.pt")
    result = _run(tmp_path, hidden_size=H)
    (finding,) = result.failing()
    assert finding.check == "seq_len" and finding.symbol == "batch.pt#1" and finding.consumer_location == "batch.pt:1"
    assert result.summary.samples == 2 and result.summary.files == 1


def test_layout_forced_with_the_wrong_name_is_a_layout_finding(tmp_path):
    write_speculators(tmp_path / "data_0.pt", _ids(4), layered(4, H, 2))
    assert _rules(_run(tmp_path, layout=Layout.EAGLE)) == {"layout"}
    assert _run(tmp_path, layout=Layout.SPECULATORS_PT).exit_code == 0
    write_vllm(tmp_path / "x.safetensors", _ids(4), layered(4, H, 2))
    (f,) = [f for f in _run(tmp_path / "x.safetensors", layout=Layout.SPECULATORS_PT).failing()]
    assert f.check == "layout" and "safetensors file" in f.message


def test_safetensors_header_reader_agrees_with_the_library(tmp_path):
    from safetensors import safe_open

    path = write_vllm(tmp_path / "a.safetensors", _ids(11), layered(11, H, 3))
    header = read_header(path)
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            assert list(header.tensors[name].shape) == f.get_slice(name).get_shape()
    assert header.tensors["hidden_states"].dtype == "bfloat16" and header.file_size == path.stat().st_size


@pytest.mark.parametrize("damage, words", [
    (lambda b: b[:-10], "truncated (10 bytes missing)"),
    (lambda b: b[:5], "fewer than the 8-byte header length"),
    (lambda b: (10**9).to_bytes(8, "little") + b[8:], "only"),
    (lambda b: b[:8] + b"!" + b[9:], "not valid JSON"),
    (lambda b: b + b"\0" * 16, "16 bytes follow the last tensor"),
])
def test_damaged_safetensors_is_a_readable_finding(tmp_path, damage, words):
    path = write_vllm(tmp_path / "a.safetensors", _ids(6), layered(6, H, 2))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(HeaderError, match=words.split("(")[0].strip()):
        read_header(path)
    (f,) = _run(tmp_path).failing()
    assert f.check == "readable" and words in f.message and "[HeaderError]" in f.message


class Payload:
    """An arbitrary object: loading it would need full unpickling, which the gate refuses."""


def test_unreadable_torch_files_are_findings_with_the_exception(tmp_path):
    write_speculators(tmp_path / "data_0.pt", _ids(4), layered(4, H, 2))
    good = (tmp_path / "data_0.pt").read_bytes()
    (tmp_path / "data_1.pt").write_bytes(good[: len(good) // 2])  # truncated zip
    torch.save({"input_ids": _ids(4), "obj": Payload()}, tmp_path / "data_2.pt")  # needs arbitrary unpickling
    (tmp_path / "data_3.pt").write_text("not a checkpoint")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "data_4.pt")  # a tensor dict of no known layout
    with open(tmp_path / "data_5.pt", "wb") as handle:
        pickle.dump({"x": 1}, handle)
    found = {f.symbol: f for f in _run(tmp_path).failing()}
    assert set(found) == {"data_1.pt", "data_2.pt", "data_3.pt", "data_4.pt", "data_5.pt"}
    assert found["data_2.pt"].check == "readable" and "UnpicklingError" in found["data_2.pt"].message
    assert "refused to unpickle it: Unsupported global: GLOBAL tests.test_gate_layouts.Payload" in \
        found["data_2.pt"].message
    assert "not a torch.save file" in found["data_3.pt"].message and "FormatError" in found["data_3.pt"].message
    assert "refused to unpickle" in found["data_5.pt"].message
    assert found["data_2.pt"].evidence.traceback and "torch" in found["data_2.pt"].evidence.traceback
    assert found["data_1.pt"].check == "readable" and "FormatError" in found["data_1.pt"].message
    assert found["data_1.pt"].message.startswith(f"truncated: {len(good) // 2} bytes of a zip archive")
    assert found["data_4.pt"].check == "layout" and "weights" in found["data_4.pt"].message
    assert all(f.message.strip() for f in found.values())


def test_loss_mask_and_token_id_rules(tmp_path):
    write_speculators(tmp_path / "a" / "data_0.pt", _ids(6), layered(6, H, 2), torch.ones(8, dtype=torch.long))
    write_speculators(tmp_path / "b" / "data_0.pt", _ids(6), layered(6, H, 2), torch.full((6,), 3))
    write_vllm(tmp_path / "c" / "hs_0.safetensors", torch.tensor([1, 2, 99999]), layered(3, H, 2))
    write_vllm(tmp_path / "d" / "hs_0.safetensors", torch.zeros(3), layered(3, H, 2))  # float ids
    assert _rules(_run(tmp_path / "a")) == {"loss_mask"}
    assert _run(tmp_path / "b").exit_code == 0 and _rules(_run(tmp_path / "b", values=True)) == {"loss_mask"}
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"hidden_size": H, "vocab_size": 1000, "num_hidden_layers": 4}))
    assert _rules(_run(tmp_path / "c", model=model, values=True)) == {"token_ids"}
    assert _rules(_run(tmp_path / "d")) == {"token_ids"}


def test_value_rules_zero_duplicate_and_order(tmp_path):
    layers = layered(12, H, 4)
    write_vllm(tmp_path / "zero" / "hs_0.safetensors", _ids(12), [layers[0], torch.zeros_like(layers[1])] +
               layers[2:])
    write_vllm(tmp_path / "dup" / "hs_0.safetensors", _ids(12), [layers[0], layers[1], layers[1], layers[3]])
    write_vllm(tmp_path / "reversed" / "hs_0.safetensors", _ids(12), layers[::-1])
    write_vllm(tmp_path / "inf" / "hs_0.safetensors", _ids(12),
               [layers[0], layers[1], layers[2].clone().index_fill_(0, torch.tensor([4]), float("inf")), layers[3]])
    # A zero layer also breaks the order (its RMS is 0): both rules speak.
    assert {"nonzero_layer", "layer_order"} == _rules(_run(tmp_path / "zero", values=True))
    (dup,) = _run(tmp_path / "dup", values=True).failing()
    assert dup.check == "distinct_layers" and "hidden_states[:, 1] and hidden_states[:, 2]" in dup.message
    (order,) = _run(tmp_path / "reversed", values=True).failing()
    assert order.check == "layer_order" and "less than half" in order.message
    assert _run(tmp_path / "reversed", values=True, ignore=frozenset({"layer_order"})).exit_code == 0
    (inf,) = _run(tmp_path / "inf", values=True).failing()
    assert inf.check == "finite" and f"{H} Inf, first at token 4" in inf.message


def test_layer_ids_order_follows_each_tools_convention(tmp_path):
    layers = layered(10, H, 3)
    # speculators keeps the order asked for: ids [29, 2, 16] store the deepest layer first.
    write_speculators(tmp_path / "spec" / "data_0.pt", _ids(10), [layers[2], layers[0], layers[1]])
    write_data_config(tmp_path / "spec", [29, 2, 16], H)
    assert _run(tmp_path / "spec", values=True).exit_code == 0
    # Ids in another order than data_config.json's judge the samples only when marked as overriding the file.
    assert "layer_order" in _rules(_run(tmp_path / "spec", values=True, layer_ids=(2, 16, 29),
                                        override_data_config=True))
    assert _rules(_run(tmp_path / "spec", values=True, layer_ids=(2, 16, 29))) == {"data_config"}


def test_expectations_from_dataset_majority_flag_outliers(tmp_path):
    for i in range(5):
        write_vllm(tmp_path / f"hs_{i}.safetensors", _ids(8), layered(8, H, 4 if i != 3 else 5))
    result = _run(tmp_path)
    (f,) = result.failing()
    assert f.check == "layer_count" and f.symbol == "hs_3.safetensors" and "4 of 5 samples" in f.message


def test_model_config_text_config_and_bad_configs(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(
        {"model_type": "kimi_k25", "text_config": {"hidden_size": 7168, "num_hidden_layers": 61,
                                                   "torch_dtype": "bfloat16", "vocab_size": 163840}}))
    info = read_model_config(tmp_path / "m")
    assert (info.hidden_size, info.num_layers, info.dtype, info.vocab_size) == (7168, 61, "bfloat16", 163840)
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(CompatError, match="unreadable config"):
        read_model_config(tmp_path / "bad.json")
    with pytest.raises(CompatError, match="no config.json"):
        read_model_config(tmp_path / "nowhere")
    write_vllm(tmp_path / "d" / "hs_0.safetensors", _ids(4), layered(4, H, 2))
    with pytest.raises(CompatError, match=r"outside the model's 61 decoder layers \(0 to 61"):
        _run(tmp_path / "d", model=tmp_path / "m", layer_ids=(2, 62))  # 61 is vLLM's id of the last output


def test_natural_order_and_dotfiles_skipped(tmp_path):
    for i in (10, 2, 1):
        write_vllm(tmp_path / f"hs_{i}.safetensors", _ids(4), layered(4, H, 2))
    (tmp_path / ".hs_3.safetensors.tmp").write_bytes(b"partial")
    (tmp_path / "hs_1.safetensors.lock").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not data")
    result = _run(tmp_path)
    assert [f.symbol for f in result.findings] == ["hs_1.safetensors", "hs_2.safetensors", "hs_10.safetensors"]


def test_the_gate_never_modifies_moves_or_deletes_data(tmp_path):
    write_speculators(tmp_path / "data_0.pt", _ids(6), layered(6, H, 2))
    write_vllm(tmp_path / "hs_0.safetensors", _ids(6), layered(6, H, 2))
    (tmp_path / "bad.safetensors").write_bytes(b"\x10" + b"\0" * 7 + b"{}")
    write_data_config(tmp_path, [0, 1], H)

    def snapshot():
        return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_mode)
                for p in sorted(tmp_path.iterdir())}

    before = snapshot()
    result = _run(tmp_path, values=True, hidden_size=H)
    assert result.exit_code == 1 and snapshot() == before


def test_empty_directory_and_missing_path_are_bad_input(tmp_path):
    with pytest.raises(CompatError, match="no hidden-state files"):
        _run(tmp_path)
    with pytest.raises(CompatError, match="no such file"):
        _run(tmp_path / "missing")
    with pytest.raises(CompatError, match="contradicts"):
        write_vllm(tmp_path / "hs.safetensors", _ids(4), layered(4, H, 2))
        _run(tmp_path, layers=3, layer_ids=(1, 2))


def test_torch_structure_reader_agrees_with_torch_load(tmp_path):
    from compat.gate.read.torch_header import NotPlain, TensorStub, read_structure

    base = torch.randn(40, H)
    obj = {"input_ids": torch.arange(7), "hidden_states": [base[3:10], base[10:17].t(), base[::2][:7]],
           "loss_mask": torch.ones(7, dtype=torch.bool), "half": torch.zeros(2, 3, dtype=torch.float16),
           "scalar": torch.tensor(1.5, dtype=torch.bfloat16), "n": 7}
    torch.save(obj, tmp_path / "views.pt")
    stubbed, loaded = read_structure(str(tmp_path / "views.pt")), torch.load(tmp_path / "views.pt", weights_only=True)

    def same(a, b):
        if isinstance(a, TensorStub):
            return a.shape == tuple(b.shape) and a.dtype == str(b.dtype)
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    assert same(stubbed, loaded)
    torch.save({"size": torch.Size([2, 3])}, tmp_path / "other.pt")  # a global plain tensors never need
    with pytest.raises(NotPlain, match="torch.Size"):
        read_structure(str(tmp_path / "other.pt"))
    assert read_file(str(tmp_path / "other.pt")).failure.error_type == "LayoutMismatch"  # torch.load read it
