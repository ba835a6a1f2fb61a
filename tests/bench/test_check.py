"""cherenkov/bench/check.py: right-up-to-rounding passes, a wrong kernel fails."""
import torch

from cherenkov.bench.check import check, floor, relative_error, upcast


def _softmax_triplet(dtype):
    x = torch.randn(16, 64, dtype=dtype)
    reference = torch.softmax(upcast((x,))[0], -1)
    eager = torch.softmax(x, -1)
    return x, eager, reference


def test_relative_error_by_hand():
    ref = torch.tensor([3.0, 4.0])                       # norm 5
    assert relative_error(torch.tensor([3.0, 4.5]), ref) == 0.1
    assert relative_error(torch.tensor([float("nan"), 4.0]), ref) == float("inf")
    assert relative_error(torch.zeros(3), ref) == float("inf")   # shape mismatch


def test_upcast_keeps_leaves_and_integers():
    x = torch.randn(3, dtype=torch.bfloat16).requires_grad_()
    t = torch.tensor([1, 2])
    ux, ut = upcast((x, t))
    assert ux.dtype == torch.float32 and ux.requires_grad and ux.is_leaf
    assert ut is t
    assert upcast((torch.randn(2),))[0].dtype == torch.float64


def test_eager_and_an_fp32_recomputation_pass_in_bf16():
    x, eager, reference = _softmax_triplet(torch.bfloat16)
    assert check(eager, eager, reference).passed
    fused = torch.softmax(x.float(), -1).to(torch.bfloat16)     # fp32 math, one rounding
    result = check(fused, eager, reference)
    assert result.passed, result.describe()


def test_wrong_results_fail():
    x, eager, reference = _softmax_triplet(torch.float32)
    off_by_a_percent = eager * 1.01
    assert not check(off_by_a_percent, eager, reference).passed
    no_max_subtraction_but_wrong_axis = torch.softmax(x, 0)
    assert not check(no_max_subtraction_but_wrong_axis, eager, reference).passed
    nan = eager.clone()
    nan[0, 0] = float("nan")
    assert not check(nan, eager, reference).passed
    assert not check((eager, eager), eager, reference).passed      # output count differs


def test_tuple_outputs_are_checked_one_by_one():
    x, eager, reference = _softmax_triplet(torch.float32)
    result = check((eager, eager * 2), (eager, eager), (reference, reference))
    assert not result.passed
    assert result.errors[0] <= result.allowed[0] and result.errors[1] > result.allowed[1]
    assert "WRONG" in result.describe()


def test_floor_follows_the_dtype():
    assert floor(torch.bfloat16) == torch.finfo(torch.bfloat16).eps / 2
    assert floor(torch.float32) == 1e-5
