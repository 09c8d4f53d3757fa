"""The model conventions read statically, on a small tree shaped like vLLM's model code."""

from __future__ import annotations

from pathlib import Path

from compat.facts import architectures
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo

# Qwen3Model reuses Qwen2Model's __init__ and passes its own layer class as a keyword: the class name is
# bound in qwen3.py, where the keyword is written, not in qwen2.py, where the lambda calls it (as in vLLM
# 0.11.0 to 0.24.0; a runtime reading of Qwen3ForCausalLM sees Qwen3DecoderLayer).
FILES = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/registry.py": '_MODELS = {"Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM")}\n',
    "vllm/model_executor/models/utils.py": "def make_layers(n, layer_fn, prefix):\n    return 0, n, []\n",
    "vllm/model_executor/models/qwen2.py": '''
from vllm.model_executor.models.utils import make_layers


class Qwen2DecoderLayer:
    def forward(self, positions, hidden_states, residual):
        return hidden_states, residual


class Qwen2Model:
    def __init__(self, *, vllm_config, prefix: str = "", decoder_layer_type: type = Qwen2DecoderLayer):
        self.start_layer, self.end_layer, self.layers = make_layers(
            4, lambda prefix: decoder_layer_type(config=vllm_config, prefix=prefix), prefix=f"{prefix}.layers")

    def forward(self, input_ids, positions):
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual)
        return hidden_states
''',
    "vllm/model_executor/models/qwen3.py": '''
from .qwen2 import Qwen2Model


class Qwen3DecoderLayer:
    def forward(self, positions, hidden_states, residual, extra=None):
        return hidden_states, residual


class Qwen3Model(Qwen2Model):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix, decoder_layer_type=Qwen3DecoderLayer)


class Qwen3ForCausalLM:
    def __init__(self, *, vllm_config, prefix: str = ""):
        self.model = Qwen3Model(vllm_config=vllm_config, prefix=prefix)

    def forward(self, input_ids, positions):
        return self.model(input_ids, positions)
''',
}


def test_a_layer_class_passed_to_super_init_is_resolved_where_it_is_passed(tmp_path: Path):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    surface = StaticSurface(tmp_path, BuildInfo("vllm", "0.0.0", "test tree", "static", str(tmp_path)))
    facts = architectures.read(surface, "Qwen3ForCausalLM")
    assert facts.path == ("model",) and facts.base == "vllm.model_executor.models.qwen3.Qwen3Model"
    assert facts.layer is not None and facts.layer.cls == "vllm.model_executor.models.qwen3.Qwen3DecoderLayer"
    assert [p.name for p in facts.layer.parameters] == ["positions", "hidden_states", "residual", "extra"]
