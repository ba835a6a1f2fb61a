"""02: attention variants as Python functions, compiled into fused kernels.

Checks a sliding-window + softcap variant against the math reference, prints the block
pattern, then times it (on a GPU; on CPU the kernels run in Triton's interpreter).

    python examples/02_attention_variants.py
"""
import time

import torch

from cherenkov.attention import and_masks, attention, block_mask, causal, sliding_window, tanh_softcap
from cherenkov.attention.reference import attention_math

device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
B, H, S, D = (2, 8, 2048, 64) if device == "cuda" else (1, 2, 96, 32)
q, k, v = (torch.randn(B, H, S, D, device=device, dtype=dtype) for _ in range(3))

mask_mod = and_masks(causal, sliding_window(S // 4))
score_mod = tanh_softcap(30.0)
blocks = block_mask(mask_mod, B, H, S, S, device=device)
print(blocks)

out = attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, block_mask=blocks)
ref = attention_math(q.double(), k.double(), v.double(), score_mod, mask_mod,
                     1.0 / D ** 0.5, False, False)
err = ((out.double() - ref).norm() / ref.norm()).item()
print(f"relative error vs fp64 math: {err:.2e}")
assert err < (2e-2 if dtype == torch.bfloat16 else 1e-4)

start = time.perf_counter()
for _ in range(5):
    attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, block_mask=blocks)
if device == "cuda":
    torch.cuda.synchronize()
print(f"{1e3 * (time.perf_counter() - start) / 5:.2f} ms per call on {device}")

# The same variant written against torch's own FlexAttention API and compiled by Cherenkov:
# the flex_attention call runs these kernels inside the compiled graph (and so does
# cherenkov.attention called inside torch.compile: no graph break).
import cherenkov  # noqa: E402,F401  (registers the "cherenkov" backend)
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

flex_blocks = create_block_mask(mask_mod, B, H, S, S, device=device)
compiled = torch.compile(lambda q, k, v: flex_attention(q, k, v, score_mod=score_mod,
                                                        block_mask=flex_blocks),
                         backend="cherenkov")
err = ((compiled(q, k, v).double() - ref).norm() / ref.norm()).item()
print(f"flex_attention compiled by the cherenkov backend: relative error {err:.2e}")
assert err < (2e-2 if dtype == torch.bfloat16 else 1e-4)
