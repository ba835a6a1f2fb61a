"""GPU: cherenkov.attention over random problems vs the fp64 math definition -- shapes (odd
lengths, GQA, head dims 32-128), bf16 and fp16, built-in and user mods (captured tensors with
gradients), block-mask tiles, the stored-dS and descriptor backward paths, lse gradients and
the decode kernel. Each case's error must stay within twice the error of the same math run in
the inputs' dtype (and under an absolute cap); no NaN, fully masked rows exactly 0."""
import random

import pytest
import torch

import cherenkov.attention as ca
from cherenkov.attention import launch_bwd

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MASKS = ("none", "causal", "window", "prefix", "document", "padding")
SCORES = ("none", "alibi", "softcap", "relative", "head_scale")


def _draw(seed: int) -> dict:
    rng = random.Random(seed)
    hk = rng.choice([1, 2, 4])
    grad = rng.random() < 0.8
    q_len = rng.choice([1, 7, 37, 64, 128, 200, 333, 512]) if grad else rng.choice([1, 3, 16])
    kv_len = rng.choice([q_len, rng.choice([5, 64, 101, 256, 450, 700])])
    return dict(B=rng.choice([1, 2, 3]), HK=hk, G=rng.choice([1, 2, 4]), Q=q_len, KV=kv_len,
                D=rng.choice([32, 64, 80, 96, 128]),
                dtype=rng.choice([torch.bfloat16, torch.float16]),
                mask=rng.choice(MASKS), score=rng.choice(SCORES),
                block=rng.choice([(64, 64), (128, 64), (64, 128), (32, 32)]),
                ds_store=rng.choice(["auto", "on", "off"]),
                budget=rng.choice([512 << 20, 64 << 10]), grad=grad,
                lse=grad and rng.random() < 0.25, seed=seed)


# the TMA paths need B*H*Q*KV >= launch.TMA_MIN_SCORES, D = 128 and tile-multiple lengths
BIG = [dict(B=2, HK=4, G=2, Q=2048, KV=2048, D=128, dtype=torch.bfloat16, mask=m, score=s,
            block=(64, 64), ds_store=d, budget=512 << 20, grad=True, lse=False, seed=100 + i)
       for i, (m, s, d) in enumerate([("causal", "softcap", "auto"), ("window", "alibi", "on"),
                                      ("prefix", "relative", "auto"),
                                      ("document", "none", "on"), ("causal", "head_scale", "off")])]


def _mods(c: dict, dev, ref: bool):
    """(score_mod, mask_mod, captured tensors needing gradients) for case c; `ref`: the
    captured float tensors as fp64 leaves (the math reference's own)."""
    g = torch.Generator(device="cpu").manual_seed(c["seed"])
    H, S = c["HK"] * c["G"], max(c["Q"], c["KV"])
    leaves = []

    def leaf(t):
        t = t.to(dev, torch.float64 if ref else torch.float32).requires_grad_(c["grad"])
        leaves.append(t)
        return t
    mask = {"none": None, "causal": ca.causal, "window": ca.sliding_window(max(1, S // 5)),
            "prefix": ca.prefix_lm(max(1, S // 3))}.get(c["mask"])
    if c["mask"] == "document":
        cuts = sorted(torch.randint(1, S, (3,), generator=g).tolist()) if S > 1 else []
        offsets = torch.tensor([0, *cuts, S], dtype=torch.int32, device=dev)
        mask = ca.document(offsets=offsets, causal=bool(c["seed"] % 2))
    elif c["mask"] == "padding":      # a captured boolean tensor: keys past each batch's length
        lengths = torch.randint(0, c["KV"] + 1, (c["B"],), generator=g)
        valid = (torch.arange(c["KV"])[None, :] < lengths[:, None]).to(dev)

        def mask(b, h, q_idx, kv_idx):
            return valid[b, kv_idx]
    score = None
    if c["score"] == "alibi":
        score = ca.alibi(ca.alibi_slopes(H, device=dev))
    elif c["score"] == "softcap":
        score = ca.tanh_softcap(5.0)
    elif c["score"] == "relative":
        score = ca.relative_bias(leaf(torch.randn(H, 2 * S - 1, generator=g)))
    elif c["score"] == "head_scale":
        scale = leaf(1.0 + 0.5 * torch.rand(H, generator=g))

        def score(s, b, h, q_idx, kv_idx):
            return s * scale[h]
    return score, mask, leaves


def _rel(x, ref) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-3)).item()


def _run(c: dict, impl: str, q, k, v, do, dlse):
    """Outputs and gradients of `impl`: "ours" (the kernels, inputs' dtype), "math" (the
    definition in the inputs' dtype) or "ref" (the definition in fp64)."""
    dev = q.device
    score, mask, leaves = _mods(c, dev, impl == "ref")
    dtype = torch.float64 if impl == "ref" else q.dtype
    args = [t.detach().to(dtype).requires_grad_(c["grad"]) for t in (q, k, v)]
    gqa = c["G"] > 1
    if impl == "math" and score is not None:      # scores kept in the inputs' dtype
        def score(s, *idx, _mod=score):
            return _mod(s, *idx).to(s.dtype)
    if impl != "ours":
        out, lse = ca.attention_math(*args, score, mask, enable_gqa=gqa, return_lse=True,
                                     lse_grad=True)
    else:
        bm = ca.block_mask(mask, c["B"], c["HK"] * c["G"], c["Q"], c["KV"], block=c["block"],
                           device=dev) if mask is not None else None
        out, lse = ca.attention(*args, score_mod=score, block_mask=bm, enable_gqa=gqa,
                                return_lse=True)
    results = [out]
    if c["grad"]:
        loss = (out.double() * do).sum() + ((lse.double().nan_to_num(neginf=0.0) * dlse).sum()
                                            if c["lse"] else 0.0)
        results += torch.autograd.grad(loss, args + leaves)
    return results, lse


@pytest.mark.parametrize("c", [_draw(s) for s in range(40)] + BIG,
                         ids=lambda c: f"s{c['seed']}-{c['mask']}-{c['score']}-D{c['D']}")
def test_random_problem_matches_math(c, monkeypatch):
    monkeypatch.setattr(launch_bwd, "DS_STORE", c["ds_store"])
    monkeypatch.setattr(launch_bwd, "DS_BUDGET", c["budget"])
    torch.manual_seed(c["seed"])
    H = c["HK"] * c["G"]
    q = torch.randn(c["B"], H, c["Q"], c["D"], device="cuda", dtype=c["dtype"])
    k, v = (torch.randn(c["B"], c["HK"], c["KV"], c["D"], device="cuda", dtype=c["dtype"])
            for _ in range(2))
    # dO in the inputs' dtype (the kernels' backward receives it so): every implementation
    # differentiates the same rounded problem
    do = torch.randn(c["B"], H, c["Q"], c["D"], device="cuda", dtype=c["dtype"]).double()
    dlse = torch.randn(c["B"], H, c["Q"], device="cuda", dtype=torch.float64)
    ours, lse = _run(c, "ours", q, k, v, do, dlse)
    ref, ref_lse = _run(c, "ref", q, k, v, do, dlse)
    low, _ = _run(c, "math", q, k, v, do, dlse)
    names = ["out", "dq", "dk", "dv"] + [f"captured{i}" for i in range(len(ours) - 4)]
    for name, x, r, lp in zip(names, ours, ref, low):
        assert not torch.isnan(x).any(), name
        err, bound = _rel(x, r), 2 * _rel(lp, r) + 1e-2
        assert err <= min(bound, 0.1), (name, err, bound)
    empty = torch.isinf(ref_lse) & (ref_lse < 0)
    assert (ours[0][empty] == 0).all()
    finite = ~empty
    assert torch.allclose(lse[finite].double(), ref_lse[finite], atol=2e-2, rtol=1e-3)
