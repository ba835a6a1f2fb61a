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


NO_GLUON = 2      # a script's exit status where this Triton has no Gluon: the test skips


def run_script(path: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python path args...` without TRITON_INTERPRET, the repository on its path, output
    captured; skips the test on exit status NO_GLUON, fails it on any other non-zero exit,
    showing the output's tail."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, path, *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode == NO_GLUON:
        pytest.skip("this Triton has no Gluon")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done
