"""Compile the generated attention kernels for sm_90 (Hopper) without a GPU.

Run in a fresh process without TRITON_INTERPRET (test_compile_sm90.py does): Triton's
frontend, its GPU passes and ptxas all run on the CPU, so errors that the interpreter
cannot see (types, layouts, shared memory) show up here. Prints one line per kernel.
"""
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from cherenkov.attention import mods
from cherenkov.attention.codegen import load_kernels
from cherenkov.attention.tile_terms import rows_from_offsets
from cherenkov.attention.trace import trace_mods

POINTERS = {"Q", "K", "V", "O", "DO", "DK", "DV", "DQ", "DS"}
FLOAT_POINTERS = {"LSE", "DELTA", "O_PART", "LSE_PART"}
INT8_POINTERS = {"BLK_FULL", "STATE"}
INT_POINTERS = {"KV_NUM", "KV_IDX", "FULL_NUM", "FULL_IDX", "Q_NUM", "Q_IDX", "BLK_NUM", "BLK_IDX",
                "NUM_P", "IDX_P", "NUM_F", "IDX_F"}


def signature(fn, constexprs, captured_types):
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in POINTERS:
            sig[name] = "*bf16"
        elif name in FLOAT_POINTERS or (name[0] == "G" and name[1:].isdigit()):
            sig[name] = "*fp32"
        elif name in INT8_POINTERS:
            sig[name] = "*i8"
        elif name in INT_POINTERS:
            sig[name] = "*i32"
        elif name in captured_types:
            sig[name] = captured_types[name]
        elif name == "sm_scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_one(fn, constexprs, captured_types, num_warps, num_stages):
    src = ASTSource(fn=fn, signature=signature(fn, constexprs, captured_types),
                    constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": num_warps, "num_stages": num_stages,
                                     "enable_fp_fusion": True})
    print(f"{fn.__name__}: ok, shared memory {kernel.metadata.shared} bytes", flush=True)


def main() -> int:
    slopes = torch.randn(16, requires_grad=True)
    ids = torch.zeros(64, dtype=torch.int64)
    # float_index as the API renders sequences below 2**22 (the ALiBi one without it too);
    # softcap's score / 30 is a reciprocal product, the last variant's index quotient the
    # fma-corrected one (_div_const)
    variants = [(None, mods.causal, True), (mods.tanh_softcap(30.0), mods.document(ids), True),
                (mods.alibi(slopes), mods.causal, True), (mods.alibi(slopes), mods.causal, False),
                (lambda s, b, h, q, kv: s + (kv - q).float() / 41, mods.causal, True)]
    for score_mod, mask_mod, float_index in variants:
        traced = trace_mods(score_mod, mask_mod)
        kernels = load_kernels(traced, interpret=False, float_index=float_index)
        captured_types = {}
        for k, t in enumerate(traced.captured):
            captured_types[f"C{k}"] = "*fp32" if t.is_floating_point() else "*i64"
        base = dict(D=80, D_PAD=128, HAS_SCORE_MOD=score_mod is not None, DOT_PREC="tf32",
                    SPARSE_M=128, SPARSE_N=64, EVEN_M=False, EVEN_N=False)
        none = dict(QD=None, KD=None, VD=None, OD=None)
        compile_one(kernels._attn_fwd, dict(base, **none, BLOCK_M=128, BLOCK_N=64, TMA=0),
                    captured_types, 8, 3)
        for tma, block in ((2, "[{rows},128]"), (4, "[1,1,{rows},128]")):   # descriptor forms
            descs = {n: "tensordesc<bf16" + block.format(rows=r) + ">"
                     for n, r in (("QD", 128), ("KD", 64), ("VD", 64), ("OD", 128))}
            compile_one(kernels._attn_fwd, dict(base, D=128, EVEN_M=True, EVEN_N=True, TMA=tma,
                                                BLOCK_M=128, BLOCK_N=64),
                        dict(captured_types, **descs), 4, 2)
        compile_one(kernels._attn_bwd_delta, dict(D=80, D_PAD=128, BLOCK_M=64),
                    captured_types, 4, 1)
        dp_first = traced.score_grad_varies           # as launch_bwd.backward sets it
        tile_terms = rows_from_offsets(traced)        # as launch_bwd._dkdv_decision does
        for store in (False, True):       # dQ by its own kernel, or from stored dS
            compile_one(kernels._attn_bwd_dkdv, dict(base, BLOCK_M=64, BLOCK_N=64, TMA=0,
                                                     QD=None, DOD=None, DSD=None,
                                                     DP_FIRST=dp_first, DS_STORE=store,
                                                     TILE_TERMS=tile_terms,
                                                     **({} if store else {"DS": None})),
                        captured_types, 4, 2)
        for fused in (True, False):
            compile_one(kernels._attn_bwd_dq, dict(base, BLOCK_M=128, BLOCK_N=64,
                                                   HAS_CAPTURE_GRADS=bool(traced.grad_loads()),
                                                   FUSED_DELTA=fused, TMA=0, KD=None, VD=None),
                        captured_types, 8, 2)
        even = dict(base, D=128, EVEN_M=True, EVEN_N=True, TMA=2, BLOCK_M=64, BLOCK_N=64)
        tile = "tensordesc<bf16[64,128]>"           # the backward's 2-D descriptor reads
        for store in (False, True):      # dS stored through a descriptor too
            compile_one(kernels._attn_bwd_dkdv,
                        dict(even, DP_FIRST=dp_first, DS_STORE=store, TILE_TERMS=tile_terms,
                             **({} if store else {"DS": None, "DSD": None})),
                        dict(captured_types, QD=tile, DOD=tile,
                             **({"DSD": "tensordesc<bf16[64,64]>"} if store else {})), 4, 2)
        for ragged in (True, False):      # pointers; descriptors (dS rows of SPARSE_M)
            compile_one(kernels._attn_bwd_dq_ds,
                        dict(D=80 if ragged else 128, D_PAD=128, BLOCK_M=64, BLOCK_N=64,
                             SPARSE_M=128 if ragged else 64, SPARSE_N=64, EVEN_N=not ragged,
                             DOT_PREC="tf32", TMA=0 if ragged else 2,
                             **({"DSD": None, "KD": None} if ragged else {})),
                        {} if ragged else {"DSD": "tensordesc<bf16[64,64]>", "KD": tile}, 4, 3)
        compile_one(kernels._attn_bwd_dq, dict(even, HAS_CAPTURE_GRADS=bool(traced.grad_loads()),
                                               FUSED_DELTA=True),
                    dict(captured_types, KD=tile, VD=tile), 4, 2)
        for dense in (False, True) if score_mod is None else (False,):
            compile_one(kernels._attn_decode_split,
                        dict(D=80, D_PAD=128, ROWS=16, BLOCK_N=64, SPARSE_N=64, EVEN_N=False,
                             HAS_SCORE_MOD=score_mod is not None, HAS_MASK=not dense,
                             DENSE=dense, DOT_PREC="tf32"),
                        captured_types, 4, 3)
        compile_one(kernels._attn_decode_combine,
                    dict(D=80, D_PAD=128, ROWS=16, SPLITS_PAD=32), captured_types, 4, 1)
        compile_one(kernels._block_state, dict(BLOCK_Q=128, BLOCK_KV=64), captured_types, 4, 1)
        compile_one(kernels._block_lists, dict(BLOCK=512), captured_types, 4, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
