"""A cost report: one line per kernel with predicted time, bytes and FLOPs, and the measured
time beside it once a run on the device has filled it in.

    kernel            bytes      FLOPs      predicted   measured   error
    add_layernorm     805.31 MB  268.44 MFLOP  194.8 us  201.3 us   -3.2%
    total             ...
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cherenkov.cost.record import Cost, _si, format_seconds


@dataclass
class ReportLine:
    name: str
    cost: Cost
    measured_s: float | None = None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured, or None before a measurement."""
        if not self.measured_s:
            return None
        return (self.cost.time_s - self.measured_s) / self.measured_s


@dataclass
class CostReport:
    lines: list[ReportLine] = field(default_factory=list)

    def add(self, name: str, cost: Cost, measured_s: float | None = None) -> ReportLine:
        line = ReportLine(name, cost, measured_s)
        self.lines.append(line)
        return line

    def measure(self, name: str, measured_s: float) -> None:
        """Record the measured time of the (first) line called `name`."""
        for line in self.lines:
            if line.name == name:
                line.measured_s = measured_s
                return
        raise KeyError(f"no kernel {name!r} in the report")

    @property
    def total(self) -> Cost:
        return sum((line.cost for line in self.lines), Cost())

    def __str__(self) -> str:
        rows = [("kernel", "bytes", "FLOPs", "predicted", "measured", "error")]
        for line in self.lines:
            error = line.error
            rows.append((line.name, _si(line.cost.bytes, "B"), _si(line.cost.flops, "FLOP"),
                         format_seconds(line.cost.time_s),
                         "-" if line.measured_s is None else format_seconds(line.measured_s),
                         "-" if error is None else f"{error:+.1%}"))
        total = self.total
        measured = [line.measured_s for line in self.lines]
        rows.append(("total", _si(total.bytes, "B"), _si(total.flops, "FLOP"),
                     format_seconds(total.time_s),
                     format_seconds(sum(measured)) if all(m is not None for m in measured)
                     and measured else "-", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                         for r in rows)
