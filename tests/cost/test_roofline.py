"""The roofline against hand-computed numbers."""
import pytest
import torch

from cherenkov import cost, hw
from cherenkov.hw.spec import DeviceSpec

TOY = DeviceSpec(name="toy", vendor="acme", kind="gpu",
                 peak_flops={"fp32_vector": 10e12, "bf16_tensor": 100e12},
                 memory_bytes=16e9, memory_bandwidth=1e12, l2_bytes=4e6,
                 sram_per_sm_bytes=1e5, sm_count=10, registers_per_sm=65536,
                 max_threads_per_sm=2048, warp_size=32, launch_overhead_s=5e-6)


def test_memory_bound_kernel():
    parts = cost.roofline(TOY, flops=1e9, bytes_moved=1e9)
    assert parts.compute_s == pytest.approx(1e9 / 10e12)
    assert parts.memory_s == pytest.approx(1e9 / 1e12)
    assert parts.bound == "memory"
    assert cost.kernel_time(TOY, 1e9, 1e9) == pytest.approx(1e-3 + 5e-6)


def test_compute_bound_kernel_uses_the_tensor_core_rate():
    t = cost.kernel_time(TOY, flops=1e12, bytes_moved=1e6, dtype=torch.bfloat16, tensor_core=True)
    assert t == pytest.approx(1e12 / 100e12 + 5e-6)
    t_vector = cost.kernel_time(TOY, flops=1e12, bytes_moved=1e6, dtype=torch.bfloat16)
    assert t_vector == pytest.approx(1e12 / 10e12 + 5e-6)


def test_measured_rates_replace_peaks():
    probed = TOY.replace(measured_copy_bandwidth=0.8e12, measured_flops={"fp32_vector": 8e12})
    assert cost.kernel_time(probed, 0, 1e9) == pytest.approx(1e9 / 0.8e12 + 5e-6)
    assert cost.kernel_time(probed, 1e12, 0) == pytest.approx(1e12 / 8e12 + 5e-6)


def test_bf16_add_on_h200_moves_three_tensors():
    # x + y over 32768x4096 bf16: read x and y, write the sum; our card copies at 4.22 TB/s.
    h200 = hw.device("h200")
    c = cost.pointwise_cost(h200, 32768 * 4096, torch.bfloat16, inputs=2, outputs=1)
    assert c.bytes == 3 * 32768 * 4096 * 2 == 805_306_368
    assert c.time_s == pytest.approx(805_306_368 / 4.22e12 + 4e-6)
    assert cost.roofline(h200, c.flops, c.bytes, torch.bfloat16).bound == "memory"


def test_ridge_intensity():
    assert cost.ridge_intensity(TOY) == pytest.approx(10.0)
    assert cost.ridge_intensity(hw.device("h200"), torch.bfloat16, True) == \
        pytest.approx(780e12 / 4.22e12)


def test_zero_work_costs_the_launch():
    assert cost.kernel_time(TOY, 0, 0) == 5e-6


@pytest.mark.parametrize("flops,nbytes,name", [(-1.0, 0.0, "flops"), (0.0, float("nan"), "bytes")])
def test_negative_work_is_rejected(flops, nbytes, name):
    with pytest.raises(ValueError, match=name):
        cost.kernel_time(TOY, flops, nbytes)
