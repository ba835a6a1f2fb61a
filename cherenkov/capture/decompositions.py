"""The core op set Cherenkov compiles: PyTorch's core-aten decompositions, plus ours.

We start from `core_aten_decompositions()` and additionally decompose the composite ops whose
parts we fuse better than the whole (softmax, layer/RMS norm, GeLU/SiLU and their backwards,
var_mean). Attention and matmul are *kept* whole: they run as library calls (SDPA, cuBLAS).
"""
from __future__ import annotations

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

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
]

KEEP = {
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_attention_math.default,
    aten.linear.default, aten.matmul.default,
}


def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([op for op in EXTRA if op is not None]))
    for op in KEEP:
        table.pop(op, None)
    return table
