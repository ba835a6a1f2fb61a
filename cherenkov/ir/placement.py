"""Placements of a value over a named device mesh: Shard(dim), Replicate, Partial(op).

A value's placement says, per mesh axis, how the logical tensor is laid over the devices of
that axis. `str()` is short for people (`S(0)`, `R`, `P(sum)`); `repr()` is exact for machines
(`Shard(dim=0)`), as DTensor's placements print. Single-device values carry `()`.

    >>> mesh = Mesh((("dp", 8), ("tp", 4)))
    >>> format_placements(mesh, (Shard(0), Replicate()))
    'dp:S(0) tp:R'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True, slots=True)
class Replicate:
    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True, slots=True)
class Partial:
    reduce_op: str = "sum"  # "sum" | "max" | "min" | "avg"

    def __post_init__(self):
        if self.reduce_op not in ("sum", "max", "min", "avg"):
            raise ValueError(f"Partial reduce_op must be sum/max/min/avg, got {self.reduce_op!r}")

    def __str__(self) -> str:
        return "P" if self.reduce_op == "sum" else f"P({self.reduce_op})"


Placement = Union[Shard, Replicate, Partial]


@dataclass(frozen=True, slots=True)
class Mesh:
    """A named device mesh: axes in order, outermost first, e.g. (("dp", 8), ("tp", 4))."""
    axes: tuple[tuple[str, int], ...]

    def __post_init__(self):
        names = [n for n, _ in self.axes]
        if len(set(names)) != len(names):
            raise ValueError(f"mesh axis names must be unique, got {names}")
        for name, size in self.axes:
            if size < 1:
                raise ValueError(f"mesh axis {name!r} has size {size}; sizes must be >= 1")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def size(self) -> int:
        total = 1
        for _, s in self.axes:
            total *= s
        return total

    def axis_size(self, name: str) -> int:
        for n, s in self.axes:
            if n == name:
                return s
        raise KeyError(f"mesh has no axis {name!r}; axes are {self.names}")

    def __str__(self) -> str:
        return "mesh(" + ", ".join(f"{n}={s}" for n, s in self.axes) + ")"


SINGLE_DEVICE = Mesh(())


def format_placements(mesh: Mesh, placements: tuple[Placement, ...]) -> str:
    if len(placements) != len(mesh.axes):
        raise ValueError(f"{len(placements)} placements for a mesh of {len(mesh.axes)} axes")
    return " ".join(f"{n}:{p}" for (n, _), p in zip(mesh.axes, placements))
