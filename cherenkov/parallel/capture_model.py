"""Capture any PyTorch language model for the planner: embedding + N repeated blocks + head.

    model = MyTransformer(...)                    # built under torch.device("meta") if huge
    captured = capture_model(model, seq=2048)
    captured.layers, captured.heads               # (48, 32)
    embed, layer, head = captured.graphs(batch=4, seq=2048)   # three LayerGraphs

1. Repeated blocks (`find_blocks`): among the children of every `nn.ModuleList` and
   `nn.Sequential`, the run of at least two consecutive modules of one class with the same
   parameter shapes that holds the most parameters: a transformer's layer stack. Code before
   the run is the embedding stage, code after it the head. No such run: `NoRepeatedBlocks`.
2. Export: the run is cut to its first block for the duration of a non-strict
   `torch.export.export` of the training loss (`lm_loss`: cross-entropy of the model's
   logits, unless a `loss(model, idx, targets)` is given) at batch 2 and the planned `seq`.
   Export runs on fake tensors: a model on the meta device (or a real one) is never
   allocated, so a trillion-parameter model captures in a fraction of a second.
3. Cut: the nodes the kept block's modules ran (`nn_module_stack`) are the layer; the
   ancestors of the block's activation input are the embedding; what follows, up to the
   cross-entropy, is the head. `from_graph.py` converts each, once; `graphs(batch, seq)`
   rescales them (`graph_rewrites.rescale`), so the search never re-captures.

The planner takes a `CapturedModel` wherever it takes a `ModelConfig`: both have `name`,
`layers`, `heads`, `kv_heads`, `head_dim` and `seq`, and `model_graphs`,
`model_param_count` and `model_flops_per_token` below answer the rest for either.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from cherenkov.models.config import ModelConfig
from cherenkov.parallel.from_graph import (CROSS_ENTROPY, NLL, Region, UnsupportedOp,
                                           embedding_graph, packet, region_graph)
from cherenkov.parallel.graph_rewrites import rescale
from cherenkov.parallel.layer_graph import LayerGraph
from cherenkov.parallel.layer_graph import embedding_graph as config_embedding
from cherenkov.parallel.layer_graph import head_graph as config_head
from cherenkov.parallel.layer_graph import layer_graph as config_layer

CAPTURE_BATCH = 2  # sequences in the captured batch (1 would let export specialise on it)


class NoRepeatedBlocks(ValueError):
    """The model has no run of repeated blocks for the planner to solve once and repeat."""


@dataclass(frozen=True)
class BlockRun:
    path: str                 # the container's path in the model ("h", "model.layers")
    container: nn.Module
    start: int                # index of the first block among the container's children
    count: int

    @property
    def paths(self) -> tuple[str, ...]:
        keys = list(self.container._modules)[self.start:self.start + self.count]
        return tuple(f"{self.path}.{k}" if self.path else k for k in keys)

    @property
    def first(self) -> str:
        """Path of the first block, as it is named while the run is cut to it."""
        key = list(self.container._modules)[self.start]
        return f"{self.path}.{key}" if self.path else key


def _signature(m: nn.Module):
    return type(m), tuple(tuple(p.shape) for p in m.parameters())


def find_blocks(model: nn.Module) -> BlockRun:
    """The run of repeated blocks holding the most parameters (see the module docstring)."""
    best, best_params = None, 0
    for path, mod in model.named_modules():
        if not isinstance(mod, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(mod._modules.values())
        i = 0
        while i < len(children):
            j = i + 1
            while j < len(children) and _signature(children[j]) == _signature(children[i]):
                j += 1
            params = (j - i) * sum(p.numel() for p in children[i].parameters())
            if j - i >= 2 and params > best_params:
                best, best_params = BlockRun(path, mod, i, j - i), params
            i = j
    if best is None:
        raise NoRepeatedBlocks(
            f"{type(model).__name__} has no repeated blocks: the planner plans a model as an "
            "embedding, a run of >= 2 identical blocks (same class and parameter shapes, "
            "children of an nn.ModuleList or nn.Sequential) and a head, solving one block and "
            "repeating it; found no such run")
    return best


@contextmanager
def first_block_only(run: BlockRun):
    """Temporarily cut the run to its first block (a ModuleList is re-keyed 0..n-1)."""
    saved = run.container._modules
    items = list(saved.items())
    kept = items[:run.start + 1] + items[run.start + run.count:]
    if isinstance(run.container, nn.ModuleList):
        kept = [(str(i), m) for i, (_, m) in enumerate(kept)]
    run.container._modules = type(saved)(kept)
    try:
        yield
    finally:
        run.container._modules = saved


def lm_loss(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of `model(idx)`'s logits (a tensor, a tuple's first item, or `.logits`)."""
    out = model(idx)
    logits = getattr(out, "logits", None)
    if logits is None:
        logits = out[0] if isinstance(out, (tuple, list)) else out
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


class _Loss(nn.Module):
    def __init__(self, model, loss):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, idx, targets):
        return self.loss(self.model, idx, targets)


@dataclass(frozen=True)
class CapturedModel:
    """A model's three graphs, captured once at (CAPTURE_BATCH, seq)."""
    name: str
    layers: int
    seq: int
    embed: LayerGraph
    layer: LayerGraph
    head: LayerGraph
    block_path: str                     # path of the container of the repeated blocks
    blocks: tuple[str, ...]             # path of every block
    # block parameter path -> (its weight in `layer`, stored [out, in] as nn.Linear's), for
    # cherenkov.shard; wq/wk/wv map to their merged matmul's weight
    block_layout: dict = field(default_factory=dict)

    @property
    def attention(self) -> list:
        return [op for op in self.layer.ops if op.kind == "attention"]

    @property
    def heads(self) -> int:     # 0 without attention: any tensor-parallel degree divides it
        return self.attention[0].attr("heads") if self.attention else 0

    @property
    def kv_heads(self) -> int:
        return self.attention[0].attr("kv_heads") if self.attention else 0

    @property
    def head_dim(self) -> int:  # picks the flash-attention rate; 128 when there is none
        return self.attention[0].attr("head_dim") if self.attention else 128

    @property
    def param_count(self) -> int:
        return self.embed.param_count + self.layers * self.layer.param_count + \
            self.head.param_count

    def flops_per_token(self, seq: int) -> float:
        """Model FLOPs per token of a training step in the PaLM convention, as
        `models.counting.training_flops_per_token`: 6 per matmul weight (LM head included),
        12 * layers * heads * head_dim * seq for attention, recompute not counted."""
        matmul = lambda g: sum(g.values[op.weights[0]].numel for op in g.ops if op.kind == "matmul")
        attn = sum(op.attr("heads") * op.attr("head_dim") for op in self.attention)
        return 6.0 * (self.layers * matmul(self.layer) + matmul(self.head)) + \
            12.0 * self.layers * attn * seq

    def graphs(self, batch: int, seq: int) -> tuple[LayerGraph, LayerGraph, LayerGraph]:
        tag = f"{self.name} b={batch} s={seq}"
        return (rescale(self.embed, batch, seq, f"embedding {tag}"),
                rescale(self.layer, batch, seq, f"layer {tag}"),
                rescale(self.head, batch, seq, f"head {tag}"))


def capture_model(model: nn.Module, seq: int, dtype: torch.dtype = torch.bfloat16,
                  loss=None, name: str | None = None) -> CapturedModel:
    """Capture `model` for training on sequences of `seq` tokens in `dtype` (see above)."""
    run = find_blocks(model)
    exported = export_one_block(model, run, seq, loss or lm_loss)
    graph, sig = exported.graph, exported.graph_signature
    names, first = {}, {}   # parameter path -> the first path of the same tensor (tied weights)
    for path, p in model.named_parameters(remove_duplicate=False):
        names[path] = first.setdefault(id(p), path)
    params = {n: names[sig.inputs_to_parameters[n.name].removeprefix("model.")]
              for n in graph.nodes if n.name in sig.inputs_to_parameters}
    idx = next(n for n in graph.nodes if n.name == sig.user_inputs[0])
    kinds = node_kinds(graph, params, idx)
    # the regions: the block's nodes, the embedding before its input, the head after it
    calls = [n for n in graph.nodes if n.op == "call_function"]
    prefix = f"model.{run.first}"
    block = [n for n in calls if any(path == prefix or path.startswith(prefix + ".")
                                     for path, _ in (n.meta.get("nn_module_stack") or {}).values())]
    inside = set(block)
    x = _single(p for n in block for p in n.all_input_nodes
                if kinds[p] == "act" and p not in inside)
    out = _single(n for n in block if kinds[n] == "act" and any(u not in inside for u in n.users))
    before = _ancestors(x, inside)
    after = [n for n in calls if n not in inside and n not in before]
    loss_node = next((n for n in reversed(after) if kinds[n] == "act"
                      and packet(n) in CROSS_ENTROPY | NLL), None)
    if loss_node is None:
        raise UnsupportedOp(f"{type(model).__name__}'s loss has no cross-entropy after the "
                            "blocks: give capture_model a loss(model, idx, targets) that uses "
                            "F.cross_entropy")
    common = dict(kinds=kinds, batch=CAPTURE_BATCH, seq=seq,
                  itemsize=dtype.itemsize,
                  param_dtype=next(p.dtype for p in model.parameters() if p.is_floating_point()))
    name = name or type(model).__name__
    embed = embedding_graph(Region([n for n in calls if n in before], idx, x, params=params,
                                   prefix="model", **common), f"embedding {name}")
    local = {k: v.removeprefix(run.first + ".") for k, v in params.items()}
    layer_region = Region(block, x, out, params=local, prefix=prefix, **common)
    layer = region_graph(layer_region, f"layer {name}", repeat_io=True)
    tied = frozenset(n for n, v in embed.values.items() if v.weight)  # counted there already
    head = region_graph(Region(after, out, loss_node, params=params, prefix="model",
                               shared=tied, **common), f"head {name}")
    return CapturedModel(name, run.count, seq, embed, layer, head, run.path, run.paths,
                         dict(layer_region.layout))


def export_one_block(model: nn.Module, run: BlockRun, seq: int, loss):
    """torch.export of `loss(model, idx, targets)` in training mode, the run cut to one block."""
    idx = torch.zeros(CAPTURE_BATCH, seq, dtype=torch.long, device=next(model.parameters()).device)
    targets = torch.zeros_like(idx)  # a distinct tensor: export would merge equal inputs
    training = model.training
    model.train()
    try:
        with first_block_only(run):
            return torch.export.export(_Loss(model, loss), (idx, targets), strict=False)
    except Exception as e:
        raise RuntimeError(f"could not capture {type(model).__name__} with torch.export at "
                           f"batch {CAPTURE_BATCH}, seq {seq} (its blocks cut to {run.first}): "
                           f"{type(e).__name__}: {e}") from e
    finally:
        model.train(training)


def node_kinds(graph, params: dict, idx) -> dict:
    """node -> "act" (depends on the input ids), "param", "weight" (computed from parameters
    only) or "const" (neither: RoPE tables, masks, targets)."""
    kinds = {}
    for n in graph.nodes:
        ins = {kinds[p] for p in n.all_input_nodes}
        if n.op == "placeholder":
            kinds[n] = "param" if n in params else "act" if n is idx else "const"
        else:
            kinds[n] = "act" if "act" in ins else "weight" if ins & {"param", "weight"} else "const"
    return kinds


def _ancestors(node, stop: set) -> set:
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in seen and n not in stop:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def _single(nodes):
    found = list(dict.fromkeys(nodes))
    if len(found) != 1:
        raise UnsupportedOp(f"the repeated block must take and return one activation tensor; "
                            f"it has {len(found)} ({', '.join(n.name for n in found)})")
    return found[0]


# ---- the planner's questions, for a ModelConfig or a CapturedModel -------------------------

def model_graphs(model, batch: int, seq: int) -> tuple[LayerGraph, LayerGraph, LayerGraph]:
    """(embedding, layer, head) graphs for a microbatch of `batch` sequences of `seq`."""
    if isinstance(model, ModelConfig):
        return (config_embedding(model, batch, seq), config_layer(model, batch, seq),
                config_head(model, batch, seq))
    return model.graphs(batch, seq)


def model_param_count(model) -> int:
    if isinstance(model, ModelConfig):
        from cherenkov.models.counting import param_count
        return param_count(model)
    return model.param_count


def model_flops_per_token(model, seq: int) -> float:
    if isinstance(model, ModelConfig):
        from cherenkov.models.counting import training_flops_per_token
        return training_flops_per_token(model, seq)
    return model.flops_per_token(seq)
