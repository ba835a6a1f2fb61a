"""Suite `memory`: the memory-bound kernels of a transformer, forward and forward+backward.

At full size (bf16, a 32768x4096 activation, 256 MiB per tensor; cross-entropy over 16384
tokens with vocab 50304 and 128256) every case is far larger than the H200's 60 MiB L2, so
its time is HBM traffic. Bytes are the minimum any implementation must move, with E elements
of the main tensor and s its element size:

| case              | fwd      | fwd+bwd  | why (backward)                                         |
|-------------------|----------|----------|--------------------------------------------------------|
| add + LayerNorm   | 3 E s    | 7 E s    | reads dy, x, r (or the saved sum); writes d(x+r) once  |
| add + RMSNorm     | 3 E s    | 7 E s    | same                                                   |
| softmax           | 2 E s    | 5 E s    | reads y, dy; writes dx                                 |
| bias + GeLU(tanh) | 2 E s    | 5 E s    | reads dy, x; writes dx (db reduces dx on the way)      |
| SwiGLU            | 3 E s    | 8 E s    | reads dy, a, b; writes da, db                          |
| RoPE              | 2 E s    | 4 E s    | reads dy; writes dx (tables are tiny)                  |
| cross-entropy     | E s      | 3 E s    | reads the logits again; writes dlogits                 |

Parameter vectors, row statistics and targets are added exactly (they are small). `smoke`
scale keeps the same cases at tiny shapes for the CPU (Triton interpreter) tests.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from cherenkov.bench.case import Case

EPS = 1e-5


def _randn(shape, dtype, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)


def add_layer_norm(x, r, w, b):
    return F.layer_norm(x + r, (x.shape[-1],), w, b, EPS)


def add_rms_norm(x, r, w):
    h = (x + r).float()
    return (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def softmax_fp32(x):
    return torch.softmax(x.float(), -1).to(x.dtype)


def bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh")


def swiglu(a, b):
    return F.silu(a) * b


def rope(x, cos, sin):
    """x (B, T, H, D) rotated by angle tables cos, sin (T, D), in fp32 math."""
    d = x.shape[-1] // 2
    rotated = torch.cat((-x[..., d:], x[..., :d]), dim=-1)          # (B, T, H, D)
    c, s = cos[None, :, None, :], sin[None, :, None, :]             # (1, T, 1, D)
    return (x.float() * c + rotated.float() * s).to(x.dtype)


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.float(), targets)


def rope_tables(T: int, D: int, device, base: float = 10000.0):
    inv = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv)    # (T, D/2)
    angles = torch.cat((angles, angles), dim=-1)                        # (T, D)
    return angles.cos().float().to(device), angles.sin().float().to(device)


SHAPES = {  # scale -> (rows, hidden, rope (B, T, H, D), cross-entropy tokens, vocabs)
    "full": (32768, 4096, (8, 4096, 32, 128), 16384, (50304, 128256)),
    "cpu": (4096, 4096, (4, 1024, 16, 64), 2048, (50304,)),     # sizes a CPU runs in ms
    "smoke": (8, 64, (2, 4, 2, 8), 8, (96, 200)),
}


def cases(scale: str = "full", dtype: torch.dtype = torch.bfloat16) -> list[Case]:
    M, N, (B, T, H, D), tokens, vocabs = SHAPES[scale]
    s, E = torch.tensor([], dtype=dtype).element_size(), M * N
    tag = f"{M}x{N} {str(dtype).removeprefix('torch.')}"
    param, stats = N * s, M * 4 * 2          # one (N,) vector; fp32 mean + rstd of every row

    def rows(n_params, seed0=0):
        def make(device):
            xs = (_randn((M, N), dtype, device, seed0), _randn((M, N), dtype, device, seed0 + 1))
            ps = tuple(_randn((N,), dtype, device, seed0 + 2 + i) for i in range(n_params))
            return xs + ps
        return make

    out = [
        Case("add + LayerNorm", add_layer_norm, rows(2), shape=tag, grad_inputs=(0, 1, 2, 3),
             bytes={"fwd": 3 * E * s + 2 * param,
                    "fwd+bwd": 7 * E * s + 5 * param + 2 * stats}),
        Case("add + RMSNorm", add_rms_norm, rows(1), shape=tag, grad_inputs=(0, 1, 2),
             bytes={"fwd": 3 * E * s + param,
                    "fwd+bwd": 7 * E * s + 3 * param + stats}),
        Case("softmax (fp32 math)", softmax_fp32, lambda d: (_randn((M, N), dtype, d, 10),),
             shape=tag, grad_inputs=(0,), bytes={"fwd": 2 * E * s, "fwd+bwd": 5 * E * s}),
        Case("bias + GeLU(tanh)", bias_gelu,
             lambda d: (_randn((M, N), dtype, d, 20), _randn((N,), dtype, d, 21)),
             shape=tag, grad_inputs=(0, 1),
             bytes={"fwd": 2 * E * s + param, "fwd+bwd": 5 * E * s + 2 * param + param}),
        Case("SwiGLU silu(a)*b", swiglu,
             lambda d: (_randn((M, N), dtype, d, 30), _randn((M, N), dtype, d, 31)),
             shape=tag, grad_inputs=(0, 1), bytes={"fwd": 3 * E * s, "fwd+bwd": 8 * E * s}),
    ]
    Er, table = B * T * H * D, T * D * 4
    out.append(Case("RoPE", rope,
                    lambda d: (_randn((B, T, H, D), dtype, d, 40),) + rope_tables(T, D, d),
                    shape=f"({B}, {T}, {H}, {D}) {str(dtype).removeprefix('torch.')}",
                    grad_inputs=(0,),
                    bytes={"fwd": 2 * Er * s + 2 * table, "fwd+bwd": 4 * Er * s + 4 * table}))
    for vocab in vocabs:
        Ev = tokens * vocab

        def make_ce(d, vocab=vocab):
            g = torch.Generator(device="cpu").manual_seed(50)
            targets = torch.randint(0, vocab, (tokens,), generator=g).to(d)
            return _randn((tokens, vocab), dtype, d, 51) * 2, targets
        out.append(Case(f"cross-entropy V={vocab}", cross_entropy, make_ce,
                        shape=f"{tokens}x{vocab} {str(dtype).removeprefix('torch.')}",
                        grad_inputs=(0,),
                        bytes={"fwd": Ev * s + tokens * 8,
                               "fwd+bwd": 3 * Ev * s + 2 * tokens * 8 + tokens * 4}))
    return out
