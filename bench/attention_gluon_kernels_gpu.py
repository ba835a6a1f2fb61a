"""Which kernels each Gluon variant's causal forward+backward launches, and their GPU time
(torch.profiler), with the warnings the Gluon guards log -- to see whether a variant runs the
Gluon kernels it names (B=4 H=16 S=4096 D=128 bf16, the suite's shape):

    CHERENKOV_COMMIT=<sha> PYTHONPATH=. python3 bench/attention_gluon_kernels_gpu.py OUT_DIR [CASE]

CASE: causal (default), document8, sliding_window1024 or alibi (its variants: ALIBI_VARIANTS).
Per variant also: two do_bench runs, the host's time per call with the GPU kept busy
(host_us), and the caching allocator's device mallocs / frees during the timing. Writes OUT_DIR/attention_gluon_kernels[_CASE]_<pid>.md
(one file per process: the same case in several processes differed -- document8 0.74 vs
1.03-1.19 ms per call at d696106 with the same kernels and kernel times -- when the calls were
host-bound: the host's time per call swung 483-1447 us at 9a1c89c, before memo.py).
"""
from __future__ import annotations

import logging
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import cherenkov.attention as ca  # noqa: E402
from attention_bwd_tiles_gpu import kernel_table  # noqa: E402
from attention_gluon_variants_gpu import B, D, H, S, settings  # noqa: E402
from cherenkov.bench.report import script_meta  # noqa: E402
from cherenkov.bench.suites.attention import _doc_offsets, bench_ms, qkv  # noqa: E402

VARIANTS = {
    "triton only": dict(GLUON_FWD="off", DQ="off"),
    "default": dict(),
    "split dQ": dict(BWD_SPLIT_TILES=True),
    "default again": dict(),
    # last: is a slow default row the setting's or the moment's? (document8 at d696106:
    # "triton only" never slow, run first)
    "triton only again": dict(GLUON_FWD="off", DQ="off"),
}
ALIBI_VARIANTS = {     # its key-linear term out of each kernel's loop, or not (tile_terms.py)
    "default": dict(),
    "dK/dV's out too": dict(DKDV_TILE_TERMS=True),
    "dQ per score": dict(BWD_TILE_TERMS=False),
    "all per score": dict(TILE_TERMS=False, BWD_TILE_TERMS=False, DKDV_TILE_TERMS=False),
    "default again": dict(),
    "dK/dV's out too again": dict(DKDV_TILE_TERMS=True),
}


# the caching allocator's counters: device mallocs / frees or retries during the timing would
# put GPU idle time (cudaMalloc, cudaFree's sync) into do_bench's figure
_ALLOC_STATS = ("num_device_alloc", "num_device_free", "num_alloc_retries",
                "num_sync_all_streams")


def host_us(fn, grads, calls: int = 20) -> float:
    """The host's time per call of fn, the GPU kept busy meanwhile (a sleep kernel queued
    first, long enough to outlast the calls), so no call waits for the GPU: Python, launches
    and allocations only."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9 * calls * 2e-3))       # ~2 ms a call at ~2 GHz
    t0 = time.perf_counter()
    for _ in range(calls):
        for t in grads:
            t.grad = None
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage()[:400])


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    meta = script_meta()
    warn = _Warnings()
    logging.getLogger("cherenkov").addHandler(warn)
    q, k, v = qkv(B, H, S, D)
    do = torch.randn_like(q)
    case = sys.argv[2] if len(sys.argv) > 2 else "causal"
    score, mask = {
        "causal": (None, ca.causal), "sliding_window1024": (None, ca.sliding_window(S // 4)),
        "document8": (None, ca.document(offsets=_doc_offsets(S, 8, "cuda"), causal=True)),
        "alibi": (ca.alibi(ca.alibi_slopes(H, device="cuda")), ca.causal)}[case]
    bm = ca.block_mask(mask, B, H, S, S, device="cuda")
    run = lambda: ca.attention(q, k, v, score_mod=score, block_mask=bm,  # noqa: E731
                               mask_mod=mask)
    both = lambda: run().backward(do)  # noqa: E731
    lines = [f"# Kernels per Gluon variant, {case} forward+backward on {meta['gpu']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}, commit {meta['commit']}, "
             f"{meta['date']}; B={B} H={H} S={S} D={D} bf16", ""]
    for name, setting in (ALIBI_VARIANTS if case == "alibi" else VARIANTS).items():
        with settings(**setting):
            before = len(warn.seen)
            stats = torch.cuda.memory_stats()
            ms = [bench_ms(both, grad_to_none=[q, k, v]) for _ in range(2)]
            allocs = {k_: torch.cuda.memory_stats().get(k_, 0) - stats.get(k_, 0)
                      for k_ in _ALLOC_STATS}
            host = host_us(both, [q, k, v])
            table = kernel_table(both, top=None)
            new = warn.seen[before:]
        lines += [f"## {name} ({setting}): forward+backward {ms[0]:.4f}, {ms[1]:.4f} ms "
                  f"(two do_bench runs); host {host:.0f} us per call; allocator during "
                  f"them: {allocs}", ""]
        lines += [f"- {ms_k:.4f} ms  `{kname}`" for kname, ms_k in table.items()]
        lines += [f"- WARNING: {w}" for w in new] + [""]
        print("\n".join(lines[-len(table) - len(new) - 3:]), flush=True)
    stem = "attention_gluon_kernels" + ("" if case == "causal" else f"_{case}") \
        + f"_{os.getpid()}"
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
