"""Whether a compiled plan replays through a CUDA graph: by default, measured per plan.

A CUDA graph removes the host's per-launch cost and nothing else, and it costs memory: the
plan's buffers stay reserved in the graph's private pool between calls. So under
`cuda_graphs="auto"` (the default) a plan is graphed when

* it can be (CUDA tensors only -- a plan is specialized to its shapes, so shapes are static --
  no collectives, no op that synchronizes with the host or sizes its output from data),
* its working set (peak bytes of the buffers it allocates, by lifetime) is at most
  `POOL_FRACTION` of device memory (a training step's activations and gradients are not: their
  memory is shared between forward and backward without graphs),
* all auto-graphed plans' pools together stay within `TOTAL_FRACTION` of device memory
  (`PoolBudget`), and
* it is launch-bound, measured: its last warm-up call (the third; the second checks each
  kernel's direct launch and measures nothing) runs from an idle GPU and the host's
  time issuing the launches is at least `HOST_FRACTION` of the GPU's time running them, or
  short of it by at most a launch's latency (`LATENCY_SLACK_S`; `judge`). Measured, because
  the host's cost per step is this runtime's Python on this host's CPU, which no preset
  knows; the roofline estimate (`estimate`: steps x the device's launch overhead vs the
  kernels' and library calls' predicted time) is logged beside it.

A training graph's forward and backward share one pool (cuda_graphs.PoolGroup); a backward
follows a graphed forward (`judge_pair`). Both share the working-set limits above: graphing
GPT-2's and Llama's steps (c9a07cd, where a pair was graphed past them) held 1.6x and 1.5x
torch.compile's peak memory -- the capturing step holds the plain run's outputs beside the
graph's, and the warm-up runs' blocks stay cached outside the pool -- for no faster step
(`2026-11-30_train_h200_c9a07cd.md`).

`"on"` graphs every plan that can be graphed; `"off"` none. Capture failures still fall back
to running without the graph (cuda_graphs.py). Decisions are logged, kept on the compile info
and shown in dumps.

    plan = estimate(compiled, spec)          # host_s, device_s, pool_bytes, blockers
    decision = decide(plan, "auto", spec, on_cuda=True)   # measure=True: judge() decides later
"""
from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field

from cherenkov.cost.roofline import roofline
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.ir.graph import TensorMeta, meta_nbytes
from cherenkov.runtime.memory_plan import live_bytes

HOST_FRACTION = 0.75       # graph when host issue time >= this fraction of the GPU's time
                           # (H200: plans graphed with a gain measured 0.86-0.92; GPT-2's
                           # backward at 0.55 was graphed at 0.5, for 1.3 GB more peak memory
                           # and no faster step: `2026-11-30_train_gpt2_h200_2cfa4ab.md`),
LATENCY_SLACK_S = 40e-6    # or when the GPU's time exceeds the host's by no more than one
                           # launch's latency and a short last kernel (a 2-kernel plan on the
                           # H200: host 77 us, GPU 104 us from idle -- 0.74 -- yet all launch)
POOL_FRACTION = 0.01       # the plan's working set is at most this share of device memory
TOTAL_FRACTION = 0.05      # and all auto-graphed plans' pools stay within this share
POOL_GRAIN = 2 << 20       # a pool reserves its allocator segments: 2 MiB at the least
VIEW_STEP_COST = 0.25      # a view / getitem step's host cost, in launches (Python only)

# extern ops that synchronize with the host or size their output from data: never captured,
# whatever the mode (a capture would fail, or bake in what one call saw)
_HOST_SYNC = frozenset({
    "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive",
    "unique_dim", "_local_scalar_dense", "item", "repeat_interleave", "bincount", "histc",
    "equal", "is_nonzero", "allclose", "_assert_scalar", "masked_scatter", "argwhere",
})


@dataclass
class PlanEstimate:
    host_s: float = 0.0            # host time of the plan's launches per call
    device_s: float = 0.0          # predicted GPU time per call (roofline, no launch overhead)
    pool_bytes: int = 0            # peak bytes of buffers the plan allocates
    launches: int = 0
    blockers: list = field(default_factory=list)     # reasons it must not be captured
    writes_inputs: int = 0         # inputs the plan updates (an optimizer step: all its state)


@dataclass(frozen=True)
class GraphDecision:
    use: bool
    reason: str
    measure: bool = False       # use: provisionally, until a warm-up call is timed and judged

    def __str__(self) -> str:
        state = "measuring" if self.measure else "on" if self.use else "off"
        return f"{state}: {self.reason}"


def _target_name(node) -> str:
    target = node.args[0] if node.args else None
    packet = getattr(target, "overloadpacket", target)
    return getattr(packet, "__name__", str(packet)).split(".")[-1]


def _matmul_flops(node) -> float:
    """2 x output elements x the contracted length (mm, bmm, addmm, baddbmm, linear, ...)."""
    out = node.meta[0] if isinstance(node.meta, tuple) else node.meta
    if not isinstance(out, TensorMeta):
        return 0.0
    mats = [i.meta for i in node.inputs if isinstance(i.meta, TensorMeta) and len(i.meta.shape) >= 2]
    if not mats:
        return 0.0
    name = _target_name(node)
    a = mats[1] if name.startswith(("addmm", "baddbmm", "addbmm")) and len(mats) > 2 else mats[0]
    return 2.0 * math.prod(out.shape) * a.shape[-1]


def _attention_flops(node) -> float:
    """4 x B x H x Sq x Skv x D (unmasked), x 2.5 for a backward."""
    metas = [i.meta for i in node.inputs if isinstance(i.meta, TensorMeta) and len(i.meta.shape) == 4]
    if len(metas) < 2:
        return 0.0
    q, k = metas[0], metas[1]
    flops = 4.0 * math.prod(q.shape) * k.shape[-2]
    return flops * (2.5 if "backward" in _target_name(node) else 1.0)


def _library_seconds(node, spec) -> float:
    moved = meta_nbytes(node.meta) + sum(meta_nbytes(i.meta) for i in node.inputs)
    dtype = next((i.meta.dtype for i in node.inputs if isinstance(i.meta, TensorMeta)), None)
    flops = (_matmul_flops(node) if node.op == Op.MATMUL
             else _attention_flops(node) if node.op == Op.ATTENTION else 0.0)
    if dtype is None or not dtype.is_floating_point:
        flops = 0.0
    try:
        line = roofline(spec, flops, moved, dtype, tensor_core=True) if flops else \
            roofline(spec, 0.0, moved)
    except ValueError:          # no rate for this dtype on this device: its bytes only
        line = roofline(spec, 0.0, moved)
    return max(line.compute_s, line.memory_s)


def estimate(compiled, spec) -> PlanEstimate:
    """Host time, predicted GPU time, working set and capture blockers of a compiled plan."""
    plan = PlanEstimate()
    host = [n for n in compiled.graph.inputs
            if isinstance(n.meta, TensorMeta) and n.meta.device != compiled.device]
    if host:                    # the plan runs its ops on them on the host: a replay would not
        plan.blockers.append(f"reads {len(host)} tensor(s) on another device")
    for step in compiled.steps:
        if step.kind in ("kernel", "library"):
            plan.launches += 1
            plan.host_s += spec.launch_overhead_s
        else:
            plan.host_s += VIEW_STEP_COST * spec.launch_overhead_s
        if step.kind == "kernel":
            kernel = getattr(step, "kernel", None)
            if kernel is not None:
                line = roofline(spec, kernel.flops(), kernel.bytes_moved())
                plan.device_s += max(line.compute_s, line.memory_s)
        elif step.kind == "library":
            node = getattr(step, "node", None)
            if node is not None:
                plan.device_s += _library_seconds(node, spec)
                if node.op in GroupOp.COLLECTIVE:
                    plan.blockers.append(f"collective {node.op.name.lower()}")
                elif node.op == Op.EXTERN and _target_name(node) in _HOST_SYNC:
                    plan.blockers.append(f"{_target_name(node)} synchronizes with the host")
                elif any(isinstance(m, TensorMeta) and m.device.type != compiled.device.type
                         for m in (node.meta if isinstance(node.meta, tuple) else (node.meta,))):
                    plan.blockers.append(f"{_target_name(node)} writes to another device")
    plan.pool_bytes = max(live_bytes(compiled, inputs=False), default=0)
    plan.writes_inputs = len({target for target, _ in compiled.graph.mutations})
    return plan


class PoolBudget:
    """Bytes the graph pools of auto-graphed plans may hold per device, all plans together
    (each pool keeps its memory for the plan's lifetime: a model broken into a hundred small
    graphs must not reserve a hundred pools' worth). A plan's share is taken when it is
    provisionally graphed and given back when it is judged not launch-bound or freed."""

    def __init__(self):
        self.reserved: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def share(plan: PlanEstimate) -> int:
        return -(-max(plan.pool_bytes, 1) // POOL_GRAIN) * POOL_GRAIN

    def fits(self, device, nbytes: int, spec) -> bool:
        return self.reserved.get(device, 0) + nbytes <= TOTAL_FRACTION * spec.memory_bytes

    def take(self, device, nbytes: int) -> None:
        with self._lock:
            self.reserved[device] = self.reserved.get(device, 0) + nbytes

    def give_back(self, device, nbytes: int) -> None:
        with self._lock:
            self.reserved[device] = max(0, self.reserved.get(device, 0) - nbytes)

    def held_by(self, owner, device, plan: PlanEstimate):
        """The share `decide` took for `plan`, given back when `owner` goes or when the
        returned callable is called (once, whichever comes first)."""
        return weakref.finalize(owner, self.give_back, device, self.share(plan))


POOLS = PoolBudget()
# Auto mode leaves plans that update more inputs than this (a compiled multi-tensor optimizer
# step) ungraphed. Its gradients are new tensors every step, which a graph copies in (GPT-2:
# 149 tensors, 650 MB a step), while its launches, issued as the GPU still runs the backward,
# cost nothing: in GPT-2's training step graphed 30.2 ms vs 29.7 on the H200
# (bench/results/2026-11-30_graphed_optimizer_h200_3e551d8.json; 51.6 in the train run at
# a6578e2, before 3e551d8 stopped each replay cloning and copying the optimizer's state onto
# itself -- the likely cause, not measured side by side). A running statistic or two stays
# graphed.
MAX_AUTO_WRITTEN_INPUTS = 8


def decide(plan: PlanEstimate, mode: str, spec, on_cuda: bool, device=None,
           pools: PoolBudget = POOLS) -> GraphDecision:
    """Graph the plan or not, under `mode` in {"auto", "on", "off"}, with the reason. An auto
    decision to measure takes the plan's pool share from `pools` (for `device`); the caller
    gives it back if the plan is judged GPU-bound or goes away."""
    if mode == "off":
        return GraphDecision(False, "cuda_graphs='off'")
    if not on_cuda:
        return GraphDecision(False, "not on a CUDA device")
    if plan.blockers:
        return GraphDecision(False, "cannot capture: " + "; ".join(plan.blockers))
    figures = (f"{plan.launches} launches, host {plan.host_s * 1e6:.0f} us vs GPU "
               f"{plan.device_s * 1e6:.0f} us predicted, working set {plan.pool_bytes / 2**20:.1f} MiB")
    if mode == "on":
        return GraphDecision(True, f"cuda_graphs='on' ({figures})")
    if plan.writes_inputs > MAX_AUTO_WRITTEN_INPUTS:
        return GraphDecision(False, f"it updates {plan.writes_inputs} inputs (an optimizer "
                                    f"step, its gradients copied in on every replay): not "
                                    f"graphed unless asked for ({figures})")
    if plan.pool_bytes > POOL_FRACTION * spec.memory_bytes:
        return GraphDecision(False, f"its buffers would stay reserved ({figures}; over "
                                    f"{POOL_FRACTION:.0%} of device memory)")
    share = pools.share(plan)
    if not pools.fits(device, share, spec):
        return GraphDecision(False, f"graph pools already hold "
                                    f"{pools.reserved.get(device, 0) / 2**20:.0f} MiB "
                                    f"({TOTAL_FRACTION:.0%} of device memory at most; {figures})")
    pools.take(device, share)
    return GraphDecision(True, f"capturable; a warm-up call is timed ({figures})", measure=True)


def judge(host_s: float, device_s: float) -> GraphDecision:
    """The measured verdict: launch-bound when issuing the launches took the host at least
    HOST_FRACTION of the time the GPU took (from idle) to run them, or all but LATENCY_SLACK_S
    of it (a small plan's GPU time from idle is its host time plus a fixed latency)."""
    figures = f"host {host_s * 1e6:.0f} us issuing, GPU {device_s * 1e6:.0f} us, measured"
    if host_s >= HOST_FRACTION * device_s or device_s - host_s <= LATENCY_SLACK_S:
        return GraphDecision(True, f"launch-bound ({figures})")
    return GraphDecision(False, f"GPU-bound ({figures})")


def judge_pair(host_s: float, device_s: float, backward: bool, forward_verdict
               ) -> GraphDecision:
    """The measured verdict for a plan sharing its pool with its pair (a training graph's
    forward and backward): `judge`, except that a backward follows a graphed forward (its
    capture then reuses the forward's freed blocks, and the forward's saved activations are
    read in place)."""
    own = judge(host_s, device_s)
    if backward and forward_verdict is not None and forward_verdict.use:
        return GraphDecision(True, f"its forward is graphed; one pool ({own.reason})")
    return own
