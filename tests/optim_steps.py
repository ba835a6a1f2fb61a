"""Shared by the compiled-optimizer tests (CPU and GPU): run a compiled step beside eager's on
equal gradients, and the compiled plans made since a point."""
import torch

from cherenkov.backend import COMPILED


def step_alongside(step, opt_ref, ours, ref, steps=3, rtol=1e-5, atol=1e-6):
    """`steps` calls of the compiled `step` and of the eager reference optimizer's, each on the
    same fresh gradients; the parameters must agree after each."""
    for _ in range(steps):
        for a, b in zip(ours, ref):
            g = torch.randn_like(a)
            a.grad, b.grad = g.clone(), g.clone()
        step()
        opt_ref.step()
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def plans_since(start):
    """The compiled graphs (every shape variant) of the graphs compiled since COMPILED[start]."""
    return [cg for sp, _ in COMPILED[start:] if sp is not None for cg in sp.cache.values()]
