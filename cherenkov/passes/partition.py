"""Recompute or save: Cherenkov's cost-aware partitioner of the joint forward/backward graph.

AOTAutograd traces forward and backward as one joint FX graph and asks a `partition_fn` to
split it. Each forward value the backward needs is either *saved* (written by the forward,
kept alive, read by the backward) or *recomputed* in the backward from values that are. We
choose by a minimum s-t cut priced by the cost model for the device we plan for:

    save v       2 * bytes(v) / bandwidth        written by the forward, read by the backward;
                 for a value in memory anyway (see below) the read only, and not that when
                 only recomputations read it (they price it)  (+ lambda * bytes(v) under a
                 memory budget)
    recompute v  v's FLOPs, and reading its inputs that are in memory anyway, launch
                 excluded (recomputed ops fuse into the backward's kernels; an input computed
                 in registers is priced where it is computed), + 2 * bytes(v) / bandwidth
                 when a backward op that cannot compute v in its own kernel reads it (a
                 matmul, a gather, a pooling backward reading its indices): written and read
                 there, every input read
                 infinite for matmuls, convolutions, attention, RNG, mutations, non-aten ops

What is in memory anyway, and which backward readers can compute a value in their own kernel,
passes/in_memory.py decides (the residual stream, read again after the block's matmuls, is).
So a LayerNorm saves its input x (in memory anyway, read once by the recomputation) and
mean / rstd, and recomputes (x - mean) * rstd in the backward, rather than also writing the
normalized x: on GPT-2 that is 50 MB less written per LayerNorm. Reading inputs twice -- a
value saved and also read by the recomputation of another -- is not seen by the cut; pricing
in-memory inputs at every recomputation that reads them keeps it from rebuilding the residual
stream from its terms.

Under `memory_budget` (GB if > 1, else a fraction of the device's memory) the saved bytes of
forward-created values are held under the budget by raising lambda (doubling, then bisection)
until the plan fits or nothing more can be recomputed.

Torch's helpers do the mechanics (node classification, extracting valid fw/bw modules); the
report of what was saved and why is `LAST_REPORT` and `fw_module.meta["cherenkov_partition"]`.
"""
from __future__ import annotations

import inspect
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from scipy.sparse.csgraph import breadth_first_order, maximum_flow
from torch._functorch import config as functorch_config
from torch._functorch import partitioners as tp

from cherenkov.cost.roofline import roofline
from cherenkov.hw.spec import DeviceSpec
from cherenkov.passes.in_memory import LIBRARY_OPS, packet, read_in_backward, written_anyway
from cherenkov.passes.joint_cse import eliminate_joint_duplicates

aten = torch.ops.aten

# FLOPs per element counted for pointwise ops that are more than one instruction; others 1.
FLOPS_PER_ELEMENT = {
    aten.exp: 4, aten.log: 4, aten.tanh: 6, aten.sigmoid: 6, aten.erf: 8, aten.gelu: 10,
    aten.pow: 4, aten.sin: 4, aten.cos: 4, aten.rsqrt: 2, aten.sqrt: 2, aten.div: 2,
    aten.silu: 6,
}

LAST_REPORT: "PartitionReport | None" = None

_INF = 2 ** 30            # "infinite" capacity; int32 is what scipy's max-flow takes
_FINITE_TOTAL = 2 ** 28   # all finite capacities together are scaled to at most this


@dataclass(frozen=True, slots=True)
class Decision:
    """One forward value the backward needs, and what we did with it."""
    name: str
    op: str
    nbytes: int
    action: str          # "save" | "recompute"
    why: str
    save_s: float
    recompute_s: float   # math.inf when it cannot be recomputed
    in_memory: bool = False   # the forward writes it whether or not it is saved


@dataclass
class PartitionReport:
    """The plan of one joint graph: every saved or recomputed value with its reason."""
    device: str
    budget_bytes: float | None = None
    lagrange: float = 0.0               # seconds per byte added to saving under the budget
    fits_budget: bool = True
    decisions: list[Decision] = field(default_factory=list)

    @property
    def saved(self) -> list[Decision]:
        return [d for d in self.decisions if d.action == "save"]

    @property
    def recomputed(self) -> list[Decision]:
        return [d for d in self.decisions if d.action == "recompute"]

    @property
    def saved_bytes(self) -> int:
        """Bytes of saved values the forward creates (graph inputs are alive anyway)."""
        return sum(d.nbytes for d in self.saved if d.op != "placeholder")

    def __str__(self) -> str:
        budget = "none" if self.budget_bytes is None else f"{self.budget_bytes / 1e6:.3f} MB"
        lines = [f"partition for {self.device}: {len(self.saved)} saved "
                 f"({self.saved_bytes / 1e6:.3f} MB of activations), "
                 f"{len(self.recomputed)} recomputed; budget {budget}"
                 + ("" if self.fits_budget else " (NOT met: nothing more can be recomputed)")]
        for d in self.decisions:
            rec = "inf" if math.isinf(d.recompute_s) else f"{d.recompute_s * 1e9:.3g}ns"
            lines.append(f"  {d.action:9s} {d.name:24s} {d.op:28s} {d.nbytes:>12d} B  "
                         f"save {d.save_s * 1e9:.3g}ns recompute {rec}  {d.why}"
                         + ("; in memory anyway" if d.in_memory else ""))
        return "\n".join(lines)


# -- torch helpers whose signatures moved between releases --------------------------------

def _call(fn, *args, **kwargs):
    """Call a torch helper with only the keyword arguments its signature accepts."""
    params = inspect.signature(fn).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


def _is_opaque(node: fx.Node) -> bool:
    try:
        from torch._functorch._aot_autograd.graph_compile import is_opaque_node
    except ImportError:
        return False
    return is_opaque_node(node)


# -- pricing -------------------------------------------------------------------------------

def _tensor(node: Any) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _nbytes(node: fx.Node) -> int:
    try:
        return int(tp._size_of(node))
    except Exception:  # noqa: BLE001 -- unsized values (script objects) cost nothing to save
        return 0


def _numel(t: torch.Tensor) -> int:
    try:
        return int(t.numel())
    except Exception:  # noqa: BLE001 -- unbacked symbolic sizes: a guess, like torch's
        return 4096


def cannot_recompute(node: fx.Node) -> str | None:
    """Why `node` may never be recomputed in the backward, or None if it may."""
    if node.op == "placeholder":
        return "graph input"
    if node.op != "call_function":
        return f"{node.op} node"
    if node.meta.get("recompute") == tp.CheckpointPolicy.MUST_SAVE:
        return "marked must-save"
    if node.target is operator.getitem:
        return None
    if not isinstance(node.target, torch._ops.OpOverload):
        return "not an aten op"
    if packet(node) in LIBRARY_OPS:     # never recomputed: what the forward spends its time on
        return "matmul/convolution/attention"
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        return "random"
    if node.target._schema.is_mutable:
        return "mutates its input"
    if node.target.namespace not in ("aten", "prims"):
        return "not an aten op"
    if getattr(tp, "_must_be_in_forward", lambda n: False)(node):
        return "must be in forward"
    return None


def recompute_time(node: fx.Node, device: DeviceSpec, read_bytes: int = 0,
                   materialize_bytes: int = 0) -> float:
    """Time to recompute `node` in the backward (no launch: it fuses into a backward kernel):
    its FLOPs, reading `read_bytes` of inputs from memory, and writing `materialize_bytes` of
    its results that a backward op which cannot compute them reads (and that op's read)."""
    if node.target is operator.getitem or isinstance(node.target, torch._ops.OpOverload) \
            and node.target.is_view:
        return 0.0   # views are metadata; a getitem is priced at the node it selects from
    val = node.meta.get("val")
    outs = [t for t in (val if isinstance(val, (list, tuple)) else [val])
            if isinstance(t, torch.Tensor)]
    if not outs:
        return 0.0
    out = outs[0]
    inputs = [t for a in node.all_input_nodes if (t := _tensor(a)) is not None]
    numel = max([_numel(t) for t in outs] + [_numel(t) for t in inputs])
    flops = FLOPS_PER_ELEMENT.get(packet(node), 1) * numel
    moved = read_bytes + 2 * materialize_bytes
    dtype = out.dtype if out.dtype.is_floating_point else torch.float32
    try:
        r = roofline(device, flops, moved, dtype, tensor_core=False)
    except ValueError:   # no vector rate listed for this dtype
        r = roofline(device, flops, moved, torch.float32, tensor_core=False)
    return max(r.compute_s, r.memory_s)


# a saved value written anyway and read only by recomputations (which price that read) still
# costs a little: of two such plans the one holding fewer bytes wins
_HOLD_PASSES = 1 / 64


def save_time(node: fx.Node, device: DeviceSpec, written: bool = False,
              read: bool = True) -> float:
    """Time the memory system spends on a saved value: written by the forward and read by the
    backward, or, `written` anyway (graph inputs always are), just the read when `read` (a
    backward op reads it itself: a recomputation reading it prices that read)."""
    written = written or node.op == "placeholder"
    passes = (1 if read else _HOLD_PASSES) if written else 2
    return passes * _nbytes(node) / device.achievable_bandwidth


def _materialized_bytes(node: fx.Node, backward: set[fx.Node]) -> int:
    """Bytes of `node`'s results (its getitems' for a tuple) that a backward op which cannot
    compute them in its own kernel reads: recomputed, they are written in the backward."""
    if isinstance(node.meta.get("val"), (list, tuple)):
        return sum(_nbytes(g) for g in node.users if g.target is operator.getitem
                   and read_in_backward(g, backward, unfused_only=True))
    return _nbytes(node) if read_in_backward(node, backward, unfused_only=True) else 0


def _recompute_reads(node: fx.Node, written: set[fx.Node], materialized: bool) -> int:
    """Input bytes a recomputation of `node` reads: those in memory anyway -- or, when it is
    materialized in a kernel of its own, every input."""
    return sum(_nbytes(a) for a in node.all_input_nodes
               if (materialized or a in written) and _tensor(a) is not None)


# -- the cut ---------------------------------------------------------------------------------

@dataclass
class _Problem:
    """The priced flow graph, independent of lambda."""
    nodes: list[fx.Node]
    index: dict[fx.Node, int]
    save_s: dict[fx.Node, float]          # math.inf: cannot be saved
    recompute_s: dict[fx.Node, float]     # math.inf: cannot be recomputed
    budgeted: set[fx.Node]                # values whose bytes count against the budget
    edges_inf: list[tuple[int, int]]      # (u, v) of infinite edges, by vertex id
    required_fw: set[fx.Node]
    in_memory: set[fx.Node]               # forward values written whether or not saved


def _vin(i: int) -> int:
    return 2 + 2 * i


def _vout(i: int) -> int:
    return 3 + 2 * i


def _build(graph: fx.Graph, info, device: DeviceSpec, num_fwd_outputs: int = 0) -> _Problem:
    nodes = [n for n in graph.nodes if n.op != "output"]
    index = {n: i for i, n in enumerate(nodes)}
    save_s, recompute_s, edges, budgeted = {}, {}, [], set()
    source, sink = 0, 1
    out = next(n for n in graph.nodes if n.op == "output").args[0]
    fw_outputs = {a for a in pytree.tree_leaves(list(out[:num_fwd_outputs]))
                  if isinstance(a, fx.Node)}
    forward = {n for n in nodes if info.is_required_fw(n)}
    written = written_anyway(nodes, forward, fw_outputs)
    backward = set(nodes) - forward
    for n in nodes:
        i = index[n]
        if n in info.required_bw_nodes:
            if n in info.tangents_closure:
                edges.append((_vin(i), sink))
                continue
            edges.append((_vout(i), sink))
        if info.is_required_fw(n) or n.op == "placeholder":
            reason = cannot_recompute(n)
            mat = 0 if reason else _materialized_bytes(n, backward)
            recompute_s[n] = math.inf if reason else recompute_time(
                n, device, _recompute_reads(n, written, mat > 0), mat)
        else:
            recompute_s[n] = 0.0   # backward-only work: computed in backward anyway
        val = n.meta.get("val")
        if tp.is_sym_node(n):
            save_s[n] = 8 / device.achievable_bandwidth
        elif isinstance(val, torch.Tensor):
            save_s[n] = save_time(n, device, n in written, read_in_backward(n, backward))
            if n.op != "placeholder":
                budgeted.add(n)
        elif _is_opaque(n) or type(val).__name__ in ("BackwardState", "FakeScriptObject"):
            save_s[n] = 0.0
        else:
            save_s[n] = math.inf   # tuples: save their getitems instead
        for user in n.users:
            if user.op != "output":
                edges.append((_vout(i), _vin(index[user])))
    return _Problem(nodes, index, save_s, recompute_s, budgeted, edges, forward, written)


def _solve(p: _Problem, lagrange: float) -> tuple[list[fx.Node], set[fx.Node]]:
    """Min cut at this lambda: (saved nodes in graph order, recomputed nodes)."""
    finite: list[tuple[int, int, float]] = []
    infinite = list(p.edges_inf)
    for n, i in p.index.items():
        s = p.save_s.get(n)
        if s is not None:
            s = s + lagrange * _nbytes(n) if n in p.budgeted else s
            (infinite.append((_vin(i), _vout(i))) if math.isinf(s)
             else finite.append((_vin(i), _vout(i), s)))
        r = p.recompute_s.get(n, 0.0)
        if math.isinf(r):
            infinite.append((0, _vin(i)))
        elif r > 0:
            finite.append((0, _vin(i), r))
    total = sum(c for *_, c in finite) or 1.0
    scale = _FINITE_TOTAL / total
    caps: dict[tuple[int, int], int] = {}
    for u, v, c in finite:
        caps[(u, v)] = min(_INF, caps.get((u, v), 0) + max(1, round(c * scale)))
    for u, v in infinite:
        caps[(u, v)] = _INF
    size = 2 + 2 * len(p.nodes)
    rows, cols = zip(*caps) if caps else ((), ())
    data = np.fromiter(caps.values(), dtype=np.int32, count=len(caps))
    graph = sp.csr_array((data, (np.array(rows, dtype=np.int32), np.array(cols, dtype=np.int32))),
                         shape=(size, size))
    result = maximum_flow(graph, 0, 1)
    if result.flow_value >= _INF:
        raise RuntimeError("cherenkov partition: a value the backward needs can be neither "
                           "saved nor recomputed")
    residual = (graph - result.flow).tocsr()
    residual.data = np.where(residual.data > 0, 1, 0).astype(np.int32)
    residual.eliminate_zeros()
    reach = set(breadth_first_order(residual, 0, directed=True, return_predecessors=False).tolist())
    saved = [n for n, i in p.index.items() if _vin(i) in reach and _vout(i) not in reach]
    recomputed = {n for n in p.required_fw if _vin(p.index[n]) not in reach}
    return saved, recomputed


def budget_bytes(memory_budget: float | None, device: DeviceSpec) -> float | None:
    """`memory_budget` in bytes: GB when > 1, else a fraction of the device's memory."""
    if memory_budget is None:
        return None
    if memory_budget < 0:
        raise ValueError(f"memory_budget={memory_budget}: must be non-negative")
    return memory_budget * 1e9 if memory_budget > 1 else memory_budget * device.memory_bytes


def choose_saved(p: _Problem, budget: float | None):
    """(saved, recomputed, lambda, fits): the cheapest plan whose activations fit `budget`."""
    def over(saved):
        return sum(_nbytes(n) for n in saved if n in p.budgeted)

    saved, recomputed = _solve(p, 0.0)
    if budget is None or over(saved) <= budget:
        return saved, recomputed, 0.0, True
    hi, fits = 1e-15, False
    for _ in range(80):     # doubling until it fits or lambda dominates every time cost
        hi *= 4
        s_hi, r_hi = _solve(p, hi)
        if over(s_hi) <= budget:
            fits = True
            break
    if not fits:
        return s_hi, r_hi, hi, False
    lo = hi / 4 if hi > 4e-15 else 0.0
    for _ in range(30):
        mid = (lo + hi) / 2
        s_mid, r_mid = _solve(p, mid)
        if over(s_mid) <= budget:
            hi, s_hi, r_hi = mid, s_mid, r_mid
        else:
            lo = mid
    return s_hi, r_hi, hi, True


def _report(p: _Problem, device: DeviceSpec, saved, recomputed, base_recomputed, budget, lam,
            fits) -> PartitionReport:
    report = PartitionReport(device.name, budget, lam, fits)
    for n in p.nodes:
        if n not in saved and n not in recomputed:
            continue
        rec = p.recompute_s.get(n, 0.0)
        if n in saved:
            why = (f"cannot recompute: {cannot_recompute(n)}" if math.isinf(rec)
                   else "cheaper to save")
        else:
            why = ("cheaper to recompute" if n in base_recomputed
                   else "recomputed to fit the budget")
        op = n.op if n.op != "call_function" else str(n.target)
        report.decisions.append(Decision(n.name, op, _nbytes(n), "save" if n in saved
                                         else "recompute", why, p.save_s.get(n, 0.0), rec,
                                         n in p.in_memory))
    return report


def cherenkov_partition(joint_module: fx.GraphModule, joint_inputs: Any, *args,
                        num_fwd_outputs: int, static_lifetime_input_indices=None,
                        device_spec: DeviceSpec | None = None,
                        memory_budget: float | None = None, **kwargs):
    """AOTAutograd `partition_fn`: (forward module, backward module) for `joint_module`."""
    global LAST_REPORT
    if tp.has_recomputable_ops(joint_module):
        # torch.utils.checkpoint regions: the user decided; torch's partitioner honours them
        return tp.min_cut_rematerialization_partition(
            joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices)
    if device_spec is None:
        from cherenkov.hw import current_device
        device_spec = current_device()
    joint_module.graph.eliminate_dead_code()
    joint_module.recompile()
    if functorch_config.cse:           # torch's fx_graph_cse, in place (passes/joint_cse.py)
        eliminate_joint_duplicates(joint_module.graph)
        joint_module.recompile()
    for force in ("force_save_collectives", "force_save_effectful_ops",
                  "force_save_bw_mutation_src"):
        if force == "force_save_collectives" and getattr(
                functorch_config, "unsafe_allow_optimization_of_collectives", False):
            continue
        if hasattr(tp, force):
            getattr(tp, force)(joint_module)
    static = static_lifetime_input_indices or []
    info = tp.classify_nodes(joint_module, static, num_fwd_outputs)
    if len(info.required_bw_nodes) == 0:
        return _call(tp.default_partition, joint_module, joint_inputs,
                     num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static,
                     static_lifetime_input_nodes=info.static_lifetime_input_nodes)

    problem = _build(joint_module.graph, info, device_spec, num_fwd_outputs)
    budget = budget_bytes(memory_budget, device_spec)
    _, base_recomputed = _solve(problem, 0.0)
    saved, recomputed, lam, fits = choose_saved(problem, budget)
    LAST_REPORT = _report(problem, device_spec, saved, recomputed, base_recomputed, budget, lam,
                          fits)

    saved_sym = [n for n in saved if tp.is_sym_node(n)]
    saved_opaque = [n for n in saved if _is_opaque(n)]
    saved_values = [n for n in saved if not tp.is_sym_node(n) and not _is_opaque(n)]
    fw_module, bw_module = _call(
        tp._extract_fwd_bwd_modules, joint_module, saved_values, saved_sym_nodes=saved_sym,
        saved_opaque_nodes=saved_opaque, num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_nodes=info.static_lifetime_input_nodes)
    bw_module = tp.reordering_to_mimic_autograd_engine(bw_module)
    fw_module = tp.raise_getitems(fw_module)
    bw_module = tp.raise_getitems(bw_module)
    if hasattr(tp, "thread_graphsafe_rng_from_hops"):
        fw_module = tp.thread_graphsafe_rng_from_hops(fw_module, is_backward=False)
        bw_module = tp.thread_graphsafe_rng_from_hops(bw_module, is_backward=True)
    fw_module.meta["cherenkov_partition"] = LAST_REPORT
    bw_module.meta["cherenkov_partition"] = LAST_REPORT
    return fw_module, bw_module
