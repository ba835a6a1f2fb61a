"""Does this machine's Triton warp-specialize the attention kernels' tile loops for sm_90?
Compiled on the CPU (no GPU): each kernel (forward with descriptors, dQ, dK/dV; causal, the
suite's D=128 configurations, bench/attention_sass_cpu.py) with every tile loop marked
`tl.range(0, n, warp_specialize=True)`, on 4 and 8 warps, against the plain loop: whether it
compiles, whether the TTGIR holds warp-specialized partitions (`ttg.warp_specialize`), and
the SASS instruction and spill counts.

    env -u TRITON_INTERPRET .venv/bin/python bench/attention_ws_cpu.py OUT_DIR

Writes OUT_DIR/attention_ws_cpu.md and .json. (On the H200 machine, Triton 3.6 failed the
same loops on 4 warps: 2026-12-02_attention_ws_h200_38bc4d1.md.)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import attention_sass_cpu as sass_cpu  # noqa: E402
from attention_ws_gpu import mark_loops  # noqa: E402
from cherenkov.attention import codegen  # noqa: E402
from cherenkov.bench.report import md_table, save_pair, script_meta  # noqa: E402

@triton.jit
def _control(QD, KD, VD, O, n, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    """A bare flash-attention forward loop (no mask, no index lists): the control."""
    q = QD.load([0, 0])
    acc = tl.zeros([BM, D], tl.float32)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    for it in tl.range(0, n, warp_specialize=True):
        s = tl.dot(q, KD.load([it * BN, 0]).T)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.bfloat16), VD.load([it * BN, 0]), acc * alpha[:, None])
        m_i = m_new
    tl.store(O + tl.arange(0, BM)[:, None] * D + tl.arange(0, D)[None, :], acc / l_i[:, None])


def control(arch: int, warps: int) -> dict:
    """The control loop compiled for sm_<arch>: compiles, partitions, warps after the pass."""
    sig = {"QD": "tensordesc<bf16[128,128]>", "KD": "tensordesc<bf16[64,128]>",
           "VD": "tensordesc<bf16[64,128]>", "O": "*fp32", "n": "i32", "BM": "constexpr",
           "BN": "constexpr", "D": "constexpr"}
    src = ASTSource(fn=_control, signature=sig, constexprs={(5,): 128, (6,): 64, (7,): 128})
    try:
        c = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                           options={"num_warps": warps, "num_stages": 2})
    except Exception as e:  # noqa: BLE001
        return dict(compiles=False, error=f"{type(e).__name__}: {str(e)[-80:]}")
    return dict(compiles=True, partitions=c.asm["ttgir"].count("ttg.warp_specialize"),
                warps_after=c.metadata.num_warps)


def main(out_dir: str) -> None:
    plain = codegen.KERNELS
    assert plain.count("for it in range(0, n):") == 3, "expected the three tile-loop helpers"
    ttgir: list[str] = []
    compile_ = triton.compile

    def keeping_ttgir(*args, **kwargs):
        compiled = compile_(*args, **kwargs)
        ttgir.append(compiled.asm.get("ttgir", ""))
        return compiled
    sass_cpu.triton.compile = keeping_ttgir
    rows, data = [], []
    for marked in (False, True):
        codegen.KERNELS = plain
        if marked:
            mark_loops(("n",))           # attention_ws_gpu's marking, as on the GPU
        for kernel in ("fwd", "dq", "dkdv"):
            for warps in (4, 8):
                row = dict(kernel=kernel, warps=warps, warp_specialize=marked)
                try:
                    ops = [op for block in sass_cpu.blocks(sass_cpu.sass_of(
                        kernel, "causal", warps, None, False)).values() for op in block]
                    assert ttgir and ttgir[-1], "no TTGIR kept"
                    row.update(compiles=True, partitions=ttgir[-1].count("ttg.warp_specialize"),
                               instructions=len(ops), ldl=ops.count("LDL"))
                except Exception as e:  # noqa: BLE001 -- a failing pass is the finding
                    row.update(compiles=False, error=f"{type(e).__name__}: {str(e)[-80:]}")
                data.append(row)
                rows.append([kernel, warps, "yes" if marked else "no",
                             "yes" if row["compiles"] else "no", row.get("partitions", ""),
                             row.get("instructions", ""), row.get("ldl", ""),
                             row.get("error", "").replace("\n", " ")])
                print(rows[-1], flush=True)
    codegen.KERNELS = plain
    sass_cpu.triton.compile = compile_
    controls = []
    for arch, warps in ((90, 4), (90, 8), (100, 4)):
        c = control(arch, warps)
        data.append(dict(kernel="control", arch=arch, warps=warps, **c))
        controls.append([f"sm_{arch}", warps, "yes" if c["compiles"] else "no",
                         c.get("partitions", ""), c.get("warps_after", ""), c.get("error", "")])
    meta = script_meta() | {"triton": triton.__version__}
    text = "\n".join([
        "# Warp specialization of the attention tile loops for sm_90, compiled on the CPU", "",
        f"{meta['date']}, Triton {meta['triton']}, commit {meta['commit']}. Causal, D=128; "
        "partitions: `ttg.warp_specialize` ops in the TTGIR (0: the loop was left as it was).",
        "", *md_table(["kernel", "warps", "warp_specialize", "compiles", "partitions",
                       "instructions", "LDL", "error"], rows), "",
        "Control: a bare flash-attention forward loop (no mask, no index lists) marked the "
        "same way, for Hopper and for Blackwell (warps after: the kernel's warps once the "
        "pass added its producer partition).", "",
        *md_table(["target", "warps", "compiles", "partitions", "warps after", "error"],
                  controls)]) + "\n"
    save_pair(out_dir, "attention_ws_cpu", text, {"meta": meta, "rows": data})
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
