"""A CUDA graph that also reads CPU scalars (an optimizer step on CUDA parameters keeps its step
counters on the CPU): ops whose result is on the CPU run as PyTorch calls there, and the
graph's kernels read a copy of each CPU tensor moved to the graph's device, never the CPU
tensor itself. Checked on fake CUDA tensors, so it runs without a GPU."""
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from cherenkov.ir.ops import Op
from cherenkov.lowering.from_fx import graph_device, lower_fx

aten = torch.ops.aten


def _adam_like_graph() -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    step, p, grad = g.placeholder("step"), g.placeholder("p"), g.placeholder("grad")
    new_step = g.call_function(aten.add.Tensor, (step, 1))
    correction = g.call_function(aten.rsub.Scalar, (g.call_function(
        aten.pow.Scalar, (0.9, new_step)), 1))
    update = g.call_function(aten.div.Tensor, (g.call_function(aten.mul.Tensor, (grad, 0.01)),
                                               correction))
    new_p = g.call_function(aten.sub.Tensor, (p, update))
    g.call_function(aten.copy_.default, (step, new_step))
    g.call_function(aten.copy_.default, (p, new_p))
    g.output((new_p,))
    return torch.fx.GraphModule({}, g)


def test_cpu_scalars_in_a_cuda_graph_run_on_the_cpu_and_reach_kernels_as_copies():
    with FakeTensorMode():
        p, grad = torch.empty(8, 4, device="cuda"), torch.empty(8, 4, device="cuda")
    step = torch.tensor(3.0)
    inputs = [step, p, grad]
    assert graph_device(inputs).type == "cuda"        # not the first input's CPU
    graph, report = lower_fx(_adam_like_graph(), inputs, strict=True)
    nodes = list(graph.nodes())
    kernel_values = [n for n in nodes if n.op not in (Op.INPUT, Op.EXTERN)]
    assert kernel_values
    for node in kernel_values:      # computed by kernels: on the graph's device, reading no CPU value
        assert node.meta.device.type == "cuda", node
        assert all(i.meta is None or i.meta.device.type == "cuda" for i in node.inputs), node
    externs = [n for n in nodes if n.op == Op.EXTERN]
    on_cpu = [n for n in externs if n.meta.device.type == "cpu"]
    moved = [n for n in externs if n.args[0] is aten._to_copy.default]
    # step + 1, 0.9 ** step, 1 - that, and the step's update run on the CPU
    assert {n.args[0] for n in on_cpu} >= {aten.add.Tensor, aten.pow.Scalar, aten.rsub.Scalar,
                                          aten.copy.default}
    assert len(moved) == 1 and moved[0].meta.device.type == "cuda"
    assert moved[0].inputs[0].meta.device.type == "cpu"
    assert any("runs on cpu" in reason for _, reason in report.externs)
    # the CPU counter's update and the CUDA parameter's update are both graph mutations
    assert [i for i, _ in graph.mutations] == [0, 1]


def test_one_element_cpu_constant_reaches_a_cuda_graph_as_its_value():
    """`x.index_put((i,), torch.tensor(-3.0))` traced on CUDA tensors: the constant (and its
    lift_fresh_copy) is a CPU tensor; the kernels read its value, no copy to the device and
    no PyTorch call. Returned itself, it stays a CPU copy of the constant."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    const = g.call_function(aten.lift_fresh_copy.default, (g.get_attr("c"),))
    g.output((g.call_function(aten.add.Tensor, (x, const)), const))
    gm = torch.fx.GraphModule({"c": torch.tensor(-3.0)}, g)
    with FakeTensorMode():
        x = torch.empty(8, 4, device="cuda")
    graph, report = lower_fx(gm, [x], strict=True)
    assert not report.externs
    nodes = list(graph.nodes())
    assert not [n for n in nodes if n.op == Op.EXTERN and n.args[0] is aten._to_copy.default]
    consts = [n for n in nodes if n.op == Op.CONST]
    assert [n.args for n in consts] == [(-3.0,)] and consts[0].meta.device.type == "cuda"
    returned = graph.outputs[1]
    assert returned.op == Op.EXTERN and returned.meta.device.type == "cpu"
    value = returned.args[0]()
    assert torch.equal(value, torch.tensor(-3.0)) and value is not gm.c   # a copy
