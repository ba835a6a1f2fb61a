"""Compiling kernels for Hopper (sm_90) on a machine without a GPU, for the tests that do:
Triton's frontend, its GPU passes and ptxas run on the CPU, in a fresh process without
TRITON_INTERPRET (the test session runs Triton in interpreter mode)."""
import os
import subprocess
import sys

import pytest


def _nvidia_backend_present() -> bool:
    try:
        from triton.backends.nvidia import compiler  # noqa: F401
    except Exception:
        return False
    return True


needs_nvidia_backend = pytest.mark.skipif(not _nvidia_backend_present(),
                                          reason="Triton's NVIDIA backend is missing")


def run_script(path: str, *args: str) -> subprocess.CompletedProcess:
    """`python path args...` without TRITON_INTERPRET, output captured; fails the test on a
    non-zero exit, showing the output's tail."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, path, *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done
