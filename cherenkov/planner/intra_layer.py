"""Intra-layer sharding by integer programming over candidate placements (Alpa / XLA style).

For one `LayerGraph` and one mesh axis of `t` devices, choose one `Strategy` per op so that
compute + communication + redistribution time is least, subject to a per-device memory
budget. Binary `s[v,i]` picks strategy i of op v; continuous `e[uv,ij]` (one per edge and
strategy pair, pinned by `sum_j e = s[u,i]`, `sum_i e = s[v,j]`) carries the redistribution
cost between them. Solved with `scipy.optimize.milp` (HiGHS). A transformer layer is solved
once and repeated, its output placement tied to its input's.

Costs of one microbatch on one device:
  node  = fwd kernel + bwd kernel (2x FLOPs for matmul, 2.5x for attention; 2x bytes except
          cross-entropy, 1x), attention at the flash-attention rate (`planner.costs`)
          + the strategy's own collectives (those once per step divided by `microbatches`)
          + the outer data-parallel gradient sync of the weights it keeps (per microbatch)
  edge  = redistribute(producer out -> consumer in) forward
          + redistribute(consumer's d(in) -> producer out) backward
  memory = weights' training state (bytes/param given by ZeRO) + saved activations x in-flight
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_matrix

from cherenkov.ir.placement import Partial, Placement, Replicate, Shard
from cherenkov.parallel.layer_graph import LayerGraph, LayerOp
from cherenkov.parallel.redistribute import Collective, redistribute
from cherenkov.parallel.rules import Strategy, strategies

BWD_FLOPS = {"matmul": 2.0, "attention": 2.5}
# Backward HBM bytes as a multiple of the forward's (2x by default: read the saved input and
# dy, write dx, plus the weight-gradient partials). Cross-entropy's forward reads the logits
# twice (max, then sum of exp: see layer_graph.head_graph); its backward reads them once and
# writes dlogits once: the same 2 x logits bytes.
BWD_BYTES = {"cross_entropy": 1.0}
INPUT = "<in>"


@dataclass(frozen=True)
class SolveOptions:
    microbatches: int = 1              # gradient-sync collectives are amortised over these
    state_bytes_per_param: float = 16  # weights+grads+Adam per parameter on a device (see memory.py)
    inflight: float = 1.0              # microbatches whose activations are alive at once
    recompute: str = "none"            # none | selective | full
    memory_budget: float | None = None  # bytes per device this graph may use, None = unlimited
    fixed_io: Placement | None = None  # force the input (and, for layers, output) placement
    # Seconds per byte of this device's weights to synchronise gradients over the outer
    # data-parallel group once per step: weights kept whole on this axis cost more there.
    outer_sync_s_per_byte: float = 0.0
    fixed_output: Placement | None = None  # force the graph output's placement
    # > 0: a memory budget of `lean` times the least memory any choice could use (1.25: the
    # memory-lean sharding; 1.0: the leanest, the last resort before a layout is rejected)
    lean: float = 0.0
    # ((weight name, placement), ...): weights pinned by cherenkov.shard annotations
    weight_placements: tuple = ()


@dataclass
class LayerSolution:
    graph: LayerGraph
    axis: object                       # MeshAxis
    chosen: dict[str, Strategy]
    input_placement: Placement
    objective_s: float
    # Program pieces in execution order: ("compute", op, seconds) or ("comm", Collective, op).
    forward: list = field(default_factory=list)
    backward: list = field(default_factory=list)
    step_comm: list = field(default_factory=list)   # once per step (weight-gradient sync)
    params_per_device: float = 0.0
    saved_bytes: dict = field(default_factory=dict)  # recompute mode -> bytes per microbatch
    recompute_seconds: dict = field(default_factory=dict)  # extra forward time in backward

    @property
    def output_placement(self) -> Placement:
        return self.chosen[self.graph.producer(self.graph.output).name].output

    def seconds(self, phase: str, what: str) -> float:
        items = self.forward if phase == "fwd" else self.backward
        if what == "compute":
            return sum(it[2] for it in items if it[0] == "compute")
        return sum(it[1].seconds for it in items if it[0] == "comm")

    def placements(self) -> list[tuple[str, str]]:
        """(op, 'strategy: in -> out') in op order, placements printed short."""
        return [(op.name, f"{self.chosen[op.name].name}: "
                 f"{','.join(map(str, self.chosen[op.name].inputs))} -> {self.chosen[op.name].output}")
                for op in self.graph.ops]


def _frac(p: Placement, t: int) -> float:
    return 1.0 / t if isinstance(p, Shard) else 1.0


def _node_cost(op: LayerOp, s: Strategy, graph, axis, costs, opts) -> tuple[float, float, float]:
    tc = op.kind in ("matmul", "attention")
    if op.flops == 0 and op.bytes == 0:   # a view (a captured model's slice): no kernel runs
        fwd = bwd = 0.0
    else:
        fwd = costs.kernel(op.flops * s.fraction, op.bytes * s.fraction, tc, op.kind)
        bwd = costs.kernel(op.flops * s.fraction * BWD_FLOPS.get(op.kind, 2.0),
                           op.bytes * s.fraction * BWD_BYTES.get(op.kind, 2.0), tc, op.kind)
    comm = opts.outer_sync_s_per_byte * _weights_params(op, s, graph) * 2.0 / opts.microbatches
    for kind, nbytes, phase in s.comm:
        c = costs.collective(kind, nbytes, axis.size, axis.spans_nodes, axis.per_node)
        comm += c / opts.microbatches if phase == "step" else c
    return fwd, bwd, comm


def _saved(op: LayerOp, s: Strategy, graph: LayerGraph, t: int, recompute: str) -> float:
    if recompute == "full":
        return 0.0
    total = 0.0
    for k, name in enumerate(op.inputs):
        if name not in op.saved:
            continue
        producer = graph.producer(name)
        if recompute == "selective" and producer is not None and producer.cheap:
            continue
        total += graph.values[name].nbytes * _frac(s.inputs[k], t)
    return total


def _weights_params(op: LayerOp, s: Strategy, graph: LayerGraph) -> float:
    return sum(graph.values[w].numel * f for w, f in zip(op.weights, s.weight_fraction)
               if graph.values[w].weight)


def _input_candidates(graph: LayerGraph, t: int) -> list[Placement]:
    shape = graph.values[graph.input].shape
    cands = [Replicate()] + [Shard(d) for d in range(len(shape)) if t > 1 and shape[d] % t == 0]
    return cands


def solve_layer(graph: LayerGraph, axis, costs, opts: SolveOptions = SolveOptions()) -> LayerSolution:
    t = axis.size
    ops = list(graph.ops)
    strat = {op.name: _pinned(op, strategies(op, graph, t), dict(opts.weight_placements), t)
             for op in ops}
    in_cands = _input_candidates(graph, t)
    if opts.fixed_io is not None:
        in_cands = [p for p in in_cands if p == opts.fixed_io] or [Replicate()]
    # Variables: op strategies, input placements, then edge pairs.
    index: dict[tuple[str, int], int] = {}
    for op in ops:
        for i in range(len(strat[op.name])):
            index[(op.name, i)] = len(index)
    for i in range(len(in_cands)):
        index[(INPUT, i)] = len(index)
    n_node = len(index)
    out_place = {op.name: [s.output for s in strat[op.name]] for op in ops}
    out_place[INPUT] = in_cands
    cost = np.zeros(n_node)
    mem = np.zeros(n_node)
    for op in ops:
        for i, s in enumerate(strat[op.name]):
            fwd, bwd, comm = _node_cost(op, s, graph, axis, costs, opts)
            cost[index[(op.name, i)]] = fwd + bwd + comm
            mem[index[(op.name, i)]] = (_weights_params(op, s, graph) * opts.state_bytes_per_param
                                        + opts.inflight * _saved(op, s, graph, t, opts.recompute))
    edges = []  # (producer key, consumer op, input k, value)
    for op in ops:
        for k, name in enumerate(op.inputs):
            prod = graph.producer(name)
            edges.append((prod.name if prod else INPUT, op, k, name))
    edge_vars = []
    for (u, v, k, name) in edges:
        nbytes = graph.values[name].nbytes
        for i, src in enumerate(out_place[u]):
            for j, s in enumerate(strat[v.name]):
                fwd = redistribute(src, s.inputs[k], nbytes, axis, costs)
                bwd = redistribute(s.grads[k], src, nbytes, axis, costs)
                c = (fwd.seconds if fwd else 0.0) + (bwd.seconds if bwd else 0.0)
                edge_vars.append((u, i, v.name, j, c))
    n = n_node + len(edge_vars)
    c_vec = np.concatenate([cost, [ev[4] for ev in edge_vars]])
    rows, cols, vals, lo, hi = [], [], [], [], []

    def add_row(coeffs: dict, lb, ub):
        r = len(lo)
        for col, val in coeffs.items():
            rows.append(r); cols.append(col); vals.append(val)
        lo.append(lb); hi.append(ub)

    for op in ops:  # exactly one strategy per op, one placement for the input
        add_row({index[(op.name, i)]: 1.0 for i in range(len(strat[op.name]))}, 1, 1)
    add_row({index[(INPUT, i)]: 1.0 for i in range(len(in_cands))}, 1, 1)
    base = n_node
    for (u, v, k, name) in edges:
        nu, nv = len(out_place[u]), len(strat[v.name])
        for i in range(nu):   # sum_j e_ij = s_u,i
            coeffs = {base + i * nv + j: 1.0 for j in range(nv)}
            coeffs[index[(u, i)]] = -1.0
            add_row(coeffs, 0, 0)
        for j in range(nv):   # sum_i e_ij = s_v,j
            coeffs = {base + i * nv + j: 1.0 for i in range(nu)}
            coeffs[index[(v.name, j)]] = -1.0
            add_row(coeffs, 0, 0)
        base += nu * nv
    if graph.repeat_io:  # the layer's output placement is the next layer's input placement
        last = graph.producer(graph.output).name
        for p_i, p in enumerate(in_cands):
            coeffs = {index[(INPUT, p_i)]: 1.0}
            for i, st in enumerate(strat[last]):
                if st.output == p:
                    coeffs[index[(last, i)]] = -1.0
            add_row(coeffs, 0, 0)
    if opts.fixed_output is not None:
        last = graph.producer(graph.output).name
        add_row({index[(last, i)]: 1.0 for i, st in enumerate(strat[last])
                 if st.output == opts.fixed_output}, 1, 1)
    budget = opts.memory_budget
    if opts.lean:
        least = sum(min(mem[index[(op.name, i)]] for i in range(len(strat[op.name]))) for op in ops)
        budget = opts.lean * least if budget is None else min(budget, opts.lean * least)
    if budget is not None:
        add_row({col: mem[col] for col in range(n_node) if mem[col]}, -np.inf, budget)
    A = coo_matrix((vals, (rows, cols)), shape=(len(lo), n)).tocsr()
    integrality = np.concatenate([np.ones(n_node), np.zeros(len(edge_vars))])
    res = milp(c_vec, constraints=LinearConstraint(A, lo, hi), integrality=integrality,
               bounds=(0, 1), options={"disp": False})
    if res.x is None:
        raise InfeasibleLayer(graph, axis, opts)
    x = res.x
    chosen = {op.name: strat[op.name][int(np.argmax([x[index[(op.name, i)]]
                                                     for i in range(len(strat[op.name]))]))]
              for op in ops}
    in_place = in_cands[int(np.argmax([x[index[(INPUT, i)]] for i in range(len(in_cands))]))]
    return _assemble(graph, axis, costs, opts, chosen, in_place, float(res.fun))


class AnnotationError(ValueError):
    """A `cherenkov.shard` annotation no strategy of its op can honour."""


def _pinned(op: LayerOp, options: list[Strategy], pins: dict, t: int) -> list[Strategy]:
    """The strategies of `op` that place every annotated weight as annotated."""
    if not pins or not any(w in pins for w in op.weights):
        return options
    keep = [s for s in options
            if all(pins.get(w, s.weights[i]) == s.weights[i] for i, w in enumerate(op.weights))]
    if not keep:
        wanted = ", ".join(f"{w} {pins[w]}" for w in op.weights if w in pins)
        offered = sorted({", ".join(map(str, s.weights)) for s in options})
        raise AnnotationError(f"cherenkov.shard: {op.name} ({op.kind}) cannot place {wanted} "
                              f"on a tensor-parallel axis of {t} (its strategies place "
                              f"its weights as: {'; '.join(offered)})")
    return keep


class InfeasibleLayer(Exception):
    def __init__(self, graph, axis, opts):
        self.graph, self.axis, self.opts = graph, axis, opts
        budget = "the lean budget" if opts.memory_budget is None else \
            f"{opts.memory_budget / 2**30:.2f} GiB per device"
        super().__init__(f"{graph.name}: no sharding over {axis.name}={axis.size} meets the "
                         f"constraints ({budget})")


def _assemble(graph, axis, costs, opts, chosen, in_place, objective) -> LayerSolution:
    """Walk the chosen strategies into forward and backward item lists and memory figures."""
    t = axis.size
    sol = LayerSolution(graph, axis, chosen, in_place, objective)
    placement_of = {graph.input: in_place}
    for op in graph.ops:
        placement_of[op.output] = chosen[op.name].output
    for op in graph.ops:
        s = chosen[op.name]
        for k, name in enumerate(op.inputs):
            coll = redistribute(placement_of[name], s.inputs[k], graph.values[name].nbytes, axis, costs)
            if coll:
                sol.forward.append(("comm", coll, op.name))
        for kind, nbytes, phase in s.comm:
            if phase == "fwd":
                sol.forward.append(("comm", _coll(kind, nbytes, axis, costs), op.name))
        fwd, bwd, _ = _node_cost(op, s, graph, axis, costs, opts)
        sol.forward.append(("compute", op.name, fwd))
    for op in reversed(graph.ops):
        s = chosen[op.name]
        fwd, bwd, _ = _node_cost(op, s, graph, axis, costs, opts)
        for kind, nbytes, phase in s.comm:
            if phase == "bwd":
                sol.backward.append(("comm", _coll(kind, nbytes, axis, costs), op.name))
            elif phase == "step":
                sol.step_comm.append(_coll(kind, nbytes, axis, costs))
        sol.backward.append(("compute", op.name, bwd))
        for k, name in enumerate(op.inputs):
            coll = redistribute(s.grads[k], placement_of[name], graph.values[name].nbytes, axis, costs)
            if coll:
                sol.backward.append(("comm", coll, op.name))
    sol.params_per_device = sum(_weights_params(op, chosen[op.name], graph) for op in graph.ops)
    for mode in ("none", "selective", "full"):
        sol.saved_bytes[mode] = sum(_saved(op, chosen[op.name], graph, t, mode) for op in graph.ops)
    sol.saved_bytes["full"] = graph.values[graph.input].nbytes * _frac(in_place, t)
    cheap = {op.name for op in graph.ops if op.cheap}
    recompute_cheap = sum(it[2] for it in sol.forward if it[0] == "compute" and it[1] in cheap)
    sol.recompute_seconds = {"none": 0.0, "selective": recompute_cheap,
                             "full": sol.seconds("fwd", "compute") + sol.seconds("fwd", "comm")}
    return sol


def _coll(kind, nbytes, axis, costs) -> Collective:
    return Collective(kind, nbytes, axis.name, costs.collective(kind, nbytes, axis.size, axis.spans_nodes, axis.per_node))
