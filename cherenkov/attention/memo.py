"""A call's launch decisions remembered per call signature.

Tiles, descriptor modes, which mask tiles and kernels, grids, program orders, constexprs:
launch.py and launch_bwd.py decide them from the plan, the tensors' shapes, strides, dtype,
device and 16-byte alignment, and the switches below -- never from the tensors' values.
Deciding again on every call cost more host time than the launches themselves: on the H200
machine's host an attention forward+backward took 0.5-1.4 ms of host time against 0.74 ms of
kernels (documents; bench/results/2026-12-02_attention_host_breakdown_h200_41d141f.md), and a
call then waits for the host, not the GPU. So each decision is kept on the plan
(launch.Plan.remember), keyed by `signature` of the tensors it reads and by `settings()`; the
API and the flex op reuse a plan across calls with the same mods and block mask
(launch.kept_plan). Host time per forward+backward went 974 -> 508 us (documents), 2141 ->
1111 (ALiBi) (..._host_timeline_h200_41d141f.md vs ..._2439233.md).

Every module-level switch a decision reads must be in SWITCHES (tests/attention/test_memo.py
checks the modules' upper-case names): one changed at run time (a test's monkeypatch, an A/B
run) then keys new decisions; a script swapping a decision function calls forget().
"""
from __future__ import annotations

from itertools import chain

from . import launch_gluon, launch_gluon_bwd, tuning
from .shape_cache import capturing

# (module, names): the switches launch decisions read; launch.py and launch_bwd.py add their
# own (register)
SWITCHES: list = [
    (launch_gluon, ("GLUON_FWD", "TILE", "TILE_N", "FMA_SOFTMAX", "SCORE_LOADS", "SPLIT_TILES",
                    "DIRECT", "MIN_SCORES", "HEAD_DIMS", "DTYPES", "STAGES", "CONSUMER_REGS",
                    "MAX_REGS", "TILE_TERMS")),
    (launch_gluon_bwd, ("DQ", "HEAD_DIMS", "DTYPES", "STAGES", "SCORE_LOADS", "SPLIT_TILES",
                        "TILE_TERMS")),
    (tuning, ("VERSION",)),
]
_MAX = 64               # decisions kept per plan before starting over
_MISSING = object()
GENERATION = 0          # bumped by forget()


def register(module, names: tuple) -> None:
    SWITCHES.append((module, names))


def settings() -> tuple:
    """The switches' values now (hashable ones: a switch is a number, string or tuple)."""
    return (GENERATION, *chain.from_iterable(map(vars(module).get, names)
                                             for module, names in SWITCHES))


def forget() -> None:
    """Decide every call anew from now on (an A/B script that swaps a decision function)."""
    global GENERATION
    GENERATION += 1


def signature(*tensors) -> tuple:
    """What decisions read of these tensors: shape, strides, dtype, device, 16-byte alignment."""
    return tuple([(t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)
                  for t in tensors])


def remembered(memo: dict, kind: str, decide, plan, *tensors, extra=()):
    """decide(plan, *tensors, *extra) -- remembered in `memo` (the plan's) per kind, signature of
    `tensors`, `extra` and settings(). Nothing decided while a CUDA graph is captured is kept
    (a mask's coarser tiles are not built then: the decision would be a worse one)."""
    key = (kind, signature(*tensors), extra, settings())
    got = memo.get(key, _MISSING)
    if got is _MISSING:
        got = decide(plan, *tensors, *extra)
        if not capturing():
            if len(memo) >= _MAX:
                memo.clear()
            memo[key] = got
    return got
