"""Cost: what one kernel or collective costs — FLOPs, bytes moved, predicted seconds.

Costs add up as work that runs one after another:

    >>> Cost(flops=2e9, bytes=1e6, time_s=0.25) + Cost(bytes=3e6, time_s=0.5)
    Cost(flops=2000000000.0, bytes=4000000.0, time_s=0.75)
    >>> print(Cost(flops=2e9, bytes=1e6, time_s=1e-5))
    2.00 GFLOP, 1.00 MB, 10.0 us
"""
from __future__ import annotations

from dataclasses import dataclass


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def format_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


@dataclass(frozen=True, slots=True)
class Cost:
    flops: float = 0.0     # floating-point operations (a multiply-add counts 2)
    bytes: float = 0.0     # bytes read + written in device memory, or sent for a collective
    time_s: float = 0.0    # predicted seconds

    def __post_init__(self):
        for name in ("flops", "bytes", "time_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"Cost field {name!r} must be a non-negative number, "
                                 f"got {value!r}")

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.flops + other.flops, self.bytes + other.bytes,
                    self.time_s + other.time_s)

    def __radd__(self, other):
        return self if other == 0 else NotImplemented   # lets sum() start from 0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte (inf for pure compute)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def __str__(self) -> str:
        return f"{_si(self.flops, 'FLOP')}, {_si(self.bytes, 'B')}, {format_seconds(self.time_s)}"
