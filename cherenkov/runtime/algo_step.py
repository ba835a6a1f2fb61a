"""A plan's library step for mm / addmm by cuBLASLt's fastest algorithm for its problem
(config `matmul_algos`; the choice and its timing are templates/matmul_algos.py's)."""
from __future__ import annotations

import torch

from cherenkov.ir.graph import Node
from cherenkov.lowering.library import Slot
from cherenkov.runtime.compiled_graph import Step
from cherenkov.runtime.triton_launch import TritonLaunch
from cherenkov.templates import cublaslt, matmul_algos


def algo_step(plan, node: Node, fusion) -> Step | None:
    """mm / addmm / mm.dtype as cuBLASLt's fastest algorithm for its problem, chosen over
    its first runs (templates/matmul_algos.py); None when the call is not one it takes. The
    problem is read off the operands at run time (a kernel may lay a weight out otherwise
    than the fake run promised), once per layout."""
    target, t_args, t_kwargs, _ = node.args
    extra = ()                      # mm.dtype's output dtype, passed on to torch's call
    if target is getattr(torch.ops.aten.mm, "dtype", None) and len(t_args) == 3 \
            and isinstance(t_args[2], torch.dtype):
        t_args, extra = t_args[:2], t_args[2:]
    if t_kwargs or not all(isinstance(a, Slot) for a in t_args):
        return None
    metas = [node.inputs[a.index].meta for a in t_args]
    problem = matmul_algos.problem_of_node(target, metas, node.meta, plan.device)
    if problem is None or cublaslt.library() is None \
            or 2 * problem.m * problem.n * problem.k < plan.tune_matmuls:
        return None
    linear = plan._as_linear(node, fusion) if not extra else None
    inputs = linear[3] if linear is not None else [node.inputs[a.index] for a in t_args]
    in_slots = [plan._slot_of(i) for i in inputs]
    out, empty, m, n = plan._slot_of(node), plan.empty, problem.m, problem.n
    if linear is not None:          # (x, w[, bias]): the matmul's b is w.t()
        sa, sb = in_slots[0], in_slots[1]
        sbias = in_slots[2] if len(in_slots) == 3 else None
        call = torch.nn.functional.linear
    else:                           # mm(a, b) / addmm(bias, a, b)
        sa, sb = in_slots[-2], in_slots[-1]
        sbias = in_slots[0] if len(in_slots) == 3 else None
        call = getattr(target, "_op", target)
    transposed = linear is not None
    chosen: dict = {}               # (a's strides, b's strides) -> AlgoMatmul or None
    dtype = problem.d_dtype

    def torch_call(a, b, bias):
        if bias is None:
            return call(a, b, *extra)
        return call(a, b, bias) if transposed else call(bias, a, b)

    def run(env):
        a, b = env[sa], env[sb]
        bias = env[sbias] if sbias is not None else None
        sb_ = b.stride()
        key = (a.stride(), (sb_[1], sb_[0]) if transposed else sb_)
        algo = chosen.get(key, chosen)
        if algo is chosen:           # first run with this layout
            algo = chosen[key] = matmul_algos.for_operands(a, b.t() if transposed else b,
                                                           problem)
        if algo is None:
            env[out] = torch_call(a, b, bias)
            return
        env[out] = algo.run(a, b.t() if transposed else b, bias, lambda: torch_call(a, b, bias),
                            lambda: empty((m, n), (n, 1), dtype), TritonLaunch.stream)

    step = Step("library", run, f"cublaslt_{getattr(target, '__name__', str(target))}")
    step.node = node
    step.reads = in_slots
    step.out_slots = [out]
    return step
