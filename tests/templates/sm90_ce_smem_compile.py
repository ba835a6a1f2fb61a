"""Compile the shared-memory cross-entropy kernel (cross_entropy_smem_kernel.py) for sm_90
without a GPU.

Run in a fresh process without TRITON_INTERPRET (test_cross_entropy_smem.py does), for GPT-2's
and Llama's vocabularies in bf16 and fp32 with and without the gradient. Prints one line per
variant with its shared memory and its cp.async / cp.async.wait_group counts in the PTX;
exits 0 when all compiled, 2 when this Triton has no Gluon.
"""
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget

from cherenkov.attention.codegen import gluon_hopper
from cherenkov.templates.cross_entropy_smem import launch_kwargs

VARIANTS = [  # (vocab, dtype, block_v, write_grad)
    (50304, "bf16", 4096, True), (50304, "bf16", 4096, False), (32000, "bf16", 4096, True),
    (32000, "bf16", 2048, True), (8000, "fp32", 1024, True)]


def compile_one(vocab: int, dtype: str, block_v: int, write_grad: bool, num_warps: int = 8):
    from triton.experimental.gluon._runtime import GluonASTSource
    from cherenkov.templates.cross_entropy_smem_kernel import cross_entropy_rows_smem as fn
    cx = launch_kwargs(torch.bfloat16 if dtype == "bf16" else torch.float32, vocab, write_grad,
                       block_v, num_warps)
    cx.pop("num_warps")
    types = {"logits_ptr": f"*{dtype}", "grad_ptr": f"*{dtype}", "targets_ptr": "*i64",
             "loss_ptr": "*fp32"}
    sig = {name: "constexpr" if name in cx else types.get(name, "i32") for name in fn.arg_names}
    # the launch's specializations: 16-byte aligned pointers and row strides
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]]
             for n in ("logits_ptr", "grad_ptr", "stride_row", "grad_stride_row", "V")}
    src = GluonASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in cx.items()},
                         attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def main() -> int:
    if not gluon_hopper():
        print("no Gluon Hopper language in this Triton")
        return 2
    for vocab, dtype, block_v, write_grad in VARIANTS:
        kernel = compile_one(vocab, dtype, block_v, write_grad)
        copies = [line for line in kernel.asm["ptx"].splitlines() if "cp.async.c" in line
                  and "commit" not in line]
        print(f"V={vocab} {dtype} block {block_v} grad {write_grad}: shared memory "
              f"{kernel.metadata.shared} bytes; cp.async {len(copies)}; "
              f"16-byte {sum(', 0x10,' in line for line in copies)}; "
              f"wait_group {kernel.asm['ptx'].count('cp.async.wait_group')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
