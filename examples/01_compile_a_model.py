"""01: compile a model with Cherenkov, check it against eager, then time both.

    python examples/01_compile_a_model.py
"""
import time

import torch

import cherenkov
from cherenkov.models import GPT, ModelConfig

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
cfg = ModelConfig("gpt", layers=2, hidden=128, heads=4, vocab=512, seq=64, name="example")
model = GPT(cfg).to(device)
compiled = cherenkov.compile(model, strict=True)
idx = torch.randint(0, cfg.vocab, (4, cfg.seq), device=device)

# 1. correctness: same loss and gradients as eager
_, loss = model(idx, idx)
grads = torch.autograd.grad(loss, list(model.parameters()))
_, loss_c = compiled(idx, idx)
grads_c = torch.autograd.grad(loss_c, list(model.parameters()))
torch.testing.assert_close(loss_c, loss, rtol=1e-4, atol=1e-4)
for g, gc in zip(grads, grads_c):
    torch.testing.assert_close(gc, g, rtol=1e-3, atol=1e-4)
print(f"loss {loss.item():.5f} matches eager; gradients match")


# 2. time a forward+backward step
def step(m):
    _, l = m(idx, idx)
    l.backward()


for name, m in (("eager", model), ("cherenkov", compiled)):
    for _ in range(3):
        step(m)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        step(m)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"{name:10s} {1e3 * (time.perf_counter() - start) / 10:8.2f} ms/step")
