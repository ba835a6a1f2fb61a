"""The per-kernel cost report: predicted beside measured."""
import pytest

from cherenkov import cost


def test_report_lines_total_and_error():
    report = cost.CostReport()
    report.add("add_layernorm", cost.Cost(flops=1e6, bytes=8e8, time_s=2.2e-4))
    report.add("softmax", cost.Cost(flops=2e6, bytes=5e8, time_s=1.0e-4))
    assert report.lines[0].error is None
    report.measure("add_layernorm", 2.0e-4)
    assert report.lines[0].error == pytest.approx(0.1)
    assert report.total.bytes == 1.3e9
    text = str(report)
    lines = text.splitlines()
    assert lines[0].split() == ["kernel", "bytes", "FLOPs", "predicted", "measured", "error"]
    assert "add_layernorm" in lines[1] and "+10.0%" in lines[1] and "200.0 us" in lines[1]
    assert lines[2].rstrip().endswith("-")                       # softmax not measured yet
    assert lines[3].startswith("total") and "1.30 GB" in lines[3] and "320.0 us" in lines[3]
    with pytest.raises(KeyError):
        report.measure("gelu", 1e-4)
