"""The tiny-model builder: every architecture loads in transformers, tokenizers are local and fast, and the
predictable model's hidden states are the values its docstring promises (exactly)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compat.errors import CompatError
from compat.models import ARCHITECTURES, build

from .conftest import ROOT

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {arch: build(arch, root / arch) for arch in ARCHITECTURES}


def _forward(path, ids):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path))
    with torch.no_grad():
        return model, model(torch.tensor([ids]), output_hidden_states=True).hidden_states


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_each_architecture_loads_and_runs(built, arch):
    model_dir = built[arch].path
    config = json.loads((model_dir / "config.json").read_text())
    assert config["hidden_size"] == 128 and config["num_hidden_layers"] == 4 and config["dtype"] == "float32"
    assert config["architectures"] == [built[arch].architecture]
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    assert tok.is_fast and tok.eos_token_id == config["eos_token_id"] == 1
    text = "the hidden state of layer 12, batch 7."
    ids = tok(text).input_ids
    assert tok.decode(ids) == text and max(ids) < config["vocab_size"]
    model, hidden = _forward(model_dir, ids)
    assert len(hidden) == 5 and hidden[0].shape == (1, len(ids), 128)
    assert all(torch.isfinite(h).all() for h in hidden)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False).startswith("<|user|>")


def test_deepseek_satisfies_vllm_cpu_constraints(built):
    config = json.loads((built["deepseek_v3"].path / "config.json").read_text())
    assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576  # the CPU MLA backend's only latent size
    assert config["topk_method"] == "noaux_tc" and config["scoring_func"] == "sigmoid"
    assert config["n_routed_experts"] == 4 and config["n_shared_experts"] == 1
    assert config.get("num_nextn_predict_layers", 0) == 0


def test_predictable_model_values_are_exact(built):
    ids = [5, 17, 250, 3, 999]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(built["predictable"].path))
    outputs = []  # HF's last hidden_states entry is after the final norm: take layer outputs from hooks
    for layer in model.model.layers:
        layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    tokens = torch.tensor(ids, dtype=torch.float32)
    for k in range(4):  # HF hidden_states[k] is the state entering decoder layer k
        entering, after = hidden[k][0], outputs[k][0]
        assert torch.equal(entering[:, 1:], torch.full_like(entering[:, 1:], float(k)))
        assert torch.equal(after[:, 1:], torch.full_like(after[:, 1:], built["predictable"].expected_after_layer(k)))
        assert torch.equal(after[:, 0], tokens + k + 1)
    with pytest.raises(ValueError):
        built["llama"].expected_after_layer(0)


def test_random_weights_differ_by_seed_and_dtype_is_honoured(tmp_path):
    a = build("llama", tmp_path / "a", seed=1, dtype="bfloat16", num_layers=2, hidden_size=64)
    b = build("llama", tmp_path / "b", seed=2, dtype="bfloat16", num_layers=2, hidden_size=64)
    from safetensors.torch import load_file

    wa, wb = load_file(a.path / "model.safetensors"), load_file(b.path / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.weight"
    assert wa[name].dtype == torch.bfloat16 and not torch.equal(wa[name], wb[name])
    assert json.loads((a.path / "config.json").read_text())["dtype"] == "bfloat16"


def test_refuses_occupied_directory_and_unknown_arch(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(CompatError, match="not an empty directory"):
        build("llama", tmp_path / "x")
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"
    with pytest.raises(CompatError, match="unknown architecture"):
        build("gpt2", tmp_path / "y")
    assert not (tmp_path / "y").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "compat.models", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_cli_builds_and_reports_bad_input_in_one_line(tmp_path):
    ok = _cli("build", "qwen3", "m", "--layers", "2", "--hidden-size", "64", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "Qwen3ForCausalLM" in ok.stdout and (tmp_path / "m" / "tokenizer.json").exists()
    for args in (("build", "gpt2", "z"), ("build", "llama", "m"), ("build", "llama", "z", "--dtype", "int8")):
        bad = _cli(*args, cwd=tmp_path)
        lines = [line for line in bad.stderr.splitlines() if line.strip()]
        assert bad.returncode == 2 and len(lines) == 1 and "Traceback" not in bad.stderr, bad.stderr
