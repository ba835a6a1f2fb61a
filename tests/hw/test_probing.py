"""probe() on the CPU: it measures, caches on disk, and merges over the preset."""
import json
import os

import pytest
import torch

from cherenkov import hw
from cherenkov.hw import catalog, live, measure_cpu
from cherenkov.hw import probing as probe_module


def test_cpu_probe_measures_and_caches(tmp_path):
    spec = hw.probe("cpu", cache_dir=tmp_path, quick=True)
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    record = json.loads(files[0].read_text())
    assert record["key"]["torch"] == torch.__version__ and record["preset"] == "cpu"
    assert spec.kind == "cpu" and spec.sm_count == os.cpu_count()
    assert spec.measured_copy_bandwidth == record["spec"]["measured_copy_bandwidth"] > 0
    assert set(spec.measured_flops) == {"fp32_vector", "fp64_vector"}
    assert all(rate > 0 for rate in spec.measured_flops.values())
    assert 0 < spec.launch_overhead_s < 1e-2
    assert spec.peak_flops == live.host_spec().peak_flops        # peaks are not overwritten
    assert "probed" in spec.notes


def test_cached_record_is_reused_and_refresh_measures_again(tmp_path, monkeypatch):
    first = hw.probe("cpu", cache_dir=tmp_path, quick=True)

    def fake_measure(quick=False):
        return ({"measured_copy_bandwidth": 123e9, "measured_flops": {"fp32_vector": 7e11},
                 "launch_overhead_s": 3e-6}, {"fake": True})

    monkeypatch.setattr(measure_cpu, "measure", fake_measure)
    again = hw.probe("cpu", cache_dir=tmp_path)
    assert again.measured_copy_bandwidth == first.measured_copy_bandwidth   # from the cache
    fresh = hw.probe("cpu", cache_dir=tmp_path, refresh=True)
    assert fresh.measured_copy_bandwidth == 123e9
    assert fresh.measured_flops == {"fp32_vector": 7e11}
    assert fresh.launch_overhead_s == 3e-6
    assert hw.cached_probe("cpu", cache_dir=tmp_path)["details"] == {"fake": True}


def test_current_device_merges_a_cached_probe(tmp_path, monkeypatch):
    plain = hw.current_device("cpu", cache_dir=tmp_path)
    assert plain.measured_copy_bandwidth is None and plain.sm_count == os.cpu_count()
    monkeypatch.setattr(measure_cpu, "measure", lambda quick=False: (
        {"measured_copy_bandwidth": 55e9, "launch_overhead_s": 2e-6}, {}))
    hw.probe("cpu", cache_dir=tmp_path)
    merged = hw.current_device("cpu", cache_dir=tmp_path)
    assert merged.measured_copy_bandwidth == 55e9 and merged.launch_overhead_s == 2e-6
    assert merged.achievable_bandwidth == 55e9


def test_cache_is_keyed_by_versions(tmp_path, monkeypatch):
    dev = torch.device("cpu")
    before = probe_module.cache_path(dev, tmp_path)
    monkeypatch.setattr(torch, "__version__", "0.0.1-other")
    assert probe_module.cache_path(dev, tmp_path) != before


def test_stale_or_broken_cache_is_ignored(tmp_path):
    path = probe_module.cache_path(torch.device("cpu"), tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert hw.cached_probe("cpu", cache_dir=tmp_path) is None
    path.write_text(json.dumps({"schema": 0, "spec": {}}))
    assert hw.cached_probe("cpu", cache_dir=tmp_path) is None


def test_merge_files_rates_under_the_presets_keys():
    l40s = hw.device("l40s")                       # lists fp64_vector, no fp64_tensor
    merged = probe_module.merge(l40s, {"spec": {"measured_flops": {
        "fp64_tensor": 1e12, "bf16_tensor": 300e12}}})
    assert merged.measured_flops == {"fp64_vector": 1e12, "bf16_tensor": 300e12}
    assert merged.achievable_flops(torch.float64) == 1e12
    h200 = probe_module.merge(hw.device("h200"), {"spec": {"measured_flops": {"tf32_tensor": 4e14}}})
    assert h200.measured_flops == {"bf16_tensor": 780e12, "tf32_tensor": 4e14}  # keeps the rest


def test_merge_rejects_bad_measurements():
    with pytest.raises(ValueError, match="field 'measured_copy_bandwidth'"):
        probe_module.merge(hw.device("h100"), {"spec": {"measured_copy_bandwidth": -3.0}})


def test_device_for_config():
    assert hw.device_for_config("a100-40gb") == catalog.device("a100-40gb")
    assert hw.device_for_config("auto", "cpu").kind == "cpu"


def test_l2_effect_is_the_largest_fast_working_set():
    from cherenkov.hw import measure_cuda
    curve = [(2**21, 2e12), (2**24, 9e12), (2**25, 8e12), (2**26, 4.5e12), (2**30, 4.2e12)]
    assert measure_cuda.l2_effect_bytes(curve, hbm_bandwidth=4.2e12) == 2**25
    assert measure_cuda.l2_effect_bytes(curve[-1:], hbm_bandwidth=4.2e12) == 0
