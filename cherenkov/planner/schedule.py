"""Pipeline schedules: the order in which each stage runs forward and backward passes.

`stage_order(schedule, pp, m, v, stage)` lists `(phase, microbatch, chunk)` for one stage,
phase "F" or "B". Stage p holds chunks c = 0..v-1, i.e. virtual stages c*pp + p (v > 1 only
for the interleaved schedule). Orders follow Megatron-LM:

    gpipe        all forwards, then all backwards               bubble (pp-1)/m
    1f1b         pp-p-1 warm-up forwards, then one F one B       bubble (pp-1)/m, at most
                                                                 pp-p microbatches alive
    interleaved  1f1b over v chunks per stage                    bubble (pp-1)/(v*m)

    >>> stage_order("1f1b", pp=2, m=3, v=1, stage=0)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('F', 2, 0), ('B', 1, 0), ('B', 2, 0)]
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _chunk_mb(k: int, pp: int, v: int, forward: bool) -> tuple[int, int]:
    """The k-th forward (or backward) of a stage in the interleaved order: (microbatch, chunk)."""
    group = k // (pp * v)
    chunk = (k // pp) % v
    if not forward:
        chunk = v - 1 - chunk
    return group * pp + k % pp, chunk


def stage_order(schedule: str, pp: int, m: int, v: int, stage: int) -> list[tuple[str, int, int]]:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; known: {SCHEDULES}")
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b" or v == 1:
        warm = min(pp - stage - 1, m)
        order = [("F", i, 0) for i in range(warm)]
        f, b = warm, 0
        while f < m:
            order += [("F", f, 0), ("B", b, 0)]
            f, b = f + 1, b + 1
        return order + [("B", i, 0) for i in range(b, m)]
    if m % pp:
        raise ValueError(f"the interleaved schedule needs microbatches ({m}) divisible by pp ({pp})")
    total = m * v
    warm = min((pp - stage - 1) * 2 + (v - 1) * pp, total)
    order = [("F", *_chunk_mb(k, pp, v, True)) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        order += [("F", *_chunk_mb(f, pp, v, True)), ("B", *_chunk_mb(b, pp, v, False))]
        f, b = f + 1, b + 1
    return order + [("B", *_chunk_mb(k, pp, v, False)) for k in range(b, total)]


def bubble_fraction(schedule: str, pp: int, m: int, v: int = 1) -> float:
    """Idle time over useful time of the ideal schedule: (pp-1)/m, or (pp-1)/(v*m) interleaved."""
    return (pp - 1) / (m * (v if schedule == "interleaved" else 1))


def max_inflight(schedule: str, pp: int, m: int, v: int, stage: int = 0) -> float:
    """Most chunk-activations alive at once on `stage`, in units of one full stage's layers."""
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b" or v == 1:
        return float(min(pp - stage, m))
    warm = min((pp - stage - 1) * 2 + (v - 1) * pp, m * v)
    return (warm + 1) / v
