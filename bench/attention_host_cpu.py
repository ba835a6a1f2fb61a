"""Python time per attention call with the kernels stubbed out (CPU, no GPU needed): what a
call costs the host besides Triton's launches, for a decode call and a forward+backward.

    python bench/attention_host_cpu.py            # prints microseconds per call

The Triton kernels are replaced by no-op launchers that behave like compiled ones (the
direct-launch path is taken as on a GPU); tensors are small CPU tensors, so the figure is the
Python of cherenkov.attention, launch.py and kernel_launch.py plus autograd's own overhead.
"""
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import cherenkov.attention as ca  # noqa: E402
from cherenkov.attention import api, codegen  # noqa: E402
from cherenkov.attention import kernel_launch as kl  # noqa: E402
from cherenkov.attention.block_mask import block_mask  # noqa: E402


class _Compiled:
    function = packed_metadata = None

    def run(self, *args):
        pass


class _Kernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: _Compiled()


def stub() -> None:
    names = ("_attn_fwd", "_attn_bwd_delta", "_attn_bwd_dkdv", "_attn_bwd_dq",
             "_attn_bwd_dq_ds", "_attn_decode_split", "_attn_decode_combine")
    fake = types.SimpleNamespace(**{n: _Kernel() for n in names})
    real = codegen.compile_mods
    api.compile_mods = lambda *a, **k: (real(*a, **k)[0], fake)
    api.kernel_mode = lambda device: ("jit", "")
    kl._on_gpu = lambda t: True
    kl._raw_stream = lambda: 0
    kl._state["direct"] = True
    if hasattr(kl, "_hooked"):
        kl._hooked = lambda: False
    torch.cuda.current_device = lambda: 0
    torch.cuda.is_current_stream_capturing = lambda: False


def per_call_us(fn, n=300) -> float:
    for _ in range(10):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> int:
    stub()
    q1, k, v = torch.randn(8, 32, 1, 128), torch.randn(8, 4, 4096, 128), torch.randn(8, 4, 4096, 128)
    with torch.no_grad():
        decode = per_call_us(lambda: ca.attention(q1, k, v, enable_gqa=True))
    q, kk, vv = (torch.randn(1, 2, 256, 64, requires_grad=True) for _ in range(3))
    bm = block_mask(ca.causal, 1, 2, 256, 256, (128, 64), "cpu")
    g = torch.ones(1, 2, 256, 64)
    sm = ca.tanh_softcap(30.0)
    fwd_bwd = per_call_us(lambda: torch.autograd.backward(
        ca.attention(q, kk, vv, score_mod=sm, mask_mod=ca.causal, block_mask=bm), g))
    print(f"decode call: {decode:.1f} us of Python; softcap forward+backward: {fwd_bwd:.1f} us")
    fwd, bwd = flex_op_us()
    print(f"cherenkov::flex_attention (document mask, flex's 64 x 64 lists): forward op "
          f"{fwd:.1f} us, backward op {bwd:.1f} us")
    return 0


def flex_op_us() -> tuple[float, float]:
    """The custom ops a compiled flex_attention call runs (attention/flex_op.py), called
    directly as a compiled graph calls them: forward and backward op, B=1 H=2 S=256 D=64."""
    from torch.nn.attention.flex_attention import create_block_mask
    from cherenkov.attention import flex_op
    fake = types.SimpleNamespace(**{n: _Kernel() for n in (
        "_attn_fwd", "_attn_bwd_delta", "_attn_bwd_dkdv", "_attn_bwd_dq", "_attn_bwd_dq_ds")})
    flex_op.kernel_mode = lambda device: ("jit", "")
    flex_op.load_kernels = lambda *a, **k: fake
    ids = torch.arange(256, dtype=torch.int32) // 100
    mask = lambda b, h, q, kv, ids: (ids[q] == ids[kv]) & (q >= kv)  # noqa: E731
    spec = flex_op.FlexSpec(lambda s, b, h, q, kv: s, mask, (),
                            (((256,), torch.int32, False),), (64, 64))
    key = flex_op.register(spec)          # held weakly: `spec` keeps it alive below
    bm = create_block_mask(lambda b, h, q, kv: mask(b, h, q, kv, ids), None, None, 256, 256,
                           device="cpu", BLOCK_SIZE=(64, 64))
    blocks = (bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
              bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks, bm.full_q_indices)
    q, k, v = (torch.randn(1, 2, 256, 64) for _ in range(3))
    fwd = torch.ops.cherenkov.flex_attention.default
    bwd = torch.ops.cherenkov.flex_attention_backward.default
    out, lse = fwd(q, k, v, *blocks, [], [ids], 0.125, key)
    times = (per_call_us(lambda: fwd(q, k, v, *blocks, [], [ids], 0.125, key)),
             per_call_us(lambda: bwd(q, k, v, out, lse, out, None, *blocks, [], [ids], 0.125,
                                     key)))
    del spec
    return times


if __name__ == "__main__":
    sys.exit(main())
