"""cherenkov/bench/suites/memory.py: the cases compute what they say, bytes as documented."""
import torch
import torch.nn.functional as F

from cherenkov.bench.case import prepare, step
from cherenkov.bench.suites import SUITES
from cherenkov.bench.suites.memory import SHAPES, rope, rope_tables


def _by_name(scale="smoke", dtype=torch.float32):
    return {c.name: c for c in SUITES["memory"](scale, dtype)}


def test_every_case_has_both_modes_and_runs_eagerly():
    cases = _by_name()
    assert len(cases) == 8
    for case in cases.values():
        assert case.modes == ("fwd", "fwd+bwd")
        inputs = prepare(case, "fwd+bwd", case.make_inputs(torch.device("cpu")))
        out = case.fn(*inputs)
        grads = torch.autograd.grad(out.sum(), [inputs[i] for i in case.grad_inputs])
        assert all(g.shape == inputs[i].shape for g, i in zip(grads, case.grad_inputs))


def test_full_size_bytes_by_hand():
    cases = _by_name("full", torch.bfloat16)
    E, s = 32768 * 4096, 2
    assert cases["softmax (fp32 math)"].bytes == {"fwd": 2 * E * s, "fwd+bwd": 5 * E * s}
    assert cases["SwiGLU silu(a)*b"].bytes == {"fwd": 3 * E * s, "fwd+bwd": 8 * E * s}
    ln = cases["add + LayerNorm"].bytes
    assert ln["fwd"] == 3 * E * s + 2 * 4096 * s                      # x, r, y; w, b
    assert ln["fwd+bwd"] == 7 * E * s + 5 * 4096 * s + 2 * 32768 * 8  # + mean/rstd out and in
    ce = cases["cross-entropy V=128256"].bytes
    assert ce["fwd+bwd"] == 3 * 16384 * 128256 * s + 2 * 16384 * 8 + 16384 * 4
    rows, hidden, (B, T, H, D), _, _ = SHAPES["full"]
    assert B * T * H * D == rows * hidden                             # RoPE moves as much


def test_rope_rotates_pairs_by_the_table_angle():
    T, D = 5, 8
    cos, sin = rope_tables(T, D, "cpu")
    x = torch.randn(1, T, 1, D, dtype=torch.float64)
    y = rope(x, cos, sin)
    angle = torch.arange(T)[:, None] / 10000.0 ** (torch.arange(0, D, 2) / D)   # (T, D/2)
    x1, x2 = x[0, :, 0, : D // 2], x[0, :, 0, D // 2:]
    expect1 = x1 * angle.cos() - x2 * angle.sin()
    expect2 = x2 * angle.cos() + x1 * angle.sin()
    torch.testing.assert_close(y[0, :, 0], torch.cat((expect1, expect2), -1).to(y.dtype),
                               rtol=1e-6, atol=1e-6)


def test_fwd_bwd_step_returns_output_and_input_gradients():
    case = _by_name()["cross-entropy V=96"]
    logits, targets = prepare(case, "fwd+bwd", case.make_inputs(torch.device("cpu")))
    loss, dlogits = step(case.fn, case, "fwd+bwd", (logits, targets), None)
    probs = torch.softmax(logits.detach().float(), -1)
    expect = (probs - F.one_hot(targets, probs.shape[-1])) / logits.shape[0]
    torch.testing.assert_close(dlogits, expect)
    assert loss.dim() == 0 and logits.grad is None         # nothing accumulated into .grad
