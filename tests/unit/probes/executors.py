"""vLLM-shaped executor, worker and model runner trees the rpc, reply-shape and protocol tables share."""

from __future__ import annotations

RUNNER_TWO_PHASE = '''
    class GPUModelRunner:
        def execute_model(self, scheduler_output):
            if self.execute_model_state is not None:
                raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
            if scheduler_output.total_num_scheduled_tokens:
                return None
            return self.output
'''

RUNNER_ONE_PHASE = '''
    class GPUModelRunner:
        def execute_model(self, scheduler_output):
            return self.output
'''

WORKER = '''
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner


    class Worker:
        def __init__(self):
            self.model_runner: GPUModelRunner = GPUModelRunner()

        def get_kv_cache_spec(self):
            return {}
'''

RPC_SINGLE = '''
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, unique_reply_rank=None):
            responses = self._run(method)
            return responses[0] if unique_reply_rank is not None else responses
'''

RPC_LIST = '''
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, unique_reply_rank=None):
            responses = self._run(method)
            if unique_reply_rank is None:
                return responses
            return [responses[unique_reply_rank]]
'''

RPC_NO_RANK = '''
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            return self._run(method)
'''

EXECUTOR = '''
    class MultiprocExecutor:
        def execute_model(self, scheduler_output):
            return self.rpc("execute_model")
{sample}
{rpc}
'''

SAMPLE = '''
        def sample_tokens(self, grammar_output):
            return self.rpc("sample_tokens")
'''


def build(rpc: str = RPC_SINGLE, runner: str = RUNNER_TWO_PHASE, sample: bool = True,
          worker: str | None = WORKER, wrapper: str = "") -> dict[str, str]:
    """A build with ``vllm.v1.executor.multiproc_executor.MultiprocExecutor`` and the default worker class."""
    files = {
        "vllm/v1/__init__.py": "",
        "vllm/v1/executor/__init__.py": "",
        "vllm/v1/executor/multiproc_executor.py": EXECUTOR.format(sample=SAMPLE if sample else "", rpc=rpc),
        "vllm/v1/worker/__init__.py": "",
        "vllm/v1/worker/gpu_model_runner.py": runner,
        "vllm/v1/worker/worker_base.py": "class WorkerWrapperBase:\n" + (wrapper or "    pass\n"),
    }
    if worker is not None:
        files["vllm/v1/worker/gpu_worker.py"] = worker
    return files
