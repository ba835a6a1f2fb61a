"""Compile the warp-specialized Gluon forward and dQ kernels (kernels_gluon_src.py,
kernels_gluon_bwd_src.py) for sm_90 without a GPU.

Run in a fresh process without TRITON_INTERPRET (test_gluon_forward.py does), for every
variant below: the built-in mods' renderings (score mods reading captured tensors, the
inline-asm tanh, index-only and tensor-reading masks) -- the forward at D=128, bf16 and fp16,
the dQ kernel at D=128 and 64, bf16; ALiBi's also without its tile terms (tile_terms.py).
Prints one line per variant; exits 0 when all compiled, 2 when this Triton has no Gluon.
"""
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget

from cherenkov.attention import launch_gluon, launch_gluon_bwd, mods
from cherenkov.attention.codegen import gluon_hopper, load_kernels
from cherenkov.attention.tile_terms import has_tile_terms
from cherenkov.attention.trace import trace_mods

SCALARS = ("irow", "snb", "snh", "snm", "sib", "sih", "sim", "Q_LEN", "KV_LEN", "H", "GROUPS",
           "NUM_M_BLOCKS", "HEAD_GROUP")


def build(fn, traced, d: int, dtype: torch.dtype, cx: dict, tile_n: int):
    """fn (a Gluon kernel of the generated module) compiled for sm_90 with constexprs cx."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    el, gel = ("bf16", gl.bfloat16) if dtype == torch.bfloat16 else ("fp16", gl.float16)
    sig = {}
    for name in fn.arg_names:
        if name in cx:
            sig[name] = "constexpr"
        elif name.endswith("_desc"):
            rows = tile_n if name in ("k_desc", "v_desc") else 64
            layout = gl.NVMMASharedLayout.get_default_for([rows, d], gel)
            sig[name] = f"tensordesc<{el}[{rows},{d}],{layout!r}>"
        elif name in ("LSE", "DELTA"):
            sig[name] = "*fp32"
        elif name == "O":
            sig[name] = f"*{el}"
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
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4, "maxnreg": launch_gluon.MAX_REGS})


def _describe(kernel) -> str:
    return f"shared memory {kernel.metadata.shared} bytes; {resources(kernel.asm['cubin'])}"


def resources(cubin: bytes) -> str:
    """cuobjdump's registers / spills / stack line, where Triton ships cuobjdump."""
    import os
    import subprocess
    import tempfile
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                        "cuobjdump")
    if not os.path.exists(tool):
        return "no cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                             text=True).stdout
    return " ".join(line.strip() for line in out.splitlines() if "REG" in line)


def compile_ws(kernels, traced, d: int, dtype: torch.dtype, tile_n: int = 128,
               stages: int = launch_gluon.STAGES, fma: bool = False, split: bool = False,
               raw: bool = False, tile_terms: bool = True):
    """The forward (raw: the compiled kernel, else its resources' line); tile_terms as
    launch_gluon.TILE_TERMS."""
    s_layout, o_layout = launch_gluon._layouts(d, tile_n)
    cx = dict(ROWS=64, BLOCK_N=tile_n, D=d, STAGES=stages, S_LAYOUT=s_layout,
              O_LAYOUT=o_layout, HAS_SCORE_MOD=traced.score is not None,
              CONSUMER_REGS=launch_gluon.CONSUMER_REGS, FMA=fma, SPLIT=split,
              TILE_TERMS=tile_terms and has_tile_terms(traced))
    kernel = build(kernels._attn_fwd_ws, traced, d, dtype, cx, tile_n)
    return kernel if raw else _describe(kernel)


def compile_dq(kernels, traced, d: int, dtype: torch.dtype, tile_n: int = 128,
               fused: bool = True, split: bool = False, raw: bool = False,
               tile_terms: bool = True):
    """The dQ kernel (kernels_gluon_bwd_src; raw: the compiled kernel); tile_terms as
    launch_gluon_bwd.TILE_TERMS."""
    s_layout, o_layout = launch_gluon._layouts(d, tile_n)
    cx = dict(ROWS=64, BLOCK_N=tile_n, D=d, STAGES=dict(launch_gluon_bwd.STAGES)[tile_n],
              S_LAYOUT=s_layout, O_LAYOUT=o_layout, HAS_SCORE_MOD=traced.score is not None,
              FUSED_DELTA=fused, CONSUMER_REGS=launch_gluon.CONSUMER_REGS, SPLIT=split,
              TILE_TERMS=tile_terms and has_tile_terms(traced))
    kernel = build(kernels._attn_bwd_dq_ws, traced, d, dtype, cx, tile_n)
    return kernel if raw else _describe(kernel)


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
        print(f"{name} split: {compile_ws(kernels, traced, 128, torch.bfloat16, split=True)}",
              flush=True)
        for d in (128, 64):
            print(f"{name} dQ D={d}: {compile_dq(kernels, traced, d, torch.bfloat16)}", flush=True)
        print(f"{name} dQ split: {compile_dq(kernels, traced, 128, torch.bfloat16, split=True)}",
              flush=True)
        if name == "causal":         # delta read, not computed (an lse gradient); 64-key tiles
            for kw in (dict(fused=False), dict(tile_n=64)):
                print(f"{name} dQ {kw}: {compile_dq(kernels, traced, 128, torch.bfloat16, **kw)}",
                      flush=True)
        if name == "alibi causal":       # its linear term per score (launch's TILE_TERMS off)
            print(f"{name} no tile terms: "
                  f"{compile_ws(kernels, traced, 128, torch.bfloat16, tile_terms=False)}")
            print(f"{name} dQ no tile terms: "
                  f"{compile_dq(kernels, traced, 128, torch.bfloat16, tile_terms=False)}")
        if name in ("causal", "window"):     # launch_gluon's variants: 64-key tiles, the fused
            # softmax, a third stage
            for kw in (dict(tile_n=64), dict(fma=True), dict(stages=3)):
                print(f"{name} {kw}: {compile_ws(kernels, traced, 128, torch.bfloat16, **kw)}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
