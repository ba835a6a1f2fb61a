"""Every generated kernel compiles for Hopper (sm_90) through Triton and ptxas, on the CPU."""
import os

from tests.sm90_compiling import needs_nvidia_backend, run_script


@needs_nvidia_backend
def test_kernels_compile_for_sm90():
    done = run_script(os.path.join(os.path.dirname(__file__), "sm90_compile.py"))
    lines = [line for line in done.stdout.splitlines() if line.endswith("bytes")]
    assert len(lines) == 86 and all(": ok," in line for line in lines)


@needs_nvidia_backend
def test_lookahead_forward_compiles_for_sm90_without_spills():
    """The lookahead loop (launch.FWD_LOOKAHEAD) holds the next tile's scores beside the
    accumulator: on two warpgroups (tuning's "fwd_tma_la") nothing spills to local memory."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "attention_sass_cpu.py")
    first = run_script(script, "fwd", "alibi", "--lookahead").stdout.splitlines()[0]
    assert first.startswith("fwd alibi:") and "LDL 0, STL 0" in first
