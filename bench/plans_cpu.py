"""What Cherenkov's passes plan for the H200, on the CPU (no GPU): per training graph, its
kernels, the bytes they read and write (each buffer once per kernel), and the block
configuration of its reductions. Cases: 2-layer versions of the train suite's GPT-2 and Llama
(their graphs per layer are the full models'), and the pooling suite's BatchNorm (training) +
ReLU + max pool stem on a channels-last bf16 input at the suite's shape. For comparing plans
across commits (a change meant to leave the transformers' kernels alone, say).

    .venv/bin/python bench/plans_cpu.py OUT_DIR        # OUT_DIR/plans_cpu.md
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from functorch.compile import aot_function, make_boxed_func
from torch._subclasses.fake_tensor import FakeTensorMode

sys.path.insert(0, os.path.dirname(__file__))
import compile_time_cpu as recorded  # noqa: E402

import cherenkov  # noqa: E402
import cherenkov.backend as backend  # noqa: E402
from cherenkov import hw  # noqa: E402
from cherenkov.bench.report import commit, md_table  # noqa: E402
from cherenkov.capture.decompositions import decomposition_table  # noqa: E402
from cherenkov.config import current  # noqa: E402
from cherenkov.codegen.blocks import choose_blocks  # noqa: E402
from cherenkov.lowering.from_fx import lower_fx  # noqa: E402
from cherenkov.models import ModelConfig, build_model  # noqa: E402
from cherenkov.passes.cse import eliminate_common_subexpressions  # noqa: E402
from cherenkov.passes.fusion import fuse  # noqa: E402
from cherenkov.passes.split_reductions import split_reductions  # noqa: E402

SPEC = hw.device("h200")


def model_graphs(family: str) -> list:
    """(name, gm, inputs) of a 2-layer model's forward and backward, as the backend gets them."""
    backend.ShapeSpecialized = recorded.Recorder
    recorded.graphs.clear()
    if family == "llama":
        cfg = ModelConfig("llama", layers=2, hidden=2048, heads=16, ffn=5632, vocab=32000,
                          seq=128, name="l")
    else:
        cfg = ModelConfig("gpt", layers=2, hidden=768, heads=12, vocab=50304, seq=128, name="g")
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab, (1, cfg.seq))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=family == "llama"):
        _, loss = cherenkov.compile(model)(idx, idx)
    loss.backward()
    torch._dynamo.reset()
    return list(recorded.graphs)


def stem_graphs() -> list:
    """The channels-last stem's forward and backward graphs (AOTAutograd, our decompositions and
    partitioner choice), with fake CUDA inputs of the recorded layouts; the forward returns one
    output to the caller, the rest are saved for the backward."""
    graphs = []

    def keep(name):
        def compiler(gm, inputs):
            graphs.append((name, gm, inputs))
            return make_boxed_func(gm.forward)
        return compiler

    def stem(x, w, b, mean, var):
        return F.max_pool2d(F.relu(F.batch_norm(x, mean, var, w, b, training=True)), 3, 2, 1)
    x = torch.randn(64, 64, 112, 112, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last).requires_grad_()
    params = (torch.rand(64) + 0.5, torch.randn(64), torch.zeros(64), torch.ones(64))
    out = aot_function(stem, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                       decompositions=decomposition_table(),
                       partition_fn=backend._partition_fn(current()))(x, *params)
    out.backward(torch.randn_like(out))
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    result = []
    for name, gm, inputs in graphs:
        for n in gm.graph.nodes:
            n.meta.pop("val", None)
            n.meta.pop("tensor_meta", None)
            if n.kwargs.get("device") == torch.device("cpu"):    # traced on the CPU: the
                n.kwargs = {**n.kwargs, "device": torch.device("cuda")}   # graph's creations
        if name == "forward":
            gm.meta["cherenkov_caller_outputs"] = 1
        with mode:
            fake = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
                    if isinstance(t, torch.Tensor) else t for t in inputs]
        result.append((name, gm, fake))
    return result


def plan_rows(case: str, graphs: list) -> list:
    rows = []
    for name, gm, inputs in graphs:
        graph, _ = lower_fx(gm, inputs, name=name)
        graph = split_reductions(eliminate_common_subexpressions(graph), SPEC.sm_count, True)
        fusion = fuse(graph, device=SPEC, row_loops=True)
        total, reductions = 0, []
        for g in fusion.groups:
            k = g.kernel
            total += sum(b.numel * b.dtype.itemsize for b in k.inputs + k.outputs)
            if k.R > 1:
                cfg = choose_blocks(k, False, device=SPEC)
                reductions.append(f"{k.X}x{k.R}:{cfg.XBLOCK}x{cfg.RBLOCK}")
        rows.append([case, name, len(fusion.groups), f"{total / 1e6:.2f}",
                     " ".join(reductions) if case == "stem channels-last" else ""])
    return rows


def main(out_dir: str) -> None:
    rows = plan_rows("gpt2 2 layers", model_graphs("gpt")) \
        + plan_rows("llama 2 layers", model_graphs("llama")) \
        + plan_rows("stem channels-last", stem_graphs())
    text = [f"# Plans for the H200 preset, on the CPU (commit {commit()})", "",
            "Reductions as X x R: XBLOCK x RBLOCK (the stem's only).", "",
            *md_table(["case", "graph", "kernels", "MB read + written",
                       "reductions"], rows)]
    path = os.path.join(out_dir, "plans_cpu.md")
    with open(path, "w") as f:
        f.write("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
