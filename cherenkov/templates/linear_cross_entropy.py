"""Fused LM head + cross-entropy that never holds the full (tokens, vocab) logits.

    loss = cross_entropy(x @ W.T + b, targets)      x (..., H), W (V, H), b (V,), targets (...)

Tokens go through in chunks of `chunk_size` rows. For each chunk, in the forward pass:

    logits  = x_c @ W.T + b                       (c, V)  cuBLAS, in x's dtype
    loss_c, dlogits = cross_entropy_rows(logits)  one Triton kernel, fp32 math; dlogits =
                                                  softmax - onehot overwrites logits in place
    grad_x[c]  = dlogits @ W                      (c, H)
    grad_W    += dlogits.T @ x_c                  (V, H)  accumulated in fp32
    grad_b    += dlogits.sum(0)                   (V,)    fp32

so backward is already done when forward returns (as Liger's fused linear cross-entropy and
"cut cross-entropy" do); `backward` only scales the stored gradients by grad_output (and by
1/n_valid for reduction="mean"). Peak extra memory is one chunk of logits plus an fp32 grad_W.

`choose_chunk_size` sizes chunks from memory and from the cost model (a chunk must be long
enough that re-reading the fp32 grad_W per chunk stays compute-bound), and
`should_fuse_linear_ce` is the decision a graph pass asks: fuse when the cost model predicts
the fused form faster, or when eager's logits buffers would take a noticeable share of memory.
"""
from __future__ import annotations

import math

import torch

from cherenkov.hw.spec import DeviceSpec
from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows, reduction_scales

# How grad_W was accumulated in the last call ("addmm_fp32", "addmm.dtype", "template", "mm+add")
LAST_GRAD_WEIGHT_PATH: list[str] = []


def _device_spec(device: torch.device) -> DeviceSpec:
    from cherenkov.hw import current_device
    return current_device(device)


def choose_chunk_size(tokens: int, vocab: int, hidden: int, dtype: torch.dtype,
                      device: DeviceSpec, budget_bytes: float | None = None) -> int:
    """Rows per chunk: logits of a chunk fit `budget_bytes` (default memory/512, clamped to
    16..512 MiB), yet at least 4 x the device's ridge intensity, so that the chunk's grad_W
    update (2c FLOPs per fp32 element read and written, 8 bytes) is not memory-bound."""
    from cherenkov.cost import itemsize, ridge_intensity
    if budget_bytes is None:
        budget_bytes = min(512 * 2**20, max(16 * 2**20, device.memory_bytes / 512))
    by_memory = max(1, int(budget_bytes // (vocab * itemsize(dtype))))
    by_compute = int(4 * ridge_intensity(device, dtype, tensor_core=True))
    rows = min(tokens, max(by_memory, by_compute))
    chunks = math.ceil(tokens / rows)
    rows = math.ceil(tokens / chunks)                 # balanced chunks
    return min(tokens, -(-rows // 64) * 64) if rows > 64 else rows


def linear_ce_estimate(tokens: int, vocab: int, hidden: int, dtype: torch.dtype,
                       device: DeviceSpec) -> dict:
    """Predicted seconds and extra bytes for eager (logits materialized) and fused forms."""
    from cherenkov import cost
    s = cost.itemsize(dtype)
    tv = tokens * vocab
    mm = cost.matmul_cost(device, tokens, vocab, hidden, dtype).time_s \
        + cost.matmul_cost(device, tokens, hidden, vocab, dtype).time_s \
        + cost.matmul_cost(device, vocab, hidden, tokens, dtype).time_s
    # eager: log_softmax fwd (read+write), nll backward (write), log_softmax bwd (2 reads + write)
    eager_ce = cost.kernel_time(device, 4.0 * tv, 6.0 * tv * s) + 4 * device.launch_overhead_s
    chunk = choose_chunk_size(tokens, vocab, hidden, dtype, device)
    chunks = math.ceil(tokens / chunk)
    # fused: the CE kernel reads logits twice and writes dlogits once; grad_W in fp32 is read
    # and written once per chunk; five launches per chunk plus a few to start and finish
    fused_ce = cost.kernel_time(device, 4.0 * tv, 3.0 * tv * s) \
        + cost.kernel_time(device, 0, chunks * 8.0 * vocab * hidden) \
        + (5 * chunks + 4) * device.launch_overhead_s
    return {
        "eager_s": mm + eager_ce, "fused_s": mm + fused_ce, "chunk_size": chunk,
        "chunks": chunks, "eager_logits_bytes": float(tv * (s + 4)),
        "fused_logits_bytes": float(chunk * vocab * s + vocab * hidden * 4),
    }


def should_fuse_linear_ce(tokens: int, vocab: int, hidden: int, dtype: torch.dtype,
                          device_spec: DeviceSpec) -> bool:
    """Fuse when predicted faster, or when eager's logits (in dtype, plus fp32 softmax
    temporaries) would take over 1/64 of device memory."""
    est = linear_ce_estimate(tokens, vocab, hidden, dtype, device_spec)
    return est["fused_s"] < est["eager_s"] or \
        est["eager_logits_bytes"] > device_spec.memory_bytes / 64


def _accumulate_grad_weight(gw: torch.Tensor, dlogits: torch.Tensor, xc: torch.Tensor):
    """gw (V, H) fp32 += dlogits.T (V, c) @ xc (c, H), accumulating in fp32. Returns gw."""
    if dlogits.dtype == torch.float32:
        LAST_GRAD_WEIGHT_PATH.append("addmm_fp32")
        return gw.addmm_(dlogits.t(), xc)
    if dlogits.is_cuda:
        try:   # cuBLAS with bf16/fp16 inputs and an fp32 C (torch >= 2.8)
            out = torch.ops.aten.addmm.dtype(gw, dlogits.t(), xc, torch.float32)
            LAST_GRAD_WEIGHT_PATH.append("addmm.dtype")
            return out
        except (RuntimeError, AttributeError, TypeError):
            pass
        from cherenkov.templates.matmul import matmul
        LAST_GRAD_WEIGHT_PATH.append("template")
        return matmul(dlogits.t(), xc, ("residual",), residual=gw, out=gw)
    LAST_GRAD_WEIGHT_PATH.append("mm+add")
    return gw.add_(torch.mm(dlogits.t(), xc).float())


def fused_forward(x, weight, bias, targets, ignore_index: int, reduction: str,
                  chunk_size: int | None, need_x: bool, need_w: bool, need_b: bool):
    """The chunked pass: (loss fp32 (), grad_x (N, H) in x's dtype, grad_W (V, H) fp32,
    grad_b (V,) fp32, factor fp32 ()) -- the gradients of loss / factor, None where not
    needed; factor is 1/n_valid for "mean" (0 when every target is ignored: eager's gradient
    is 0 there, its loss NaN), 1 for "sum"."""
    hidden, vocab = x.shape[-1], weight.shape[0]
    x2 = x.reshape(-1, hidden)                              # (N, H)
    t = targets.reshape(-1)
    n = x2.shape[0]
    need_b = bias is not None and need_b
    if chunk_size is None:
        chunk_size = choose_chunk_size(n, vocab, hidden, x.dtype, _device_spec(x.device))
    loss_rows = torch.empty(n, device=x.device, dtype=torch.float32)
    gx = torch.empty_like(x2) if need_x else None
    gw = torch.zeros(vocab, hidden, device=x.device, dtype=torch.float32) if need_w else None
    gb = torch.zeros(vocab, device=x.device, dtype=torch.float32) if need_b else None
    wt = weight.t()                                         # (H, V), a view
    LAST_GRAD_WEIGHT_PATH.clear()
    for start in range(0, n, chunk_size):
        xc = x2[start:start + chunk_size]                   # (c, H)
        logits = torch.addmm(bias, xc, wt) if bias is not None else torch.mm(xc, wt)
        cross_entropy_rows(logits, t[start:start + chunk_size],
                           loss_rows[start:start + chunk_size], ignore_index,
                           write_grad=need_x or need_w or need_b)
        if need_x:
            torch.mm(logits, weight, out=gx[start:start + chunk_size])
        if need_w:
            gw = _accumulate_grad_weight(gw, logits, xc)
        if need_b:
            gb += logits.sum(0, dtype=torch.float32)
    loss_scale, factor = reduction_scales(t, ignore_index, reduction)
    return loss_rows.sum() * loss_scale, gx, gw, gb, factor


def scale_grads(grad_loss, factor, gx, gw, gb, x_shape, x_dtype, w_dtype, b_dtype):
    """The input gradients for upstream gradient `grad_loss`, from fused_forward's."""
    g = grad_loss.float() * factor                          # () fp32
    dx = (gx.float() * g).to(x_dtype).reshape(x_shape) if gx is not None else None
    dw = (gw * g).to(w_dtype) if gw is not None else None
    db = (gb * g).to(b_dtype) if gb is not None else None
    return dx, dw, db


class LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, targets, ignore_index, reduction, chunk_size):
        loss, gx, gw, gb, factor = fused_forward(
            x, weight, bias, targets, ignore_index, reduction, chunk_size,
            ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        ctx.save_for_backward(gx, gw, gb, factor)
        ctx.shapes = (x.shape, x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return loss.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        gx, gw, gb, factor = ctx.saved_tensors
        dx, dw, db = scale_grads(grad_output, factor, gx, gw, gb, *ctx.shapes)
        return dx, dw, db, None, None, None, None


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         bias: torch.Tensor | None = None, ignore_index: int = -100,
                         reduction: str = "mean", chunk_size: int | None = None) -> torch.Tensor:
    """cross_entropy(x @ weight.T + bias, targets) without materializing all logits.

    x (..., H); weight (V, H); targets (...) int64 in [0, V) or ignore_index; bias (V,).
    reduction "mean" (over non-ignored targets) or "sum". chunk_size: rows per chunk
    (None: `choose_chunk_size`)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if x.shape[:-1] != targets.shape:
        raise ValueError(f"targets {tuple(targets.shape)} do not match x {tuple(x.shape)}[:-1]")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return LinearCrossEntropy.apply(x, weight, bias, targets.contiguous(), ignore_index,
                                    reduction, chunk_size)
