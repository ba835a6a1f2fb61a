"""bench/profile_train_gpu.py's timeline arithmetic (pure Python, no GPU): kernels launched
with PDL start while the one before runs, so their durations overlap; the `wall` column counts
each stretch of busy time once and, with the gaps, sums to the step's span."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")


def _module():
    path = Path(__file__).resolve().parents[2] / "bench" / "profile_train_gpu.py"
    spec = importlib.util.spec_from_file_location("profile_train_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wall_counts_overlapped_durations_once():
    prof = _module()
    # k_b starts (PDL) while k_a runs; nvjet after a 2 us gap; a memset after a 10 us gap
    spans = [(0, 10, "k_a"), (5, 20, "k_b"), (22, 30, "nvjet_x"), (40, 45, "Memset (Device)")]
    rows = prof.timeline(spans, steps=1)
    assert [(n, gap, dur, wall) for n, gap, dur, wall in rows] == [
        ("k_a", 0.0, 10, 10), ("k_b", 0.0, 15, 10), ("nvjet_x", 2, 8, 8),
        ("Memset (Device)", 10, 5, 5)]
    assert sum(r[1] + r[3] for r in rows) == 45            # the span, first start to last end
    walls = prof.wall_by_category(rows)
    assert walls["cherenkov kernel"] == {"wall_us": 20, "gap_before_us": 0.0}
    assert walls["matmul"] == {"wall_us": 8, "gap_before_us": 2}
    assert walls["copy/fill"] == {"wall_us": 5, "gap_before_us": 10}


def test_a_kernel_inside_another_adds_no_wall():
    prof = _module()
    rows = prof.timeline([(0, 50, "k_long"), (10, 20, "k_inside"), (60, 70, "k_next")], steps=1)
    assert [r[3] for r in rows] == [50, 0.0, 10] and [r[1] for r in rows] == [0.0, 0.0, 10]
