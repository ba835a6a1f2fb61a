"""Tests for cherenkov/passes/partition.py: the cost-model recompute-vs-save min-cut.

Gradients are compared with eager; the saved set is read off the partitioner's report and
checked against the forward module's actual outputs.
"""
import dataclasses
import functools
import operator

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function, make_boxed_func

import cherenkov
from cherenkov import hw
from cherenkov.passes import in_memory
from cherenkov.passes import partition as P

H200 = hw.device("h200")
# slow compute, fast memory: every FLOP a million times dearer than on an H200
SLOW_COMPUTE = dataclasses.replace(
    H200, peak_flops={k: v / 1e6 for k, v in H200.peak_flops.items()}, measured_flops={})
# fast compute, slow memory: the H200 with its bandwidth cut 100x
SLOW_MEMORY = dataclasses.replace(
    H200, memory_bandwidth=H200.memory_bandwidth / 100, measured_copy_bandwidth=None)


def mlp(x, w1, w2, w3):
    h = F.gelu(x @ w1)            # (8, 32)
    h = torch.tanh(h) * h + 1.0   # a pointwise chain to recompute or save
    return (F.gelu(h @ w2) @ w3).sum()


def sig_tanh(x, w):
    return (torch.sigmoid(x @ w) * torch.tanh(x @ w)).sum()


def _inputs(*shapes):
    return [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]


MLP_SHAPES = [(8, 16), (16, 32), (32, 32), (32, 4)]


def _partition(fn, shapes, spec, memory_budget=None, decompositions=None):
    """Run fn through AOTAutograd with our partitioner; (grads, report, fw module, bw module)."""
    mods = {}

    def capture(kind):
        def compiler(gm, example_inputs):
            mods[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    part = functools.partial(P.cherenkov_partition, device_spec=spec, memory_budget=memory_budget)
    compiled = aot_function(fn, fw_compiler=capture("fw"), bw_compiler=capture("bw"),
                            partition_fn=part, decompositions=decompositions)
    args = _inputs(*shapes)
    compiled(*args).backward()
    grads = [a.grad for a in args]
    ref = [a.detach().clone().requires_grad_() for a in args]
    fn(*ref).backward()
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r.grad)
    return P.LAST_REPORT, mods["fw"], mods["bw"]


def _fw_saved_names(fw, report):
    """Names of the values the forward module really hands to the backward."""
    out = next(n for n in fw.graph.nodes if n.op == "output").args[0]
    names = {a.name for a in out if isinstance(a, torch.fx.Node)}
    return {d.name for d in report.saved} & names, names


@pytest.mark.parametrize("spec", [H200, SLOW_COMPUTE, SLOW_MEMORY], ids=["h200", "slow-compute",
                                                                          "slow-memory"])
@pytest.mark.parametrize("fn, shapes", [(mlp, MLP_SHAPES), (sig_tanh, [(8, 16), (16, 32)])],
                         ids=["mlp", "sig_tanh"])
def test_gradients_match_eager_and_report_matches_forward(fn, shapes, spec):
    report, fw, bw = _partition(fn, shapes, spec)
    found, outputs = _fw_saved_names(fw, report)
    activations = {d.name for d in report.saved if d.op != "placeholder"}
    assert activations <= outputs   # every saved activation is an output of the forward
    assert all(d.why for d in report.decisions)
    assert str(report).startswith("partition for")


def test_saved_set_follows_the_device_rates():
    slow_compute, _, _ = _partition(mlp, MLP_SHAPES, SLOW_COMPUTE)
    slow_memory, _, bw = _partition(mlp, MLP_SHAPES, SLOW_MEMORY)
    assert slow_compute.saved_bytes > slow_memory.saved_bytes
    assert len(slow_memory.recomputed) > len(slow_compute.recomputed)
    assert all(d.why == "cheaper to recompute" for d in slow_memory.recomputed)
    assert any(d.why == "cheaper to save" for d in slow_compute.saved)
    # what was recomputed really runs in the backward module
    bw_ops = {str(n.target) for n in bw.graph.nodes if n.op == "call_function"}
    assert {d.op for d in slow_memory.recomputed} <= bw_ops


@pytest.mark.parametrize("spec", [H200, SLOW_COMPUTE, SLOW_MEMORY], ids=["h200", "slow-compute",
                                                                          "slow-memory"])
def test_matmul_outputs_are_never_recomputed(spec):
    report, fw, bw = _partition(mlp, MLP_SHAPES, spec)
    assert not [d for d in report.recomputed if "mm" in d.op]
    assert all(d.action == "save" for d in report.decisions if d.op == "aten.mm.default")
    fw_mm = [n for n in fw.graph.nodes if n.target == torch.ops.aten.mm.default]
    bw_mm = [n for n in bw.graph.nodes if n.target == torch.ops.aten.mm.default]
    assert len(fw_mm) == 3
    assert len(bw_mm) == 6   # dX and dW of each forward matmul; no forward matmul re-run


def test_memory_budget_is_respected():
    free, _, _ = _partition(mlp, MLP_SHAPES, SLOW_COMPUTE)
    floor, _, _ = _partition(mlp, MLP_SHAPES, SLOW_COMPUTE, memory_budget=0.0)
    assert not floor.fits_budget and floor.saved_bytes < free.saved_bytes
    target = (free.saved_bytes + floor.saved_bytes) / 2
    fraction = target / SLOW_COMPUTE.memory_bytes          # <= 1: a fraction of device memory
    report, fw, _ = _partition(mlp, MLP_SHAPES, SLOW_COMPUTE, memory_budget=fraction)
    assert report.fits_budget and report.lagrange > 0
    assert report.saved_bytes <= target
    assert any(d.why == "recomputed to fit the budget" for d in report.recomputed)
    assert P.budget_bytes(2.0, SLOW_COMPUTE) == 2e9     # > 1: gigabytes


def residual_blocks(x, g1, w1, g2, w2):
    """Two pre-norm residual blocks: the residual stream is read again after each matmul."""
    h = x + F.layer_norm(x, (16,), g1) @ w1
    h = h + F.layer_norm(h, (16,), g2) @ w2
    return torch.tanh(h).sum()


def _is_normalized(node) -> bool:
    """(x - mean) * rstd, a LayerNorm's normalized input, as our decompositions write it."""
    return node.target == torch.ops.aten.mul.Tensor and any(
        getattr(a, "target", None) == torch.ops.aten.sub.Tensor for a in node.args)


def test_layer_norm_saves_its_input_not_the_normalized_value():
    from cherenkov.capture.decompositions import decomposition_table
    report, fw, bw = _partition(residual_blocks, [(8, 16), (16,), (16, 16), (16,), (16, 16)],
                                H200, decompositions=decomposition_table())
    saved = [a for a in next(n for n in fw.graph.nodes if n.op == "output").args[0]
             if isinstance(a, torch.fx.Node)]
    # the normalized values are recomputed in the backward, not written by the forward
    assert not [n for n in saved if _is_normalized(n)]
    assert sum(_is_normalized(n) for n in bw.graph.nodes) >= 2
    # the residual stream after the first block (in memory anyway: the second block's residual
    # add reads it after the matmul) is saved, not rebuilt from x and the matmul's result
    assert any(n.target == torch.ops.aten.add.Tensor and any(
        getattr(a, "target", None) == torch.ops.aten.mm.default for a in n.args) for n in saved)
    # no forward matmul runs again: dX and dW of each
    assert len(bw.graph.find_nodes(op="call_function", target=torch.ops.aten.mm.default)) == 4
    assert all(d.action == "recompute" for d in report.decisions if d.op == "aten.sub.Tensor")
    # the report says why the residual cost only its read: the forward writes it anyway
    residual = [d for d in report.saved if d.op == "aten.add.Tensor"]
    assert residual and all(d.in_memory for d in residual)
    assert "in memory anyway" in str(report)


def pooled(x, w):
    """A scaled ReLU and a max pool: the pool's backward reads its indices by gather."""
    return (F.max_pool2d(torch.relu(x * w), 3, 2, 1) ** 2).sum()


def test_pooling_indices_are_saved_not_recomputed():
    # recomputed, the indices would be written in the backward for its gather to read, and
    # the pooling re-run over its input: dearer than the forward writing them once
    report, fw, bw = _partition(pooled, [(2, 3, 16, 16), (1, 3, 1, 1)], H200)
    assert not bw.graph.find_nodes(op="call_function",
                                   target=torch.ops.aten.max_pool2d_with_indices.default)
    saved = [d for d in report.saved if d.op == str(operator.getitem)]
    assert any(d.nbytes == 2 * 3 * 8 * 8 * 8 for d in saved)     # the int64 indices
    reader = next(n for n in bw.graph.nodes
                  if n.target == torch.ops.aten.max_pool2d_with_indices_backward.default)
    assert not in_memory.fusible_reader(reader)


def test_cherenkov_compile_with_our_partitioner_matches_eager():
    compiled = cherenkov.compile(sig_tanh, strict=True, partitioner="cherenkov")
    x, w = [torch.randn(*s, requires_grad=True) for s in [(8, 16), (16, 32)]]
    out = compiled(x, w)
    out.backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = sig_tanh(xr, wr)
    ref.backward()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-4)
    assert P.LAST_REPORT is not None and P.LAST_REPORT.saved


def test_config_validates_partitioner_and_budget():
    from cherenkov.config import Config
    env = {"CHERENKOV_PARTITIONER": "cherenkov", "CHERENKOV_MEMORY_BUDGET": "0.25"}
    cfg = Config.from_env(env)
    assert cfg.partitioner == "cherenkov" and cfg.memory_budget == 0.25
    assert Config().partitioner == "cherenkov" and Config().memory_budget is None
    assert Config.from_env({"CHERENKOV_PARTITIONER": "torch"}).partitioner == "torch"
    with pytest.raises(ValueError):
        Config(partitioner="networkx")
    with pytest.raises(ValueError):
        Config.from_env({"CHERENKOV_MEMORY_BUDGET": "lots"})


def test_dump_shows_the_partitioners_decisions(tmp_path):
    import cherenkov
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    fn = lambda x, w: torch.nn.functional.gelu(x @ w).sum()  # noqa: E731
    cherenkov.compile(fn, strict=True, partitioner="cherenkov", dump_dir=str(tmp_path))(x, w).backward()
    texts = [p.read_text() for p in tmp_path.rglob("0_partition.txt")]
    assert texts and any("save" in t for t in texts)
