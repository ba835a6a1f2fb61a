"""Cherenkov: a hardware-aware, parallel optimizing compiler and runtime for PyTorch.

    model = torch.compile(model, backend="cherenkov")      # or
    model = cherenkov.compile(model, strict=True)
"""
from __future__ import annotations

import functools
import os
import sys

import torch

# Triton's interpreter (how generated kernels run on CPU) must be chosen before Triton is
# first imported: its standard library (tl.sum, tl.sigmoid, ...) is built one way or the other.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from cherenkov.config import Config, current
from cherenkov.ir.placement import Replicate, Shard

__version__ = "0.1.0"


def compile(model_or_fn, *, dynamic=None, fullgraph: bool = False, **options):
    """torch.compile with the Cherenkov backend; `options` are fields of `cherenkov.Config`."""
    current(**options)   # validate option names early
    from cherenkov.backend import cherenkov_backend
    backend = functools.partial(cherenkov_backend, **options)
    return torch.compile(model_or_fn, backend=backend, dynamic=dynamic, fullgraph=fullgraph)


def shard(tensor, placements):
    """Fix `tensor`'s placement over the tensor-parallel axis for the planner (see
    `cherenkov.parallel.annotate`); returns `tensor` unchanged."""
    from cherenkov.parallel.annotate import shard as _shard
    return _shard(tensor, placements)


def plan(model, cluster, global_batch: int, seq: int | None = None, **fixed):
    """Plan training of a built-in model on a cluster, honouring `shard` annotations (see
    `cherenkov.planner.plan_model`)."""
    from cherenkov.planner import plan_model
    return plan_model(model, cluster, global_batch, seq, **fixed)


def profile_next_call() -> None:
    """Time every generated kernel on the next call of each compiled graph (see
    `cost_reports`)."""
    from cherenkov.backend import COMPILED
    for graph, _ in COMPILED:
        if graph is not None:
            graph.profile_next = True


def cost_reports() -> dict:
    """{graph name: CostReport} -- per kernel, predicted time, bytes and FLOPs, and the
    measured time once a profiled call (`profile_next_call`) has run."""
    from cherenkov.backend import COMPILED
    return {info.name: info.report for _, info in COMPILED if getattr(info, "report", None)}


def _register() -> None:
    """Make backend="cherenkov" work after a plain `import cherenkov` (no install needed)."""
    try:
        from torch._dynamo.backends.registry import _BACKENDS, register_backend
    except ImportError:
        return
    if "cherenkov" not in _BACKENDS:
        from cherenkov.backend import cherenkov_backend
        register_backend(name="cherenkov")(cherenkov_backend)


_register()

# the attention DSL's entry points, `cherenkov.attention(q, k, v, score_mod=..., mask_mod=...)`
# (the package is callable: cherenkov/attention/__init__.py) and `cherenkov.block_mask(...)`;
# the backend imports the package already
from cherenkov import attention  # noqa: E402
from cherenkov.attention import block_mask  # noqa: E402
