"""Hand-written kernel templates that beat library calls by fusing around them.

- `matmul.py`: C = epilogue(prologue(A) @ B) as one generated Triton kernel (bias, activations,
  residual, multiply, scale, cast; RMSNorm-style row/column scaling of A at load), any strides,
  optional batch, persistent option. `epilogues.py` is the registry of fusable ops.
- `tile_config.py` / `autotune.py`: tile configs drawn from the hardware model, timed against
  cuBLAS on the GPU, the winner cached on disk.
- `linear_cross_entropy.py` (+ `cross_entropy_kernel.py`): LM head + cross-entropy in chunks,
  gradients computed during the forward pass, never holding the full logits.

    >>> from cherenkov.templates import matmul
    >>> y = matmul(x, w.t(), ("bias", "gelu_tanh"), bias=b)        # gelu(x @ w.T + b)
"""
from cherenkov.templates.epilogues import EPILOGUES
from cherenkov.templates.linear_cross_entropy import (choose_chunk_size, linear_ce_estimate,
                                                      linear_cross_entropy,
                                                      should_fuse_linear_ce)
from cherenkov.templates.matmul import MatmulSpec, cublas_matmul, matmul, render
from cherenkov.templates.tile_config import TileConfig, candidates

__all__ = ["EPILOGUES", "MatmulSpec", "TileConfig", "candidates", "choose_chunk_size",
           "cublas_matmul", "linear_ce_estimate", "linear_cross_entropy", "matmul", "render",
           "should_fuse_linear_ce"]
