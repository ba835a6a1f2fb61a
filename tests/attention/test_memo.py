"""Launch decisions remembered per call signature (memo.py): decided once for repeated calls,
anew when a shape, a layout or a switch changes; every switch of the launch modules keys them."""
import weakref

import torch

from cherenkov.attention import (api, attention, attention_math, block_mask, causal, launch,
                                 launch_bwd, launch_gluon, launch_gluon_bwd, memo, tanh_softcap,
                                 tuning)

# upper-case module names that are constants, not switches
CONSTANTS = {"LN2"}


def test_every_switch_of_the_launch_modules_keys_the_decisions():
    registered = {(m.__name__, n) for m, names in memo.SWITCHES for n in names}
    assert all(hasattr(m, n) for m, names in memo.SWITCHES for n in names)
    assert all(hash(v) is not None for v in memo.settings())
    for module in (launch, launch_bwd, launch_gluon, launch_gluon_bwd):
        for name, value in vars(module).items():
            if name.isupper() and not callable(value) and name not in CONSTANTS:
                assert (module.__name__, name) in registered, f"{module.__name__}.{name}"
    assert (tuning.__name__, "VERSION") in registered


def _count(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


def _grads(q, k, v, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attention(q, k, v, **kw)
    return (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))


def test_a_repeated_call_decides_once_and_a_new_shape_or_switch_anew(monkeypatch):
    fwd = _count(monkeypatch, launch, "_forward_decision")
    bwd = _count(monkeypatch, launch_bwd, "_backward_decision")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    m = block_mask(causal, 1, 2, 64, 64, block=(32, 32))
    _grads(q, k, v, block_mask=m, score_mod=tanh_softcap(5.0))
    q2, k2, v2 = (torch.randn(1, 2, 64, 16) for _ in range(3))   # other values, same signature
    second = _grads(q2, k2, v2, block_mask=m, score_mod=tanh_softcap(5.0))
    assert len(fwd) == 2 and len(bwd) == 2       # two score mods: two traced pairs, two plans
    mod = tanh_softcap(5.0)
    for x in (q, q2, q):
        _grads(x, k, v, block_mask=m, score_mod=mod)
    assert len(fwd) == 3 and len(bwd) == 3       # one plan, decided on its first call
    ref = attention_math(q2.double(), k2.double(), v2.double(), score_mod=mod, mask_mod=causal)
    assert (second[0].double() - ref).abs().max().item() < 1e-4
    monkeypatch.setattr(launch_bwd, "DS_STORE", "off")      # a switch: decided anew
    _grads(q, k, v, block_mask=m, score_mod=mod)
    assert len(bwd) == 4
    q3, k3, v3 = (torch.randn(1, 2, 32, 16) for _ in range(3))   # another shape
    m3 = block_mask(causal, 1, 2, 32, 32, block=(32, 32))
    _grads(q3, k3, v3, block_mask=m3, score_mod=mod)
    assert len(fwd) == 5 and len(bwd) == 5
    _grads(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, block_mask=m, score_mod=mod)
    assert len(fwd) == 6                         # q laid out (B, S, H, D): other strides
    memo.forget()
    _grads(q, k, v, block_mask=m, score_mod=mod)
    assert len(fwd) == 7


def test_plans_are_kept_for_lasting_masks_only():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    m = block_mask(causal, 1, 2, 64, 64, block=(32, 32))
    api._PLANS.clear()
    attention(q, k, v, block_mask=m)
    attention(q, k, v, block_mask=m)
    assert len(api._PLANS) == 1
    attention(q, k, v, mask_mod=causal)           # a mask built for the call: not kept
    attention(q, k, v)                            # the kept all-full mask: kept
    assert len(api._PLANS) == 2
    old = weakref.ref(m)
    del m
    for _ in range(3):                            # a new mask every step: one plan, the last
        attention(q, k, v, block_mask=block_mask(causal, 1, 2, 64, 64, block=(32, 32)))
    assert len(api._PLANS) == 2 and old() is None


def test_remembered_keys_on_signature_extra_and_settings():
    decided = []

    def decide(plan, x, flag):
        decided.append(flag)
        return (x.shape, flag)
    store: dict = {}
    x = torch.zeros(4, 8)
    assert memo.remembered(store, "k", decide, None, x, extra=(True,)) == (x.shape, True)
    memo.remembered(store, "k", decide, None, torch.ones(4, 8), extra=(True,))
    assert decided == [True]
    memo.remembered(store, "k", decide, None, x, extra=(False,))
    memo.remembered(store, "k", decide, None, x.t(), extra=(True,))
    memo.remembered(store, "k", decide, None, x.double(), extra=(True,))
    memo.remembered(store, "k", decide, None, torch.zeros(40)[1:33].view(4, 8), extra=(True,))
    assert decided == [True, False, True, True, True]       # misaligned: a new signature


def test_the_flex_op_keeps_a_plan_per_lasting_mask(monkeypatch):
    from cherenkov.attention import flex_op
    decided = _count(monkeypatch, launch, "_forward_decision")
    bm = block_mask(causal, 1, 2, 64, 64, block=(32, 32))
    blocks = (bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
              bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks, bm.full_q_indices)
    spec = flex_op.FlexSpec(None, lambda b, h, qi, kv: qi >= kv, (), (), (32, 32))
    key = flex_op.register(spec)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    outs = [flex_op.forward(q, k, v, blocks, [], [], 0.25, key)[0] for _ in range(2)]
    assert len(spec._plans) == 1 and len(decided) == 1 and torch.equal(*outs)
    ref = attention_math(q.double(), k.double(), v.double(), mask_mod=causal, scale=0.25)
    assert (outs[0].double() - ref).abs().max().item() < 1e-4
