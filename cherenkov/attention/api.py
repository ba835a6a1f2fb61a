"""`attention(q, k, v, score_mod=..., mask_mod=...)`: fused block-sparse flash attention.

    from cherenkov.attention import attention, causal, tanh_softcap
    out = attention(q, k, v, score_mod=tanh_softcap(30.0), mask_mod=causal)   # (B, H, S, D)

The mods are traced and rendered into the kernels (codegen.py); a block mask, built from
mask_mod unless given, lets the kernels skip empty tiles. CUDA tensors run compiled Triton
kernels, CPU tensors Triton's interpreter; if Triton is missing or a mod cannot be traced,
the math implementation runs instead (logged once per reason). Semantics follow
FlexAttention: `score` handed to score_mod is already scaled; a query row with no key left
yields output 0 and lse -inf. lse (natural log, (B, H, Q)) carries gradients too.
A few query rows (<= 16) without autograd use the split-KV decode kernel.
"""
from __future__ import annotations

import logging
import math

import torch

from . import launch, launch_bwd, launch_decode
from .block_mask import DEFAULT_BLOCK, BlockMask, block_mask as build_block_mask
from .codegen import compile_mods, interpreter_dots_exact, kernel_mode
from .reference import attention_math
from .render import FLOAT_INDEX_MAX_LEN
from .shape_cache import ShapeCache
from .trace import TraceError

log = logging.getLogger("cherenkov.attention")
_LOGGED: set[str] = set()
DECODE_MAX_Q = 16
_FULL_MASKS = ShapeCache(64)       # (B, H, Q, KV, device) -> all-full BlockMask
_PLANS = ShapeCache(64)            # the last plan per mod pair of calls with a lasting mask


def log_math_once(reason: str) -> None:
    """Log, once per reason, that a call (direct, or the compiled flex op's) runs the math
    implementation."""
    if reason not in _LOGGED:
        _LOGGED.add(reason)
        log.warning("cherenkov.attention: using the math implementation: %s", reason)


class _AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan, *captured):
        o, lse = launch.forward(plan, q, k, v, captured)
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, o, lse, *captured)
        ctx.set_materialize_grads(False)        # an unread lse gets None, not zeros
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse2):
        if torch.is_grad_enabled():      # create_graph=True: the kernels' gradients have none
            raise RuntimeError("cherenkov.attention has no double backward (create_graph=True); "
                               "use attention_math for gradient penalties")
        q, k, v, o, lse, *captured = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        # lse2 is log2 units: d loss / d lse = d loss / d lse2 / ln 2
        dlse = None if dlse2 is None else dlse2 / launch.LN2
        dq, dk, dv, cgrads = launch_bwd.backward(ctx.plan, q, k, v, o, lse, do, captured,
                                                 ctx.needs_input_grad[4:], dlse)
        return dq, dk, dv, None, *cgrads


def _full_mask(B, H, Q_LEN, KV_LEN, device) -> BlockMask:
    """The all-full block mask of an unmasked call, kept per shape (it costs a few launches)."""
    key = (B, H, Q_LEN, KV_LEN, str(device))
    mask = _FULL_MASKS.get(key)
    if mask is None:
        mask = _FULL_MASKS.put(key, build_block_mask(None, B, H, Q_LEN, KV_LEN, DEFAULT_BLOCK,
                                                     device))
    return mask


def _plan(kernels, traced, mask: BlockMask, scale: float, interpret: bool, coarsen: bool,
          keep: bool) -> launch.Plan:
    """The call's plan: with `keep` (a block mask that outlives the call: the caller's, or a
    kept one) an earlier call's (launch.kept_plan), else a new one (a block mask built for
    this call alone would only fill the cache)."""
    if not keep:
        return launch.Plan(kernels, traced, mask, scale, interpret, coarsen=coarsen)
    return launch.kept_plan(_PLANS, kernels, traced, mask, scale, interpret, coarsen)


def _check_inputs(q, k, v, enable_gqa):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be (B, H, S, D)")
    B, H, _, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         "do not match (same B and D; k and v alike)")
    HK = k.shape[1]
    if H != HK and (not enable_gqa or H % HK):
        raise ValueError(f"{H} query heads with {HK} kv heads needs enable_gqa=True and "
                         "H divisible by the kv heads")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("q, k, v must share a dtype")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError(f"q, k, v must be float16, bfloat16, float32 or float64, not {q.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device: {q.device}, {k.device}, {v.device}")


def attention(q, k, v, score_mod=None, mask_mod=None, block_mask: BlockMask | None = None,
              scale: float | None = None, enable_gqa: bool = False, return_lse: bool = False):
    """Attention of q (B, H, Q, D) over k, v (B, HK, KV, D) with a score_mod and a mask_mod.

    Inside torch.compile the call is recorded in the graph as FlexAttention's higher-order op
    (the mods as traced subgraphs, the block mask's lists as graph inputs), which the
    cherenkov backend runs on these kernels (attention/flex_op.py) and other backends run as
    flex_attention."""
    if torch.compiler.is_dynamo_compiling():
        _check_inputs(q, k, v, enable_gqa)
        return _as_flex_attention(q, k, v, score_mod, mask_mod, block_mask, scale, return_lse)
    return _attention(q, k, v, score_mod, mask_mod, block_mask, scale, enable_gqa, return_lse)


def _as_flex_attention(q, k, v, score_mod, mask_mod, block_mask, scale, return_lse):
    """The call as torch's flex_attention higher-order op (traced by Dynamo)."""
    from torch._higher_order_ops.flex_attention import flex_attention as flex_hop
    from torch.nn.attention import flex_attention as fa
    from .flex_op import HUGE_BLOCK
    for x in (q, k, v):         # heads and head dim static, as flex_attention has them (the
        torch._dynamo.mark_static(x, -3)        # scale is then a constant)
        torch._dynamo.mark_static(x, -1)
    B, H, Q_LEN, D = q.shape
    KV_LEN = k.shape[2]
    if mask_mod is None and block_mask is not None:
        mask_mod = block_mask.mask_mod
    mask_mod = mask_mod if mask_mod is not None else fa.noop_mask
    if block_mask is not None:
        launch.check_mask(block_mask, B, H, Q_LEN, KV_LEN)
        m = block_mask
        tbm = fa.BlockMask((Q_LEN, KV_LEN), m.kv_num_blocks, m.kv_indices, m.full_kv_num_blocks,
                           m.full_kv_indices, m.q_num_blocks, m.q_indices, m.full_q_num_blocks,
                           m.full_q_indices, tuple(m.block), mask_mod)
    else:       # one tile over everything (FlexAttention's own "no block mask"): the backend
        # builds the block mask from mask_mod
        one = torch.ones((1, 1, 1), dtype=torch.int32, device=q.device)
        zero = torch.zeros((1, 1, 1, 1), dtype=torch.int32, device=q.device)
        tbm = fa.BlockMask((Q_LEN, KV_LEN), one, zero, None, None, one, zero, None, None,
                           (HUGE_BLOCK, HUGE_BLOCK), mask_mod)
    # int(D): a symbolic head dim (dynamic=True) is specialized, so the scale is a constant
    scale = 1.0 / math.sqrt(int(D)) if scale is None else float(scale)
    options = fa._apply_kernel_options(q, k, v, return_lse, None)
    out, lse, *_ = flex_hop(q, k, v, score_mod if score_mod is not None else fa._identity,
                            tbm.as_tuple(), scale, options)
    return (out, lse * launch.LN2) if return_lse else out


# Outside the graph form above (a graph break), Dynamo would trace into the mods' Python and
# the Triton launches (on the CPU, into Triton's interpreter, which it cannot run).
@torch.compiler.disable
def _attention(q, k, v, score_mod, mask_mod, block_mask, scale, enable_gqa, return_lse):
    _check_inputs(q, k, v, enable_gqa)
    B, H, Q_LEN, D = q.shape
    KV_LEN = k.shape[2]
    if mask_mod is None and block_mask is not None:
        mask_mod = block_mask.mask_mod
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)

    mode, reason = kernel_mode(q.device)
    traced = None
    if q.dtype == torch.float64:
        mode, reason = None, "float64 inputs (the kernels compute in float32)"
    elif mode == "interpret" and not interpreter_dots_exact(q.dtype):
        # 16-bit inputs on the CPU: the kernels on float32 copies, differentiable back
        out = _attention(q.float(), k.float(), v.float(), score_mod, mask_mod, block_mask,
                         scale, enable_gqa, return_lse)
        return (out[0].to(q.dtype), out[1]) if return_lse else out.to(q.dtype)
    if mode is None:
        log_math_once(reason)
    else:
        try:
            traced, kernels = compile_mods(
                score_mod, mask_mod, interpret=mode == "interpret",
                float_index=max(Q_LEN, KV_LEN) < FLOAT_INDEX_MAX_LEN)
        except TraceError as e:
            log_math_once(f"the mods cannot be traced ({e})")
    if traced is None:
        return attention_math(q, k, v, score_mod, mask_mod, scale, enable_gqa, return_lse)

    q, k, v = launch.unit_stride(q), launch.unit_stride(k), launch.unit_stride(v)
    captured = [t.to(q.device) if t.device != q.device else t for t in traced.captured]
    needs_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (q, k, v, *captured))
    decode = not needs_grad and Q_LEN <= DECODE_MAX_Q
    built = block_mask is None and mask_mod is not None        # for this call alone
    if block_mask is None and mask_mod is None and decode and \
            KV_LEN >= 4 * launch_decode.DENSE.block[1]:
        # an unmasked decode step (a KV cache growing by a token a call): the kernel walks
        # every KV block, no block mask is built per length
        block_mask = launch_decode.DENSE
    else:
        if block_mask is None:
            block_mask = (_full_mask(B, H, Q_LEN, KV_LEN, q.device) if mask_mod is None else
                          build_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, DEFAULT_BLOCK,
                                           q.device))
        launch.check_mask(block_mask, B, H, Q_LEN, KV_LEN)
        if block_mask.device != q.device:
            raise ValueError(f"block mask on {block_mask.device}, q, k, v on {q.device}")
    plan = _plan(kernels, traced, block_mask, scale, mode == "interpret",
                 block_mask.mask_mod is mask_mod, keep=not built)
    if decode and KV_LEN >= 4 * block_mask.block[1]:
        out, lse = launch_decode.decode(plan, q, k, v, captured)
    else:
        out, lse = _AttentionFunction.apply(q, k, v, plan, *captured)
    return (out, launch.natural_lse(lse)) if return_lse else out
