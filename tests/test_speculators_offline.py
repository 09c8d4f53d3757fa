"""speculators 0.3.0's own offline pipeline (the steps of its ``data_generation_offline.py``:
``tests/speculators_offline.py``), patched by compat.fix, on a tiny local conversation dataset and a six-layer
Llama (so the generator picks its own default layer ids, ``[2, 3, 3, 5]``): the gate passes what it writes, with
values and the HF reference, as written (bfloat16 from vLLM's ``dtype="auto"``, a layer id declared twice);
the same pipeline with a capture made wrong on purpose fails the reference; speculators' own training loader reads
every file."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from compat.extract.stage import child_env, copy_patched
from compat.gate.options import GateOptions
from compat.gate.runner import run_gate

from .conftest import ROOT
from .speculators_offline import RESULT
from .test_extract import patched  # noqa: F401 - the module fixture

pytestmark = [pytest.mark.slow, pytest.mark.runtime, pytest.mark.network]
GENERATOR = "speculators.data_generation.vllm_hidden_states_generator"


def _conversations(path: Path, count: int) -> Path:
    """ShareGPT-style turns (``from``/``value``) of words the tiny tokenizer knows."""
    from compat.models.tokenizer import _WORDS

    rng = random.Random(0)
    with path.open("w") as handle:
        for _ in range(count):
            turns = []
            for _ in range(rng.randint(1, 3)):
                turns.append({"from": "human", "value": " ".join(rng.choices(_WORDS, k=rng.randint(3, 40)))})
                turns.append({"from": "gpt", "value": " ".join(rng.choices(_WORDS, k=rng.randint(3, 120)))})
            handle.write(json.dumps({"conversations": turns}) + "\n")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from compat import models

    return models.build("llama", tmp_path_factory.mktemp("model") / "llama6", num_layers=6).path


def _pipeline(consumer: Path, model: Path, work: Path) -> Path:
    staged, _ = copy_patched(consumer, work / "consumer", GENERATOR)
    data = _conversations(work / "conversations.jsonl", 24)
    out = work / "out"
    env = child_env(staged, 1)
    env["HF_DATASETS_OFFLINE"] = "1"
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "speculators_offline.py"), str(model), str(data),
                           str(out)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    said = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith(RESULT))[len(RESULT):])
    assert said["saved"] == 24 and said["layer_ids"] == [2, 3, 3, 5]
    return out


@pytest.fixture(scope="module")
def written(patched, model, tmp_path_factory) -> Path:  # noqa: F811
    return _pipeline(patched, model, tmp_path_factory.mktemp("offline"))


def test_the_gate_passes_the_pipeline_s_own_data(written, model):
    result = run_gate(GateOptions(paths=(written,), values=True, reference=model, reference_samples=24))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    config = json.loads((written / "data_config.json").read_text())
    assert config["hidden_states"]["layer_ids"] == [2, 3, 3, 5]


def test_speculators_training_loader_reads_every_file(written, patched):  # noqa: F811
    staged, _ = copy_patched(patched, written.parent / "loader-consumer", GENERATOR)
    code = ("import sys; from speculators.train.data import Eagle3SampleFileDataset as D; d = D(max_len=512, "
            f"datapath={str(written)!r}); print(len(d), tuple(d[0]['hidden_states'].shape))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(staged, 1),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, shape = proc.stdout.split(maxsplit=1)
    assert int(count) == 24 and shape.strip().endswith(", 384)")  # three layers of 128 joined, the last apart


def test_a_wrong_capture_fails_the_reference(patched, model, tmp_path):  # noqa: F811
    """The shim made to keep output[0] alone of Llama's layers (whose residual is not yet added there)."""
    wrong = tmp_path / "wrong"
    subprocess.run(["cp", "-r", str(patched), str(wrong)], check=True)
    shim = next(wrong.rglob("_vllm_compat.py"))
    key = "'vllm.model_executor.models.llama.LlamaDecoderLayer': [((0, 1),"
    text = shim.read_text()
    assert key in text
    shim.write_text(text.replace(key, "'vllm.model_executor.models.llama.LlamaDecoderLayer': [((0,),"))
    out = _pipeline(wrong, model, tmp_path / "run")
    result = run_gate(GateOptions(paths=(out,), values=True, reference=model, reference_samples=24))
    assert result.exit_code == 1
    assert any(f.check == "reference" for f in result.failing())
