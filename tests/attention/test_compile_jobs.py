"""Compile jobs for SDPA calls: what the lowering hands the compile workers must be exactly
the launches the run makes (kernel, argument dtypes and integer values, constexprs and
options), or the worker's cached kernel is never the one loaded."""
import dataclasses

import torch

from cherenkov.attention import launch, sdpa_routing
from cherenkov.runtime.parallel_compile import tensor_arg


def _recorded_launches(q, k, v, do, is_causal):
    plan = sdpa_routing._plan(q, k, is_causal, None)
    rec = launch.Recorder()
    stand_in = dataclasses.replace(plan, kernels=rec)
    out, lse = sdpa_routing.forward(q, k, v, is_causal, plan=stand_in)
    sdpa_routing.backward(do, q, k, v, out, lse, is_causal, plan=stand_in)
    return [(name, tuple(tensor_arg(a.dtype) if isinstance(a, torch.Tensor) else a for a in args),
             tuple(kwargs.items())) for name, args, kwargs in rec.calls]


def _meta(t):
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def test_jobs_from_layouts_equal_the_run_launches():
    B, S, H, D = 2, 96, 3, 16
    qkv = torch.randn(B, S, 3, H, D)                       # q, k, v as strided views of one
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))   # projection, as in a model
    do = torch.randn(B, H, S, D)
    for is_causal in (True, False):
        launches = _recorded_launches(q, k, v, do, is_causal)
        out = torch.empty(B, H, S, D)
        lse = torch.empty(B, H, S)
        forward, backward = sdpa_routing.compile_jobs(
            _meta(q), _meta(k), _meta(v), is_causal, None, q.device,
            {"do": _meta(do), "out": _meta(out), "lse": _meta(lse)})
        jobs = forward + backward
        assert [(j.fn, j.args, j.kwargs) for j in jobs] == launches
        # the dQ kernel computes delta (rowsum(dO * O)) and runs before dK/dV
        assert [j.fn for j in jobs] == ["_attn_fwd", "_attn_bwd_dq", "_attn_bwd_dkdv"]
        assert all(j.path.endswith(".py") for j in jobs)
        fwd_only, none = sdpa_routing.compile_jobs(_meta(q), _meta(k), _meta(v), is_causal,
                                                   None, q.device)
        assert fwd_only == jobs[:1] and none == []
