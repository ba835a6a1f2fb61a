"""cherenkov/bench/harness.py and report.py on CPU, tiny fp32 shapes: Cherenkov (Triton
interpreter) passes its check, a deliberately wrong implementation fails it, and the report
carries bandwidth, speedups and the prediction."""
import json

import pytest
import torch

from cherenkov import hw
from cherenkov.bench.harness import CHERENKOV, EAGER, Implementation, Settings, run_suite
from cherenkov.bench.report import metadata, summary, row, write
from cherenkov.bench.suites import SUITES


def _off_by_two_percent(fn):
    return lambda *args: fn(*args) * 1.02


WRONG = Implementation("wrong", _off_by_two_percent)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def results():
    cases = [c for c in SUITES["memory"]("smoke", torch.float32)
             if c.name in ("softmax (fp32 math)", "bias + GeLU(tanh)")]
    return run_suite(cases, [EAGER, CHERENKOV, WRONG], Settings(device=CPU))


def test_forward_modes_run_first_and_every_variant_ran(results):
    assert [(r.case.name, r.mode) for r in results] == [
        ("softmax (fp32 math)", "fwd"), ("bias + GeLU(tanh)", "fwd"),
        ("softmax (fp32 math)", "fwd+bwd"), ("bias + GeLU(tanh)", "fwd+bwd")]
    assert all(r.error is None and r.skipped is None for r in results)


def test_cherenkov_passes_and_the_wrong_kernel_fails(results):
    for r in results:
        assert r.impls["eager"].check.passed
        assert r.impls["cherenkov"].check.passed, r.impls["cherenkov"].check.describe()
        assert not r.impls["wrong"].check.passed
        n_outputs = 1 if r.mode == "fwd" else 1 + len(r.case.grad_inputs)
        assert len(r.impls["cherenkov"].check.errors) == n_outputs
        for name in ("eager", "cherenkov"):
            assert r.impls[name].time_s > 0 and r.impls[name].error is None


def test_cherenkov_kernels_are_recorded_per_variant(results):
    fwd, bwd = results[0].impls["cherenkov"], results[2].impls["cherenkov"]
    assert len(fwd.kernels) == 1 and fwd.kernels[0][2] > 0    # softmax: one fused kernel
    assert len(bwd.kernels) >= 2                               # forward graph + backward graph
    assert results[0].impls["eager"].kernels == []


def test_rows_bandwidth_speedup_and_prediction(results):
    spec = hw.device("h200")
    copy_bw = 1e9
    r = row(results[0], spec, copy_bw)
    t = results[0].impls["cherenkov"].time_s
    assert r["bytes"] == 2 * 8 * 64 * 4
    assert r["impls"]["cherenkov"]["GBps"] == pytest.approx(r["bytes"] / t / 1e9)
    assert r["impls"]["cherenkov"]["pct_of_copy"] == pytest.approx(100 * r["bytes"] / t / copy_bw)
    assert r["speedup_vs_eager"] == pytest.approx(results[0].impls["eager"].time_s / t)
    assert r["speedup_vs_torch.compile"] is None                # not run here
    kernel_bytes = results[0].impls["cherenkov"].kernels[0][2]
    expect = kernel_bytes / spec.achievable_bandwidth + spec.launch_overhead_s
    assert r["predicted_s"] == pytest.approx(expect)
    assert r["prediction_error"] == pytest.approx((expect - t) / t)
    assert r["subject_ok"]


def test_summary_leaves_out_wrong_results(results):
    spec = hw.device("h200")
    rows = [row(r, spec, 1e9) for r in results]
    rows[0]["impls"]["cherenkov"]["check"]["passed"] = False      # pretend one was wrong
    rows[0]["subject_ok"] = False
    s = summary(rows)
    assert s["measured"] == 3
    assert "softmax (fp32 math) [fwd] cherenkov" in s["failed_checks"]
    assert sum("wrong" in f for f in s["failed_checks"]) == 4
    assert s["geomean_speedup_vs_eager"] > 0


def test_write_markdown_and_json(results, tmp_path, monkeypatch):
    monkeypatch.setenv("CHERENKOV_COMMIT", "abc1234")
    monkeypatch.setattr("cherenkov.bench.report.commit", lambda: "abc1234")
    spec = hw.current_device(CPU)
    meta = metadata(CPU, spec, "memory", 5e9, "smoke")
    md, js = write(results, meta, spec, tmp_path)
    md2, _ = write(results, meta, spec, tmp_path)
    assert md != md2 and md2.name.endswith("_2.md")           # never overwrites
    data = json.loads(js.read_text())
    for key in ("date", "device", "torch", "triton", "commit", "copy_bandwidth_Bps"):
        assert data["meta"][key]
    assert data["meta"]["commit"] == "abc1234"
    assert len(data["rows"]) == 4
    text = md.read_text()
    assert "wrong: WRONG" in text and "abc1234" in text and "Cost report" in text
    assert text.count("| softmax (fp32 math) |") == 2


def test_isolated_variants_run_in_a_fresh_process_and_come_back_whole():
    """Settings.isolate (`cherenkov bench --isolate`): a mode's variants run in a child
    process; results come back as if run here."""
    from cherenkov.bench import isolated
    cases = [c for c in SUITES["memory"]("smoke", torch.float32) if c.name == "add + RMSNorm"]
    settings = Settings(device=torch.device("cpu"), isolate=("fwd+bwd",),
                        suite=("memory", "smoke", torch.float32))
    (fwd, both), = [run_suite(cases, [EAGER, CHERENKOV], settings)]
    assert (fwd.mode, both.mode) == ("fwd", "fwd+bwd") and both.error is None
    for result in (fwd, both):
        for name in ("eager", "cherenkov"):
            r = result.impls[name]
            assert r.error is None and r.check.passed and r.time_s > 0
    assert both.impls["cherenkov"].kernels and all(
        isinstance(k, tuple) and k[2] > 0 for k in both.impls["cherenkov"].kernels)
    with pytest.raises(RuntimeError, match="no single case"):
        isolated.run_elsewhere(isolated.request("memory", "smoke", torch.float32, "no such",
                                                "fwd", ["eager"], settings))
