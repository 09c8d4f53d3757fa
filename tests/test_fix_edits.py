"""The LibCST edits of compat.fix on small sources: what each changes, that formatting and comments survive,
that applying an edit to its own output changes nothing, and that a target that is not there fails loudly
with the file, the line and the pattern."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from compat.fix.edits import (
    AddKeyword,
    EditNotFound,
    ImportShim,
    InsertAfter,
    ReplaceStatements,
    RouteCall,
    RouteImport,
)

SHIM = "pkg._vllm_compat"


def apply(edit, text: str) -> str:
    return edit.apply(cst.parse_module(textwrap.dedent(text))).code


def twice(edit, text: str) -> tuple[str, str]:
    once = apply(edit, text)
    return once, edit.apply(cst.parse_module(once)).code


def test_route_import_keeps_the_other_names_and_comments():
    src = """\
    import os  # a comment that stays
    from vllm.v1.core.kv_cache_utils import (  # why we need these
        get_kv_cache_config_from_groups,
        hash_block_tokens,
    )
    """
    edit = RouteImport("pkg/a.py", 2, "from vllm.v1.core.kv_cache_utils import ...",
                       module="vllm.v1.core.kv_cache_utils", names=("get_kv_cache_config_from_groups",), shim=SHIM)
    once, again = twice(edit, src)
    assert "import os  # a comment that stays" in once
    assert "# why we need these" in once
    assert "hash_block_tokens" in once.split(f"from {SHIM}")[0]
    assert f"from {SHIM} import get_kv_cache_config_from_groups" in once
    assert once.count("get_kv_cache_config_from_groups") == 1
    assert again == once


def test_route_import_of_every_name_replaces_the_statement():
    src = "from vllm.config import SchedulerConfig, VllmConfig\n"
    edit = RouteImport("a.py", 1, "p", module="vllm.config", names=("SchedulerConfig", "VllmConfig"), shim=SHIM)
    once = apply(edit, src)
    assert "vllm.config" not in once
    assert "SchedulerConfig," in once and "VllmConfig," in once
    compile(once, "a.py", "exec")


def test_route_call_with_receiver_becomes_a_shim_function():
    src = """\
    def step(self, out):
        result = self.executor.execute_model(out)  # keep me
        return result
    """
    edit = RouteCall("a.py", 2, "self.executor.execute_model(...)", callee="execute_model",
                     function="vllm_compat.execute_model", receiver=True)
    once, again = twice(edit, src)
    assert "result = vllm_compat.execute_model(self.executor, out)  # keep me" in once
    assert again == once


def test_route_call_without_arguments_and_with_extra_ones():
    src = "x = build()\n"
    edit = RouteCall("a.py", 1, "build()", callee="build", function="shim.build", extra_args=("cfg", "2"))
    assert apply(edit, src) == "x = shim.build(cfg, 2)\n"


def test_add_keyword_keeps_one_argument_per_line_and_hoists_a_shared_value():
    src = """\
    config = VllmConfig(
        model_config=model_config,
        scheduler_config=SchedulerConfig(
            max_num_seqs=4,
            max_model_len=128,
        ),
    )
    """
    edit = AddKeyword("a.py", 3, "SchedulerConfig(...)", callee="SchedulerConfig", keyword="is_encoder_decoder",
                      value="model_config.is_encoder_decoder")
    once, again = twice(edit, src)
    assert "        max_model_len=128,\n        is_encoder_decoder=model_config.is_encoder_decoder,\n" in once
    assert again == once
    hoist = AddKeyword("a.py", 3, "SchedulerConfig(...)", callee="SchedulerConfig", keyword="block_size",
                       value="model_config")
    src2 = src.replace("model_config=model_config", "model_config=ModelConfig(model='m')")
    out = apply(hoist, src2)
    assert out.startswith("model_config = ModelConfig(model='m')\n")
    assert "model_config=model_config," in out and "block_size=model_config" in out
    compile(out, "a.py", "exec")


def test_replace_and_insert_statements_in_a_function_body():
    src = """\
    def run(self):
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        return free
    """
    replace = ReplaceStatements("a.py", 3, "mem_get_info", expected=("free, total = torch.cuda.mem_get_info()",),
                                replacement="free, total = shim.memory(self)\n")
    once, again = twice(replace, src)
    assert "    free, total = shim.memory(self)\n" in once and "mem_get_info" not in once
    assert again == once
    insert = InsertAfter("a.py", 2, "empty_cache", expected="torch.cuda.empty_cache()", code="shim.after(self)")
    once, again = twice(insert, src)
    assert "    torch.cuda.empty_cache()\n    shim.after(self)\n    free, total" in once
    assert again == once


def test_import_shim_goes_after_the_last_import_and_only_when_used():
    src = "import os\nfrom x import y\n\nvalue = vllm_compat.thing()\n"
    edit = ImportShim("a.py", 0, "i", import_line="from pkg import _vllm_compat as vllm_compat",
                      alias="vllm_compat")
    once, again = twice(edit, src)
    assert once.splitlines()[2] == "from pkg import _vllm_compat as vllm_compat"
    assert again == once
    assert apply(edit, "import os\n") == "import os\n"


@pytest.mark.parametrize("edit, src", [
    (RouteImport("pkg/a.py", 1, "from vllm.config import SchedulerConfig", module="vllm.config",
                 names=("SchedulerConfig",), shim=SHIM), "from vllm.engine import SchedulerConfig\n"),
    (RouteCall("pkg/a.py", 2, "self.executor.execute_model(...)", callee="execute_model", function="s.execute",
               receiver=True), "x = 1\ny = self.executor.run(x)\n"),
    (AddKeyword("pkg/a.py", 1, "SchedulerConfig(...)", callee="SchedulerConfig", keyword="k", value="v"),
     "c = ModelConfig()\n"),
    (ReplaceStatements("pkg/a.py", 1, "free = mem()", expected=("free = mem()",), replacement="free = 0\n"),
     "free = other()\n"),
    (InsertAfter("pkg/a.py", 1, "empty()", expected="empty()", code="after()"), "full()\n"),
])
def test_a_target_that_is_not_there_fails_loudly(edit, src):
    with pytest.raises(EditNotFound) as info:
        apply(edit, src)
    message = str(info.value)
    assert f"pkg/a.py:{edit.line}" in message and repr(edit.pattern) in message
    assert "not what the fix was planned for" in message


def test_the_line_matters_not_only_the_text():
    """The same call on another line is not the target: a moved or duplicated line fails, it is not guessed."""
    src = "a = self.executor.execute_model(x)\n\nb = self.executor.execute_model(y)\n"
    edit = RouteCall("a.py", 2, "self.executor.execute_model(...)", callee="execute_model", function="s.e",
                     receiver=True)
    with pytest.raises(EditNotFound):
        apply(edit, src)
    out = apply(RouteCall("a.py", 3, "p", callee="execute_model", function="s.e", receiver=True), src)
    assert out == "a = self.executor.execute_model(x)\n\nb = s.e(self.executor, y)\n"
