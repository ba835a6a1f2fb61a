"""DeviceSpec / LinkSpec / ClusterSpec: validation names the field; rates pick the right key."""
import math

import pytest
import torch

from cherenkov import hw
from cherenkov.hw.spec import ClusterSpec, DeviceSpec, LinkSpec


def _fields(**changes):
    base = dict(name="toy", vendor="acme", kind="gpu",
                peak_flops={"fp32_vector": 10e12, "bf16_tensor": 100e12, "tf32_tensor": 50e12},
                memory_bytes=16e9, memory_bandwidth=1e12, l2_bytes=4e6, sram_per_sm_bytes=1e5,
                sm_count=10, registers_per_sm=65536, max_threads_per_sm=2048, warp_size=32,
                launch_overhead_s=5e-6)
    base.update(changes)
    return base


@pytest.mark.parametrize("field,value", [
    ("memory_bandwidth", -1.0), ("memory_bandwidth", 0.0), ("memory_bytes", math.nan),
    ("l2_bytes", math.inf), ("sm_count", 0), ("sm_count", 2.5), ("warp_size", -32),
    ("launch_overhead_s", -1e-6), ("kind", "tpu"), ("name", ""), ("vendor", None),
    ("measured_copy_bandwidth", -5.0), ("peak_flops", {}),
])
def test_bad_device_figure_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"field '{field}'"):
        DeviceSpec(**_fields(**{field: value}))


def test_bad_rate_names_the_rate():
    with pytest.raises(ValueError, match=r"field 'peak_flops.bf16_tensor'"):
        DeviceSpec(**_fields(peak_flops={"bf16_tensor": -1.0}))
    with pytest.raises(ValueError, match=r"field 'measured_flops.fp9_tensor' is not a known"):
        DeviceSpec(**_fields(measured_flops={"fp9_tensor": 1.0}))


def test_flops_picks_tensor_or_vector_rate():
    d = DeviceSpec(**_fields())
    assert d.flops(torch.bfloat16) == 100e12
    assert d.flops("bf16", tensor_core=False) == 10e12        # falls back to the fp32 lanes
    assert d.flops(torch.float32) == 50e12                      # fp32 on tensor cores = TF32
    assert d.flops(torch.float32, tensor_core=False) == 10e12
    with pytest.raises(ValueError, match="peak_flops"):
        d.flops(torch.float64)


def test_measured_figures_are_preferred_when_present():
    d = DeviceSpec(**_fields())
    assert d.achievable_bandwidth == 1e12 and d.achievable_flops("bf16") == 100e12
    m = d.replace(measured_copy_bandwidth=0.9e12, measured_flops={"bf16_tensor": 80e12})
    assert m.achievable_bandwidth == 0.9e12
    assert m.achievable_flops(torch.bfloat16) == 80e12
    assert m.flops(torch.bfloat16) == 100e12                    # peak stays the peak
    assert m.achievable_flops(torch.float32, tensor_core=False) == 10e12


def test_spec_is_frozen_and_hashable():
    d = DeviceSpec(**_fields())
    with pytest.raises(Exception):
        d.sm_count = 3
    assert hash(d) == hash(DeviceSpec(**_fields())) and d == DeviceSpec(**_fields())


def test_link_validation():
    with pytest.raises(ValueError, match="field 'bandwidth'"):
        LinkSpec("x", bandwidth=-1.0, latency_s=1e-6)
    with pytest.raises(ValueError, match="field 'latency_s'"):
        LinkSpec("x", bandwidth=1e9, latency_s=-1.0)
    assert LinkSpec("x", bandwidth=1e9, latency_s=0.0).latency_s == 0.0


def test_inconsistent_topology_names_the_field():
    d, link = hw.device("h100"), hw.link("nvlink4")
    with pytest.raises(ValueError, match="field 'gpus_per_node'"):
        ClusterSpec(d, gpus_per_node=0, nodes=1, intra=link)
    with pytest.raises(ValueError, match="field 'nodes'"):
        ClusterSpec(d, gpus_per_node=8, nodes=-2, intra=link, inter=hw.link("ib400"))
    with pytest.raises(ValueError, match="field 'inter' is required"):
        ClusterSpec(d, gpus_per_node=8, nodes=2, intra=link)
    with pytest.raises(ValueError, match="field 'intra'"):
        ClusterSpec(d, gpus_per_node=8, nodes=1, intra="nvlink4")


def test_level_for():
    c = hw.cluster("4x8xH100-ib400")
    assert c.world_size == 32
    assert c.level_for(8, spans_nodes=False) is c.intra
    assert c.level_for(4, spans_nodes=True) is c.inter
    assert c.level_for(16, spans_nodes=False) is c.inter        # cannot fit in one node
    with pytest.raises(ValueError, match="group_size"):
        c.level_for(64, spans_nodes=True)
    with pytest.raises(ValueError, match="field 'nodes'"):
        hw.cluster("8xH100").level_for(2, spans_nodes=True)
