"""Compile the warp-specialized Gluon forward (kernels_gluon_src.py) for sm_90 without a GPU.

Run in a fresh process without TRITON_INTERPRET (test_gluon_forward.py does), for every
variant below: the built-in mods' renderings (score mods reading captured tensors, the
inline-asm tanh, index-only and tensor-reading masks) at D=128, bf16 and fp16.
Prints one line per variant; exits 0 when all compiled, 2 when this Triton has no Gluon.
"""
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget

from cherenkov.attention import launch_gluon, mods
from cherenkov.attention.codegen import gluon_hopper, load_kernels
from cherenkov.attention.trace import trace_mods

SCALARS = ("irow", "snb", "snh", "snm", "sib", "sih", "sim", "Q_LEN", "KV_LEN", "H", "GROUPS",
           "NUM_M_BLOCKS", "HEAD_GROUP")


def compile_ws(kernels, traced, d: int, dtype: torch.dtype, tile_n: int = 128,
               stages: int = launch_gluon.STAGES, fma: bool = False) -> str:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    fn = kernels._attn_fwd_ws
    el, gel = ("bf16", gl.bfloat16) if dtype == torch.bfloat16 else ("fp16", gl.float16)
    s_layout, o_layout = launch_gluon._layouts(d, tile_n)
    cx = dict(ROWS=64, BLOCK_N=tile_n, D=d, STAGES=stages, S_LAYOUT=s_layout,
              O_LAYOUT=o_layout, HAS_SCORE_MOD=traced.score is not None,
              CONSUMER_REGS=launch_gluon.CONSUMER_REGS, FMA=fma)
    sig = {}
    for name in fn.arg_names:
        if name in cx:
            sig[name] = "constexpr"
        elif name in ("q_desc", "o_desc", "k_desc", "v_desc"):
            rows = 64 if name[0] in "qo" else tile_n
            layout = gl.NVMMASharedLayout.get_default_for([rows, d], gel)
            sig[name] = f"tensordesc<{el}[{rows},{d}],{layout!r}>"
        elif name == "LSE":
            sig[name] = "*fp32"
        elif name in ("KV_NUM", "KV_IDX", "FULL_NUM", "FULL_IDX"):
            sig[name] = "*i32"
        elif name == "sm_scale":
            sig[name] = "fp32"
        elif name[0] == "C" and name[1:].isdigit():
            t = traced.captured[int(name[1:])]
            sig[name] = "*fp32" if t.is_floating_point() else "*i64"
        else:
            sig[name] = "i32"
    src = GluonASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in cx.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": 4, "maxnreg": launch_gluon.MAX_REGS})
    return f"shared memory {kernel.metadata.shared} bytes"


def main() -> int:
    if not gluon_hopper():
        print("no Gluon Hopper language in this Triton")
        return 2
    slopes = torch.randn(16)
    ids = torch.zeros(256, dtype=torch.int64)
    variants = [("causal", None, mods.causal), ("softcap document", mods.tanh_softcap(30.0),
                mods.document(ids)), ("alibi causal", mods.alibi(slopes), mods.causal),
                ("window", None, mods.sliding_window(1024)), ("prefix", None, mods.prefix_lm(64)),
                ("relative bias", mods.relative_bias(torch.randn(16, 511)), mods.causal)]
    for name, score_mod, mask_mod in variants:
        traced = trace_mods(score_mod, mask_mod)
        kernels = load_kernels(traced, interpret=False, float_index=True)
        for d, dtype in ((128, torch.bfloat16), (128, torch.float16)):
            print(f"{name} D={d} {dtype}: {compile_ws(kernels, traced, d, dtype)}", flush=True)
        if name in ("causal", "window"):     # launch_gluon's variants: 64-key tiles, the fused
            # softmax, a third stage
            for kw in (dict(tile_n=64), dict(fma=True), dict(stages=3)):
                print(f"{name} {kw}: {compile_ws(kernels, traced, 128, torch.bfloat16, **kw)}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
