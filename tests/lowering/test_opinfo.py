"""Cherenkov against PyTorch's OpInfo database: compiled results equal eager ones.

Default run: a fast subset of ~30 representative ops (fp32 forward, fp32 backward, bf16
forward; two samples each). `CHERENKOV_SLOW_TESTS=1`: the full sweep over every OpInfo, which
prints a passed/failed/skipped table by op, writes it as JSON to `$CHERENKOV_OPINFO_REPORT`
when set, and requires >= 95% of the ops Cherenkov lowers (no extern) to pass.

    CHERENKOV_SLOW_TESTS=1 CHERENKOV_OPINFO_REPORT=opinfo.json pytest -s tests/lowering
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from . import opinfo_sweep as sweep

REPORT = os.environ.get("CHERENKOV_OPINFO_REPORT")

# Fast-subset ops that fail for a reason outside the lowerings (strict xfail: remove the entry
# when the fix lands).
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    # (op name, variant) -> why it fails; each entry is a strict xfail, so a fix shows as XPASS
}

_FAST_RESULTS: list = []


@pytest.fixture(scope="module", autouse=True)
def _print_fast_summary():
    yield
    if _FAST_RESULTS:
        print("\n" + sweep.summary_table(_FAST_RESULTS))


def _fast_param(key):
    marks = [pytest.mark.xfail(reason=KNOWN_FAILURES[key], strict=True)] \
        if key in KNOWN_FAILURES else []
    return pytest.param(key, id=".".join(k for k in key if k), marks=marks)


@pytest.mark.parametrize("cpu_backend", ["triton", "cpp"])
@pytest.mark.parametrize("key", [_fast_param(k) for k in sweep.FAST_OPS])
def test_fast_subset(key, cpu_backend, monkeypatch):
    """Through the Triton renderer (in the interpreter) and through the C++ renderer."""
    monkeypatch.setenv("CHERENKOV_CPU_BACKEND", cpu_backend)
    op = sweep.find_ops([key])[0]
    result = sweep.sweep_op(op, samples_per_case=2)
    _FAST_RESULTS.append(result)
    assert result.lowered, f"{result.name} runs as extern: {sorted(result.externs)}"
    failures = [f"{c.kind}[{c.sample}]: {c.reason}" for c in result.cases if c.status == "fail"]
    assert not failures, "\n".join(failures)
    for kind, wanted in (("fp32_forward", True), ("fp32_backward", op.supports_autograd),
                         ("bf16_forward", op.supports_dtype(torch.bfloat16, "cpu"))):
        cases = [c for c in result.cases if c.kind == kind]
        if wanted:
            assert any(c.status == "pass" for c in cases), \
                f"no {kind} case passed: {[(c.status, c.reason) for c in cases]}"


@pytest.mark.slow          # tests/conftest.py skips it unless CHERENKOV_SLOW_TESTS=1
def test_full_sweep():
    results = sweep.sweep(sweep.find_ops(), samples_per_case=3)
    print("\n" + sweep.summary_table(results))
    report = sweep.sweep_report(results)
    if REPORT:
        with open(REPORT, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    assert report["lowered"] > 0
    assert report["pass_rate"] >= 0.95, (
        f"{report['passed']}/{report['passed'] + report['failed']} lowered ops pass")
