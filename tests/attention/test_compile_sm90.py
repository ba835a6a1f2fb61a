"""Every generated kernel compiles for Hopper (sm_90) through Triton and ptxas, on the CPU."""
import os

from tests.sm90_compiling import needs_nvidia_backend, run_script


@needs_nvidia_backend
def test_kernels_compile_for_sm90():
    done = run_script(os.path.join(os.path.dirname(__file__), "sm90_compile.py"))
    lines = [line for line in done.stdout.splitlines() if line.endswith("bytes")]
    assert len(lines) == 86 and all(": ok," in line for line in lines)


@needs_nvidia_backend
def test_lookahead_loops_compile_for_sm90_without_spills_in_their_loops():
    """The lookahead loops (launch.FWD_LOOKAHEAD / DQ_LOOKAHEAD) hold the next tile's scores
    beside the accumulator: on two warpgroups (tuning's "fwd_tma_la" / "dq_la") their tile
    loops spill nothing to local memory (the forward nowhere)."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "attention_sass_cpu.py")
    first = run_script(script, "fwd", "alibi", "--lookahead").stdout.splitlines()[0]
    assert first.startswith("fwd alibi:") and "LDL 0, STL 0" in first
    lines = run_script(script, "dq", "causal", "--lookahead", "--warps", "8").stdout.splitlines()
    # blocks with tensor-core instructions (the tile loops): no LDL (the kernel's setup and
    # final store may reload a few registers)
    loops = [cells for cells in (line.split("|") for line in lines if line.startswith("| .L_x"))
             if cells[5].strip() != "0"]
    assert loops and all(cells[3].strip() == "0" for cells in loops)
