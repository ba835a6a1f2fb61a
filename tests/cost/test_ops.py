"""FLOP and byte counts of common kernels, and the Cost record."""
import pytest
import torch

from cherenkov import cost, hw


def test_matmul_cost_on_h200():
    h200 = hw.device("h200")
    m = n = k = 8192
    c = cost.matmul_cost(h200, m, n, k, torch.bfloat16)
    assert c.flops == 2 * 8192**3
    assert c.bytes == 3 * 8192 * 8192 * 2
    # compute-bound: at the 780 TFLOP/s our card reaches on bf16
    assert c.time_s == pytest.approx(2 * 8192**3 / 780e12 + 4e-6)
    assert c.intensity == pytest.approx(2 * 8192**3 / (3 * 8192 * 8192 * 2))


def test_batched_matmul_with_fp32_output():
    c = cost.matmul_cost(hw.device("h100"), 128, 256, 64, torch.bfloat16, batch=3,
                         out_dtype=torch.float32)
    assert c.flops == 2 * 3 * 128 * 256 * 64
    assert c.bytes == 3 * ((128 * 64 + 64 * 256) * 2 + 128 * 256 * 4)


def test_pointwise_and_reduction_counts():
    d = hw.device("a100-80gb")
    p = cost.pointwise_cost(d, 1000, torch.float32, inputs=2, outputs=1, flops_per_element=3)
    assert (p.flops, p.bytes) == (3000, 12000)
    assert p.time_s == pytest.approx(12000 / 2.039e12 + 4e-6)
    r = cost.reduction_cost(d, rows=10, cols=100, dtype=torch.bfloat16, out_dtype=torch.float32)
    assert (r.flops, r.bytes) == (1000, 10 * 100 * 2 + 10 * 4)


def test_collective_cost_matches_collective_time():
    c = hw.cluster("2x8xH100-ib400")
    got = cost.collective_cost("all_gather", 1e8, 16, c)
    assert got.bytes == 1e8 and got.flops == 0
    assert got.time_s == cost.collective_time("all_gather", 1e8, 16, c)


@pytest.mark.parametrize("dtype,size", [(torch.bfloat16, 2), ("bf16", 2), ("fp8", 1),
                                        (torch.float8_e4m3fn, 1), ("float64", 8),
                                        (torch.float32, 4)])
def test_itemsize(dtype, size):
    assert cost.itemsize(dtype) == size


def test_cost_record_sums_and_prints():
    a = cost.Cost(flops=2e9, bytes=1e6, time_s=1e-5)
    b = cost.Cost(bytes=3e6, time_s=2e-5)
    total = sum([a, b])
    assert (total.flops, total.bytes) == (2e9, 4e6)
    assert total.time_s == pytest.approx(3e-5)
    assert str(a) == "2.00 GFLOP, 1.00 MB, 10.0 us"
    assert cost.Cost(bytes=0).intensity == float("inf")
    with pytest.raises(ValueError, match="field 'bytes'"):
        cost.Cost(bytes=-1)
