"""passes/joint_cse.py: the in-place CSE of the joint graph keeps exactly the nodes torch's
fx_graph_cse keeps, with the same arguments, on joint graphs AOTAutograd builds (models of the
train suite, and functions with duplicates, mutation, random ops and returned aliases)."""
import copy

import pytest
import torch
from functorch.compile import aot_function, make_boxed_func
from torch._functorch.compile_utils import fx_graph_cse
from torch._functorch.partitioners import default_partition

from cherenkov.models import ModelConfig, build_model
from cherenkov.passes.joint_cse import eliminate_joint_duplicates, mutation_regions


def joint_graph(fn, *args):
    """The joint forward/backward GraphModule AOTAutograd hands a partitioner for fn(*args)."""
    captured = []

    def partition(joint, joint_inputs, **kwargs):
        captured.append(copy.deepcopy(joint))
        return default_partition(joint, joint_inputs, **kwargs)
    def boxed(gm, example_inputs):
        return make_boxed_func(gm)
    compiled = aot_function(fn, fw_compiler=boxed, bw_compiler=boxed, partition_fn=partition)
    out = compiled(*args)
    (out if isinstance(out, torch.Tensor) else out[0]).sum().backward()
    return captured[0]


def described(graph):
    return [(n.name, n.op, str(n.target), str(n.args), str(n.kwargs)) for n in graph.nodes]


def assert_same_as_torch(gm):
    from torch._inductor.pattern_matcher import compute_mutation_region_ids
    theirs = copy.deepcopy(gm)
    compute_mutation_region_ids(theirs.graph)
    ours = copy.deepcopy(gm)
    mutation_regions(ours.graph)
    assert [n.meta["mutation_region_id"] for n in ours.graph.nodes] == \
        [n.meta["mutation_region_id"] for n in theirs.graph.nodes]
    expected = fx_graph_cse(copy.deepcopy(gm).graph)
    ours = copy.deepcopy(gm)
    removed = eliminate_joint_duplicates(ours.graph)
    assert described(ours.graph) == described(expected)
    return removed


def test_duplicates_merged_random_ops_kept_apart():
    def fn(x, y, buf):
        a = torch.sin(x) * torch.sin(x)                  # two sin: one kept
        b = (x.t() @ y.t()) + (x.t() @ y.t())           # the same transposes and matmul
        r = torch.rand_like(x) + torch.rand_like(x)     # random: never merged
        c = (y + buf).cos()
        buf.add_(1.0)                                    # an input mutated (a copy_ at the end)
        d = (y + buf).cos()
        return a.sum() + b.sum() + r.sum() + c.sum() + d.sum()
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    assert assert_same_as_torch(joint_graph(fn, x, y, torch.ones(4, 4))) > 0


def test_mutation_regions_counted_as_torch_does():
    def fn(x, buf, out):
        buf.add_(1.0)                                    # in place on an input
        torch.sin(buf, out=out)                          # an out= call
        return (x * buf).sum() + out.sum()
    assert_same_as_torch(joint_graph(fn, torch.randn(3, requires_grad=True), torch.ones(3),
                                     torch.zeros(3)))


def test_returned_aliases_kept_apart():
    def fn(x):
        return x.view(-1), x.view(-1) * 2, torch.exp(x), torch.exp(x)
    x = torch.randn(3, 5, requires_grad=True)
    assert_same_as_torch(joint_graph(lambda x: sum(o.sum() for o in fn(x)), x))


def test_arguments_compared_by_type():
    def fn(x):
        return (x * 1).sum() + (x * 1.0).sum() + (x * True).sum() + x.sum([0]) + x.sum((0,))
    assert_same_as_torch(joint_graph(fn, torch.randn(3, 5, requires_grad=True)))


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_train_suite_models(family):
    cfg = ModelConfig(family, layers=2, hidden=32, heads=2, vocab=64, seq=16, ffn=64,
                      name=f"{family}-tiny")
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").train()
    params = dict(model.named_parameters())
    idx = torch.randint(0, 64, (2, 16))

    def fn(idx, *weights):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = torch.func.functional_call(model, dict(zip(params, weights)), (idx, idx))
        return loss
    gm = joint_graph(fn, idx, *[p.detach().requires_grad_() for p in params.values()])
    assert_same_as_torch(gm)
