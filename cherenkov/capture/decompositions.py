"""The core op set Cherenkov compiles: PyTorch's core-aten decompositions, plus ours.

We start from `core_aten_decompositions()` and additionally decompose the composite ops whose
parts we fuse better than the whole (softmax, layer/RMS norm, GeLU/SiLU and their backwards,
var_mean). Attention and matmul are *kept* whole: they run as library calls (SDPA, cuBLAS).
"""
from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from cherenkov.capture.foreach import foreach_decompositions

aten = torch.ops.aten

EXTRA = [
    aten._softmax, aten._log_softmax, aten._softmax_backward_data,
    aten._log_softmax_backward_data, aten.native_layer_norm, aten.native_layer_norm_backward,
    aten.gelu, aten.gelu_backward, aten.silu, aten.silu_backward, aten.var_mean, aten.std_mean,
    aten.rms_norm, aten._fused_rms_norm, aten._fused_rms_norm_backward, aten.sigmoid_backward,
    aten.tanh_backward, aten.threshold_backward, aten.nll_loss_forward, aten.nll_loss_backward,
    aten.embedding_dense_backward, aten.mse_loss, aten.mse_loss_backward, aten.hardtanh,
    aten.leaky_relu, aten.elu, aten.softplus, aten.mish, aten.hardswish, aten.hardsigmoid,
    aten.glu, aten.logsumexp, aten.addcmul, aten.lerp, aten.native_group_norm,
    aten.native_batch_norm, aten._native_batch_norm_legit_functional,
    # BatchNorm, training and eval, as recent PyTorch captures it (was extern: the OpInfo
    # sweep; eval goes through _native_batch_norm_legit, decomposed too)
    aten._batch_norm_with_update, aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update, aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit,
    # vector norms (F.normalize, cosine_similarity, pairwise_distance, norm, renorm): PyTorch's
    # decomposition into ops we fuse (the OpInfo sweep found the family extern)
    aten.linalg_vector_norm,
]

KEEP = {
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_attention_math.default,
    aten.linear.default, aten.matmul.default,
}


# tanh-approximated GeLU as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the same
# function (0.5 (1 + tanh u) == sigmoid(2u)) with one exp and one division instead of a
# libdevice tanh, which made GeLU compute-bound on the H200 (73% of copy bandwidth forward).
# It is also more accurate where tanh(u) -> -1 (1 + tanh u cancels; sigmoid does not).
GELU_BETA = 0.7978845608028654      # sqrt(2 / pi)
GELU_KAPPA = 0.044715


def _opmath(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def gelu(x, approximate: str = "none", *, _fallback):
    if approximate != "tanh":
        return _fallback(x, approximate)
    a = _opmath(x)
    u = GELU_BETA * (a + GELU_KAPPA * (a * a * a))
    return (a * torch.sigmoid(2.0 * u)).to(x.dtype)


def gelu_backward(grad, x, approximate: str = "none", *, _fallback):
    if approximate != "tanh":
        return _fallback(grad, x, approximate)
    a, g = _opmath(x), _opmath(grad)
    x2 = a * a
    s = torch.sigmoid(2.0 * (GELU_BETA * (a + GELU_KAPPA * (x2 * a))))
    du = GELU_BETA * (1.0 + 3.0 * GELU_KAPPA * x2)
    return (g * (s + 2.0 * a * s * (1.0 - s) * du)).to(grad.dtype)


def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([op for op in EXTRA if op is not None]))
    for op in KEEP:
        table.pop(op, None)
    table.update(foreach_decompositions())
    for op, fn in ((aten.gelu.default, gelu), (aten.gelu_backward.default, gelu_backward)):
        table[op] = functools.partial(fn, _fallback=table[op])
    return table
