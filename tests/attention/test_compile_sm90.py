"""Every generated kernel compiles for Hopper (sm_90) through Triton and ptxas, on the CPU."""
import os

from tests.sm90_compiling import needs_nvidia_backend, run_script


@needs_nvidia_backend
def test_kernels_compile_for_sm90():
    done = run_script(os.path.join(os.path.dirname(__file__), "sm90_compile.py"))
    lines = [line for line in done.stdout.splitlines() if line.endswith("bytes")]
    assert len(lines) == 86 and all(": ok," in line for line in lines)
