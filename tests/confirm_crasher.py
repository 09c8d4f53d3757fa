"""A stand-in for the engine checks in tests of ``compat.confirm.run_child``: it records steps as they do,
prints to its log, then ends as the spec says (``end``, or ``end_by_dtype`` for the spec's dtype): by a signal,
by hanging, by exiting without a result, by raising, by the engine refusing the model (``unsupported``), or
with a result (``ok``)."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

from compat.cache import atomic_write_text
from compat.confirm.engine import record_steps_to, step


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    record_steps_to(Path(argv[2]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the signals below
    step("start the engine (LLM)")
    print("engine started", flush=True)
    step("executor.execute_model (first call)")
    print("about to run the kernel", flush=True)
    end = spec["end_by_dtype"][spec["dtype"]] if "end_by_dtype" in spec else spec["end"]
    if end in ("ok", "raise", "unsupported"):
        result = {"check": spec["check"], "observed": True} if end == "ok" else {
            "check": spec["check"], "error": f"RuntimeError: expect weight to be bfloat16, not {spec['dtype']}"}
        if end == "unsupported":
            result = {"check": spec["check"], "unsupported": "NotImplementedError: MLA is not supported on CPU."}
        atomic_write_text(Path(argv[1]), json.dumps(result))
        return 0
    if end == "hang":
        time.sleep(600)
    if end == "exit":
        return 3
    os.kill(os.getpid(), getattr(signal, end))
    time.sleep(5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
