"""Turn one region of a captured aten graph into the planner's `LayerGraph` vocabulary.

`capture_model.py` exports a model on fake/meta tensors and cuts the graph into three regions
(embedding, one repeated block, head); `region_graph` converts one of them. Anchor ops map
one to one onto planner ops:

    aten.linear / mm / addmm / matmul / bmm   -> matmul   (one operand a parameter, [in, out])
    aten.scaled_dot_product_attention (+ the  -> attention (heads, kv_heads, head_dim from q/k)
      private flash/efficient/cudnn variants)
    aten.layer_norm / rms_norm                -> norm
    aten.cross_entropy_loss, nll_loss after   -> cross_entropy (ends the head)
      a log_softmax

Every other tensor op that depends on the activations is pointwise (`torch.Tag.pointwise`),
a reduction or a movement/dtype op; these are fused the way a compiler fuses them: an op
joins the group of its consumers when all its consumers are in one group, so each group has
one output. A group that only moves data (views, transposes, splits, dtype casts,
repeat_interleave of GQA heads, dropout with p=0) is an alias of its input; a group with a
mean/variance/softmax over the last dimension is a `norm` (it cannot be split over
features); any other group is one `elementwise` op. Values that depend only on parameters
(weight-derived) or on neither (constants such as RoPE tables and masks) are not activations:
parameters reach the op that uses them as weights; constants are dropped. Any other op
depending on activations raises `UnsupportedOp` naming it (an honest error rather than a
guessed cost). The embedding region is planned as one `embedding` op (see `embedding_graph`).

Conventions follow `layer_graph.py`, so a captured GPT or Llama block matches the
config-derived one: activations are [batch, seq, features] (numel / (b*s) features), weights
[in, out]; FLOPs: 2*b*s*k*n per matmul, attention as `layer_graph.attention_flops`, 8 per
element per norm, a per-op table for pointwise ops; bytes as `graph_rewrites.op_bytes`;
saved for backward: a matmul its activation input, attention its q/k/v, a norm its input, a
fused group the activation inputs that feed an op needing them (anything but
add/sub/neg/casts/movement and products with constants), cross-entropy its logits. Then
`graph_rewrites` merges sibling matmuls (wq/wk/wv -> `attention.wq+wk+wv`) and counts a
tensor saved by two ops once. Floating values in the model's own parameter dtype count at the
planned dtype's size (bf16 training of an fp32 module); values a model explicitly computes in
another dtype keep it.

The graph is `torch.export`'s default (training) IR, where linear, SDPA, layer_norm and
cross_entropy stay whole; a fully decomposed graph would lower SDPA to bmm + softmax on the
meta device, which is refused as a product of two activations.
"""
from __future__ import annotations

import operator
from dataclasses import replace

import torch

from cherenkov.parallel.graph_rewrites import (dedupe_saved, mark_fused_qkv,
                                               merge_sibling_matmuls, op_bytes)
from cherenkov.parallel.layer_graph import LayerGraph, LayerOp, Value, attention_flops

aten = torch.ops.aten

MATMULS = {aten.linear, aten.mm, aten.addmm, aten.matmul, aten.bmm}
ATTENTION = {aten.scaled_dot_product_attention, aten._scaled_dot_product_flash_attention,
             aten._scaled_dot_product_efficient_attention,
             aten._scaled_dot_product_cudnn_attention,
             aten._scaled_dot_product_flash_attention_for_cpu}
NORMS = {aten.layer_norm, aten.native_layer_norm, aten.rms_norm}
CROSS_ENTROPY = {aten.cross_entropy_loss}
NLL = {aten.nll_loss, aten.nll_loss_nd, aten.nll_loss_forward, aten.nll_loss2d}
LOG_SOFTMAX = {aten.log_softmax, aten._log_softmax}
# Zero-FLOP ops: views, copies, dtype casts, splits. repeat_interleave/expand of K/V heads
# are free because the planner assumes a GQA-aware attention kernel.
MOVEMENT = {aten.view, aten.reshape, aten._unsafe_view, aten.transpose, aten.permute, aten.t,
            aten.contiguous, aten.clone, aten.expand, aten.unsqueeze, aten.squeeze,
            aten.flatten, aten.unflatten, aten.split, aten.split_with_sizes, aten.chunk,
            aten.unbind, aten.slice, aten.select, aten.narrow, aten.repeat_interleave,
            aten.detach, aten.alias, aten.to, aten._to_copy, aten.type_as, aten.cat,
            aten.stack, aten.lift_fresh_copy, aten.view_as, aten.reshape_as, aten.movedim}
REDUCTIONS = {aten.sum, aten.mean, aten.amax, aten.amin, aten.var, aten.var_mean, aten.std,
              aten.std_mean, aten.logsumexp, aten.softmax, aten._softmax, aten.log_softmax,
              aten._log_softmax, aten.linalg_vector_norm, aten.max, aten.min, aten.norm}
FEATURE_REDUCTIONS = REDUCTIONS - {aten.sum, aten.max, aten.min}  # make a group a `norm`
SKIPPED = {aten._assert_tensor_metadata, aten._assert_scalar, aten.sym_constrain_range_for_size}
POINTWISE = {aten.dropout, aten.rsub}  # pointwise ops without torch.Tag.pointwise
# Forward FLOPs per output element of pointwise ops (1 for any op not listed).
FLOPS_PER_ELEMENT = {aten.gelu: 8.0, aten.silu: 5.0, aten.sigmoid: 4.0, aten.tanh: 4.0,
                     aten.softplus: 4.0, aten.erf: 4.0, aten.mish: 8.0, aten.elu: 2.0,
                     aten.dropout: 2.0}
# Ops that need no activation for their backward (products need the other operand).
LINEAR = {aten.add, aten.sub, aten.neg, aten.rsub, aten.dropout, aten.where, aten.clone,
          aten.sum, aten.mean} | MOVEMENT
PRODUCTS = {aten.mul, aten.div}
NORM_FLOPS_PER_ELEMENT = 8.0  # as layer_graph's norm: mean, variance, normalise, scale, shift


class UnsupportedOp(ValueError):
    """An op the planner has no rule for, named with the module that calls it."""


def packet(node):
    target = node.target
    return getattr(target, "overloadpacket", target)


def arg(node, name: str, default=None):
    """Argument `name` of an aten call, by keyword or by its position in the schema."""
    if name in node.kwargs:
        return node.kwargs[name]
    names = [a.name for a in node.target._schema.arguments]
    i = names.index(name) if name in names else len(node.args)
    return node.args[i] if i < len(node.args) else default


def is_tensor(node) -> bool:
    return isinstance(tensor_val(node), torch.Tensor)


def tensor_val(node):
    val = node.meta.get("val")
    return val[0] if isinstance(val, (tuple, list)) else val


def numel(node) -> int:
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return sum(v.numel() for v in vals if isinstance(v, torch.Tensor))


def module_path(node, prefix: str) -> str:
    """The innermost module that called `node`, relative to `prefix` ("" for prefix itself)."""
    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    if path == prefix:
        return ""
    return path[len(prefix) + 1:] if prefix and path.startswith(prefix + ".") else path


class Region:
    """Converts the live nodes of one region (those `out` depends on) into planner ops.

    `kinds` maps every graph node to "act" (depends on the model's input), "param",
    "weight" (computed from parameters only) or "const"; `params` maps parameter
    placeholders to names; `shared` names weights counted in another graph."""

    def __init__(self, nodes, x, out, kinds, params, batch, seq, itemsize, param_dtype,
                 prefix="", shared=frozenset()):
        self.x, self.out, self.kinds, self.params = x, out, kinds, params
        self.b0, self.s0, self.itemsize, self.param_dtype = batch, seq, itemsize, param_dtype
        self.prefix, self.shared = prefix, shared
        live, stack = set(), [out]
        members = set(nodes)
        while stack:
            n = stack.pop()
            if n in live or n not in members:
                continue
            live.add(n)
            stack.extend(n.all_input_nodes)
        self.nodes = [n for n in nodes if n in live and kinds[n] == "act" and is_tensor(n)
                      and packet(n) not in SKIPPED]
        self.values: dict[str, Value] = {}
        self.ops: list[LayerOp] = []
        self.ref: dict = {}          # act node -> planner value name
        # parameter name -> (planner weight name, stored [out, in] i.e. transposed)
        self.layout: dict[str, tuple[str, bool]] = {}
        self.group_targets: dict[str, set] = {}  # elementwise op name -> its aten ops

    # ---- values -------------------------------------------------------------------------
    def act_shape(self, node) -> tuple[int, int, int]:
        n, bs = numel(node), self.b0 * self.s0
        if n % bs:
            raise UnsupportedOp(f"{node.target} in {module_path(node, self.prefix) or 'block'} "
                                f"makes a value of shape {tuple(tensor_val(node).shape)}, not "
                                f"per token of a [{self.b0}, {self.s0}] batch")
        return (self.b0, self.s0, n // bs)

    def size_of(self, node) -> int:
        dtype = tensor_val(node).dtype
        if dtype.is_floating_point and dtype == self.param_dtype:
            return self.itemsize
        return dtype.itemsize

    def new_value(self, name, node, elements: int | None = None) -> str:
        name = self.unique(name)
        shape = self.act_shape(node)
        if elements is not None:
            shape = shape[:2] + (elements // (self.b0 * self.s0),)
        self.values[name] = Value(name, shape, self.size_of(node))
        return name

    def unique(self, name: str) -> str:
        names = set(self.values) | {op.name for op in self.ops}
        base, k = name, 1
        while name in names:
            name, k = f"{base}_{k}", k + 1
        return name

    def weight(self, node, shape=None) -> str:
        name = self.params[node]
        if name not in self.values:
            shape = tuple(shape or tensor_val(node).shape)
            self.values[name] = Value(name, shape, self.itemsize, name not in self.shared)
        return name

    def weights_of(self, node) -> list[str]:
        """Parameters feeding `node` through weight-derived ops, in first-use order."""
        if self.kinds[node] == "param":
            return [self.weight(node)]
        if self.kinds[node] != "weight":
            return []
        found = []
        for p in node.all_input_nodes:
            found += [w for w in self.weights_of(p) if w not in found]
        return found

    def acts(self, node) -> list:
        return [p for p in node.all_input_nodes if self.kinds[p] == "act"]

    # ---- conversion ---------------------------------------------------------------------
    def convert(self, x_name="x") -> None:
        self.values[x_name] = Value(x_name, self.act_shape(self.x), self.size_of(self.x))
        self.ref[self.x] = x_name
        group = self.groups()
        for n in self.nodes:
            p = packet(n)
            if n in group:
                if group[n][0] is n:
                    self.add_group(n, group[n][1])
            elif p in MATMULS:
                self.add_matmul(n)
            elif p in ATTENTION:
                self.add_attention(n)
            elif p in NORMS:
                self.add_norm(n)
            elif p in CROSS_ENTROPY or p in NLL:
                self.add_cross_entropy(n)
            else:
                raise UnsupportedOp(f"aten.{p.__name__} in module "
                                    f"'{module_path(n, self.prefix) or '<block>'}' has no planner "
                                    "rule (supported: matmuls with a parameter operand, "
                                    "scaled_dot_product_attention, layer/rms norm, "
                                    "cross-entropy, pointwise ops, reductions, views)")
        self.ops = merge_sibling_matmuls(self.ops, self.values, self.layout)
        self.ops = mark_fused_qkv(dedupe_saved(self.ops), self.values)

    def groupable(self, n) -> bool:
        p = packet(n)
        if p is operator.getitem or p in MOVEMENT or p in REDUCTIONS or p in POINTWISE:
            return True
        return isinstance(n.target, torch._ops.OpOverload) and torch.Tag.pointwise in n.target.tags

    def groups(self) -> dict:
        """node -> (group root, members): an op joins its consumers' group if they share one."""
        live = set(self.nodes)
        group: dict = {}
        for n in reversed(self.nodes):
            if not self.groupable(n):
                continue
            users = [u for u in n.users if u in live]
            roots = {group[u][0] if u in group else None for u in users}
            if n is not self.out and len(roots) == 1 and None not in roots:
                root = roots.pop()
                group[n] = group[root]
                group[n][1].insert(0, n)
            else:
                group[n] = (n, [n])
        return group

    def add_group(self, root, members) -> None:
        inside = set(members)
        inputs = []
        for m in members:
            inputs += [self.ref[p] for p in self.acts(m) if p not in inside
                       and self.ref[p] not in inputs]
        weights = []
        for m in members:
            for p in m.all_input_nodes:
                weights += [w for w in self.weights_of(p) if w not in weights]
        flops = sum(self.pointwise_flops(m) for m in members)
        if flops == 0 and len(inputs) == 1 and not weights:
            self.ref[root] = inputs[0]   # pure data movement: an alias of its input
            return
        is_norm = any(self.feature_reduction(m) for m in members)
        if is_norm:  # named after its module (attention_norm), else its costliest op (mlp.gelu)
            label = module_path(next(m for m in members if self.feature_reduction(m)),
                                self.prefix) or "norm"
        else:
            costly = max(members, key=lambda m: (self.pointwise_flops(m), -members.index(m)))
            label = ".".join(filter(None, (module_path(costly, self.prefix),
                                           packet(costly).__name__.lstrip("_"))))
        # A trailing repeat of K/V heads is free (GQA kernel): size the value before it.
        name = self.new_value(label, root, self.narrowest(root))
        kind = "norm" if is_norm else "elementwise"
        if is_norm:
            flops = NORM_FLOPS_PER_ELEMENT * self.values[name].numel
        saved = tuple(inputs) if is_norm else self.group_saved(members)
        self.add_op(name, kind, inputs, weights, flops, saved, cheap=bool(saved))
        self.group_targets[name] = {packet(m) for m in members}
        self.ref[root] = name

    def group_saved(self, members) -> tuple[str, ...]:
        """The group's activation inputs that feed an op whose backward needs them: the
        fused kernel's backward recomputes the rest from these (x + gamma * y keeps y)."""
        inside, feeds, saved = set(members), {}, []
        for m in members:
            feeds[m] = {self.ref[p] for p in self.acts(m) if p not in inside}
            for p in self.acts(m):
                feeds[m] |= feeds.get(p, set())
            if self.needs_input(m):
                saved += [v for v in sorted(feeds[m]) if v not in saved]
        return tuple(saved)

    def pointwise_flops(self, n) -> float:
        p = packet(n)
        if p is operator.getitem or p in MOVEMENT or p in SKIPPED:
            return 0.0
        if p is aten.dropout and (arg(n, "p") == 0 or not arg(n, "train")):
            return 0.0
        if p in REDUCTIONS:
            return float(sum(numel(a) for a in self.acts(n)))
        return FLOPS_PER_ELEMENT.get(p, 1.0) * numel(n)

    def feature_reduction(self, n) -> bool:
        if packet(n) not in FEATURE_REDUCTIONS:
            return False
        ndim = tensor_val(n.all_input_nodes[0]).dim()
        dims = arg(n, "dim")
        if dims is None:
            return False
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        return any(d % ndim == ndim - 1 for d in dims if isinstance(d, int))

    def needs_input(self, n) -> bool:
        """Does the backward of `n` need an activation (or the op is not known to be linear)?"""
        p = packet(n)
        if p is operator.getitem:
            return False
        if p in PRODUCTS:
            operands = [a for a in n.args[:2] if isinstance(a, torch.fx.Node)
                        and self.kinds[a] != "const"]
            return len(operands) > 1
        return p not in LINEAR

    def add_op(self, name, kind, inputs, weights, flops, saved=(), cheap=False, attrs=()):
        op = LayerOp(name, kind, tuple(inputs), name, tuple(weights), flops=float(flops),
                     saved=tuple(saved), cheap=cheap, attrs=tuple(attrs))
        self.ops.append(replace(op, bytes=op_bytes(op, self.values)))

    def matmul_weight(self, node) -> tuple:
        """(parameter placeholder, transposed) behind a weight operand (views/casts allowed)."""
        transposed = False
        while self.kinds[node] == "weight" and (packet(node) in MOVEMENT):
            if packet(node) in (aten.t, aten.transpose, aten.permute):
                transposed = not transposed
            node = node.all_input_nodes[0]
        if self.kinds[node] != "param":
            raise UnsupportedOp(f"matmul weight computed from parameters by {node.target}: the "
                                "planner needs a parameter operand")
        return node, transposed

    def add_matmul(self, n) -> None:
        p = packet(n)
        args = [a for a in n.args if isinstance(a, torch.fx.Node)]
        if p is aten.addmm:
            bias, a, b = args[:3]
        elif p is aten.linear:
            a, b, bias = args[0], args[1], args[2] if len(args) > 2 else None
        else:
            a, b, bias = args[0], args[1], None
        if self.kinds[a] != "act" or self.kinds[b] == "act":
            where = module_path(n, self.prefix) or "<block>"
            raise UnsupportedOp(f"aten.{p.__name__} in '{where}' multiplies two activations "
                                "(or a weight by an activation from the left): write attention "
                                "with F.scaled_dot_product_attention")
        w, transposed = self.matmul_weight(b)
        transposed ^= p is aten.linear
        k, n_out = tensor_val(a).shape[-1], tensor_val(n).shape[-1]
        if numel(w) != k * n_out:
            raise UnsupportedOp(f"aten.{p.__name__} weight {self.params[w]} of shape "
                                f"{tuple(tensor_val(w).shape)} is not a [{k}, {n_out}] matrix "
                                "(batched weights such as MoE experts are not supported)")
        weights = [self.weight(w, (k, n_out))]
        self.layout[weights[0]] = (weights[0], transposed)
        if bias is not None:
            weights += self.weights_of(bias)
        x = self.ref[a]
        name = self.new_value(module_path(n, self.prefix) or "matmul", n)
        self.add_op(name, "matmul", [x], weights, 2.0 * numel(n) * k, saved=(x,))
        self.ref[n] = name

    def add_attention(self, n) -> None:
        q, k, v = n.args[:3]
        d = tensor_val(q).shape[-1]
        per_head = self.b0 * self.s0 * d
        if tensor_val(q).shape[-2] != self.s0 or numel(q) % per_head:
            raise UnsupportedOp(f"attention in '{module_path(n, self.prefix)}' over "
                                f"q of shape {tuple(tensor_val(q).shape)}: only self-attention "
                                f"over the sequence ({self.s0}) is planned")
        heads, kv_heads = numel(q) // per_head, self.narrowest(k) // per_head
        masked = arg(n, "attn_mask") is not None or arg(n, "attn_bias") is not None
        causal = bool(arg(n, "is_causal", False)) and not masked  # a masked kernel does it all
        inputs = list(dict.fromkeys(self.ref[t] for t in (q, k, v) if self.kinds[t] == "act"))
        name = self.new_value(f"{module_path(n, self.prefix)}.sdpa".lstrip("."), n)
        attrs = (("heads", heads), ("kv_heads", kv_heads), ("head_dim", d), ("causal", int(causal)))
        self.add_op(name, "attention", inputs, [],
                    attention_flops(self.b0, self.s0, heads, d, causal), saved=inputs,
                    attrs=attrs)
        self.ref[n] = name

    def narrowest(self, node) -> int:
        """Fewest elements along the chain of views/repeats feeding K (its un-repeated heads)."""
        least = numel(node)
        while packet(node) in MOVEMENT - {aten.cat, aten.stack, aten.split, aten.chunk,
                                          aten.split_with_sizes, aten.unbind} \
                and self.acts(node):
            node = self.acts(node)[0]
            least = min(least, numel(node))
        return least

    def add_norm(self, n) -> None:
        x = self.ref[n.args[0]]
        weights = []
        for p in n.all_input_nodes[1:]:
            weights += self.weights_of(p)
        name = self.new_value(module_path(n, self.prefix) or "norm", n)
        self.add_op(name, "norm", [x], weights, NORM_FLOPS_PER_ELEMENT * numel(n.args[0]),
                    saved=(x,), cheap=True)
        self.ref[n] = name

    def add_cross_entropy(self, n) -> None:
        logits = self.ref[n.args[0]]
        if packet(n) in NLL:  # nll_loss(log_softmax(logits)): absorb the log_softmax group
            producer = next((op for op in self.ops if op.output == logits), None)
            if producer and self.group_targets.get(producer.name, set()) & LOG_SOFTMAX:
                self.ops.remove(producer)
                del self.values[logits]
                logits = producer.inputs[0]
        shape = self.values[logits].shape
        name = self.unique("loss")
        self.values[name] = Value(name, shape[:2], 4)
        self.add_op(name, "cross_entropy", [logits], [], 5.0 * self.values[logits].numel,
                    saved=(logits,))
        self.ref[n] = name

    def graph(self, name: str, repeat_io: bool) -> LayerGraph:
        return LayerGraph(name, dict(self.values), tuple(self.ops), self.ref[self.x],
                          self.ref[self.out], repeat_io)


def region_graph(region: Region, name: str, input_name="x", repeat_io=False) -> LayerGraph:
    region.convert(input_name)
    return region.graph(name, repeat_io)


def embedding_graph(region: Region, name: str) -> LayerGraph:
    """The embedding region as one `embedding` op: idx[b, s] -> x[b, s, h], weights the
    token table first (the parameter looked up by the input ids), then every other parameter
    used (positions, ...). Its FLOPs are those of the pointwise ops in the region."""
    idx = region.ref[region.x] = "idx"
    region.values[idx] = Value(idx, (region.b0, region.s0), tensor_val(region.x).dtype.itemsize)
    weights, flops = [], 0.0
    for n in region.nodes:
        if packet(n) is aten.embedding:
            weights += [w for w in region.weights_of(n.args[0]) if w not in weights]
    if not weights:
        raise UnsupportedOp("no token embedding (aten.embedding of the input ids) before the "
                            "repeated blocks")
    for n in region.nodes:
        for p in n.all_input_nodes:
            weights += [w for w in region.weights_of(p) if w not in weights]
        if region.groupable(n):
            flops += region.pointwise_flops(n)
    out = region.new_value("x", region.out)
    region.add_op(out, "embedding", [idx], weights, flops)
    region.ref[region.out] = out
    return region.graph(name, repeat_io=False)
