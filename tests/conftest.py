"""Test-wide setup: generated kernels run in Triton's interpreter on CPU.

TRITON_INTERPRET must be set before triton is first imported; slow tests (the full OpInfo
sweep) run only with CHERENKOV_SLOW_TESTS=1.
"""
import os

import torch  # noqa: E402  (only to ask whether a GPU is here)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# the Triton renderer is what runs on GPUs: test it by default; the C++ backend is
# exercised by tests that ask for it (cpu_backend="cpp")
os.environ.setdefault("CHERENKOV_CPU_BACKEND", "triton")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if os.environ.get("CHERENKOV_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set CHERENKOV_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def calls(monkeypatch):
    """Counts calls of the cherenkov::flex_attention ops' forward and backward
    (attention/flex_op.py): whether a compiled graph ran our attention kernels."""
    from cherenkov.attention import flex_op
    seen = {"forward": 0, "backward": 0}
    for name in seen:
        real = getattr(flex_op, name)

        def counted(*args, _real=real, _name=name):
            seen[_name] += 1
            return _real(*args)
        monkeypatch.setattr(flex_op, name, counted)
    return seen


@pytest.fixture
def submitted_jobs(monkeypatch):
    """The compile jobs handed to the worker pool (runtime/parallel_compile.py), which still
    compiles them."""
    from cherenkov.runtime import parallel_compile
    submitted = []
    real_submit = parallel_compile.submit

    def spy(jobs, requested=-1):
        submitted.extend(jobs)
        return real_submit(jobs, requested)
    monkeypatch.setattr(parallel_compile, "submit", spy)
    return submitted
