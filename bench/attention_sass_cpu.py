"""The attention kernels compiled for sm_90 (Hopper) on the CPU, read as SASS: per basic block of
more than 100 instructions (the tile loops), its instruction count, spill loads / stores
(LDL / STL), tensor-core and MUFU instructions, int-to-float conversions (I2FP) and the
commonest opcodes. No GPU needed:
Triton's GPU passes and ptxas run on the CPU, nvdisasm (shipped with Triton) disassembles.

    env -u TRITON_INTERPRET .venv/bin/python bench/attention_sass_cpu.py fwd alibi
    env -u TRITON_INTERPRET .venv/bin/python bench/attention_sass_cpu.py dkdv causal --warps 8

Kernels: fwd (descriptor forward, 128 x 64 tiles), dkdv (64 x 64, TMA; --ds-store for the
stored-dS form score mods take; --block-n 128 --warps 8 the suite's H200 tiles), dq (64 x 64,
TMA), gluon-fwd and gluon-dq (the warp-specialized sm_90 kernels, 128 x 128 tiles, bf16
D=128). --tile-terms on|off: gluon-fwd, gluon-dq and dkdv with the score's key-linear terms
out of the loop where the mod has them, or per score (tile_terms.py; default: as the
launches take them). Mods: causal (no score mod),
alibi, alibi-computed (the slopes computed from h, not loaded), softcap. The configurations are the suite's at B=4 H=16 S=4096 D=128 bf16. This decided
row_terms.py's float key vector: the integer one kept 16 registers live across the
forward's full-tile loop and spilled there (26 LDL a tile).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "attention"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from cherenkov.attention import mods  # noqa: E402
from cherenkov.attention.codegen import load_kernels  # noqa: E402
from cherenkov.attention.tile_terms import rows_from_offsets  # noqa: E402
from cherenkov.attention.trace import trace_mods  # noqa: E402
from sm90_compile import signature  # noqa: E402

SCORE = {"causal": None, "alibi": lambda: mods.alibi(torch.randn(16)),
         "alibi-computed": lambda: _computed_alibi, "softcap": lambda: mods.tanh_softcap(30.0)}


def _computed_alibi(score, b, h, q_idx, kv_idx):
    return score + torch.exp2((h + 1).float() * (-0.5)) * (kv_idx - q_idx).float()
BASE = dict(D=128, D_PAD=128, DOT_PREC="tf32", EVEN_M=True, EVEN_N=True, TMA=2)


def _kernel(module, kind: str, has_mod: bool, ds_store: bool, block_n: int = 64,
            tile_terms: bool = False):
    """(function, constexprs, descriptor arguments, default warps, default stages)."""
    base = dict(BASE, HAS_SCORE_MOD=has_mod)
    if kind == "fwd":
        descs = {n: f"tensordesc<bf16[{r},128]>" for n, r in
                 (("QD", 128), ("KD", 64), ("VD", 64), ("OD", 128))}
        return (module._attn_fwd, dict(base, SPARSE_M=128, SPARSE_N=64, BLOCK_M=128,
                                       BLOCK_N=64), descs, 4, 2)
    tiles = dict(SPARSE_M=64, SPARSE_N=64, BLOCK_M=64, BLOCK_N=64)
    if kind == "dkdv":
        descs = {"QD": "tensordesc<bf16[64,128]>", "DOD": "tensordesc<bf16[64,128]>",
                 "DSD": f"tensordesc<bf16[{block_n},64]>"}
        return (module._attn_bwd_dkdv, dict(base, **dict(tiles, BLOCK_N=block_n,
                                                         SPARSE_N=block_n),
                                            DP_FIRST=False, DS_STORE=ds_store,
                                            TILE_TERMS=tile_terms), descs, 4, 2)
    descs = {"KD": "tensordesc<bf16[64,128]>", "VD": "tensordesc<bf16[64,128]>"}
    return (module._attn_bwd_dq, dict(base, **tiles, HAS_CAPTURE_GRADS=False, FUSED_DELTA=True),
            descs, 4, 2)


def sass_of(kind: str, mod: str, warps: int | None, stages: int | None,
            ds_store: bool, split: bool = False, block_n: int = 64,
            tile_terms: bool | None = None) -> str:
    """The kernel's SASS; tile_terms None: as the launches take them (launch_gluon.TILE_TERMS,
    launch_gluon_bwd.TILE_TERMS, launch_bwd.DKDV_TILE_TERMS)."""
    from cherenkov.attention import launch_bwd, launch_gluon, launch_gluon_bwd
    if tile_terms is None:
        tile_terms = {"gluon-fwd": launch_gluon.TILE_TERMS, "gluon-dq": launch_gluon_bwd.TILE_TERMS,
                      "dkdv": launch_bwd.DKDV_TILE_TERMS}.get(kind, False)
    factory = SCORE[mod]
    traced = trace_mods(factory() if factory else None, mods.causal)
    module = load_kernels(traced, interpret=False, float_index=True)
    if kind.startswith("gluon"):
        import sm90_gluon_compile as g
        build = g.compile_ws if kind == "gluon-fwd" else g.compile_dq
        kernel = build(module, traced, 128, torch.bfloat16, split=split, raw=True,
                       tile_terms=tile_terms)
        return _disassemble(kernel.asm["cubin"])
    fn, constexprs, descs, w, s = _kernel(module, kind, factory is not None, ds_store, block_n,
                                          tile_terms and rows_from_offsets(traced))
    captured = {f"C{i}": "*fp32" for i, _ in enumerate(traced.captured)}
    sig = {**signature(fn, constexprs, captured), **descs}
    src = ASTSource(fn=fn, signature=sig,
                    constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps or w, "num_stages": stages or s,
                                       "enable_fp_fusion": True})
    return _disassemble(compiled.asm["cubin"])


def _disassemble(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                            "nvdisasm")
        return subprocess.run([tool, "-c", f.name], capture_output=True, text=True,
                              check=True).stdout


def blocks(sass: str) -> dict[str, list[str]]:
    """Opcodes per basic block (labels .L_x_N), in order."""
    out, cur = collections.OrderedDict(entry=[]), "entry"
    for line in sass.splitlines():
        label = re.match(r"^(\.L_x_\d+):", line)
        if label:
            cur = label.group(1)
            out[cur] = []
            continue
        op = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if op:
            out[cur].append(op.group(1).split(".")[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=("fwd", "dkdv", "dq", "gluon-fwd", "gluon-dq"))
    ap.add_argument("mod", choices=sorted(SCORE))
    ap.add_argument("--warps", type=int)
    ap.add_argument("--stages", type=int)
    ap.add_argument("--ds-store", action="store_true")
    ap.add_argument("--split", action="store_true", help="gluon-*: SPLIT (partial / full loops)")
    ap.add_argument("--block-n", type=int, default=64, help="dkdv: key rows per program")
    ap.add_argument("--tile-terms", choices=("on", "off"), help="default: as the launches")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("run without TRITON_INTERPRET (env -u TRITON_INTERPRET ...)", file=sys.stderr)
        return 2
    by_block = blocks(sass_of(args.kernel, args.mod, args.warps, args.stages, args.ds_store,
                              args.split, args.block_n,
                              None if args.tile_terms is None else args.tile_terms == "on"))
    every = [op for ops in by_block.values() for op in ops]
    print(f"{args.kernel} {args.mod}: {len(every)} instructions, LDL {every.count('LDL')}, "
          f"STL {every.count('STL')}, I2FP {every.count('I2FP')}, PLOP3 {every.count('PLOP3')}")
    print("| block | instructions | LDL | STL | HGMMA | MUFU | I2FP | commonest |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ops in by_block.items():
        if len(ops) > 100:
            common = ", ".join(f"{o} {n}" for o, n in collections.Counter(ops).most_common(6))
            print(f"| {name} | {len(ops)} | {ops.count('LDL')} | {ops.count('STL')} | "
                  f"{ops.count('HGMMA')} | {ops.count('MUFU')} | {ops.count('I2FP')} | {common} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
