"""Expand a plan into per-device task programs for the simulator.

One representative device per pipeline stage (its data/tensor/context-parallel peers run the
same program). For each `(phase, microbatch, chunk)` of the stage's schedule, every layer
becomes a short chain on the device's streams:

    forward   [all_gather params (ZeRO-3, prefetched)] -> compute -> tp/cp collectives
    backward  [all_gather params (ZeRO-3)] -> recompute -> compute -> tp/cp collectives
              -> [gradient reduce-scatter / all-reduce bucket on the dp level]

Gradient buckets (one per layer) are issued as soon as that layer's backward finishes, on
the last microbatch (ZeRO 0/1) or on every microbatch (ZeRO 2/3), so they overlap the rest of
the backward pass; ZeRO 1/2 re-gather updated parameters per layer ahead of the first
forward. Activations are allocated when a chunk's forward starts and freed when its
backward ends; stages exchange activations and gradients by send/recv.
"""
from __future__ import annotations

from dataclasses import dataclass

from cherenkov.ir.placement import Shard
from cherenkov.parallel.mesh import MeshAxis
from cherenkov.planner.memory import MemoryBreakdown, activation_bytes, device_memory
from cherenkov.planner.schedule import max_inflight, stage_order
from cherenkov.planner.simulator import Task

OPTIMIZER_BYTES_MOVED = 28.0  # per parameter: read fp32 master, m, v, bf16 grad; write them + bf16 weight


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of one layer (or the embedding/head) for one microbatch on one device."""
    fwd: float
    fwd_comm: float
    bwd: float
    bwd_comm: float
    recompute: float
    params: float          # parameters stored per device (before ZeRO)
    saved: dict            # recompute mode -> saved activation bytes
    fwd_comm_bytes: float = 0.0
    bwd_comm_bytes: float = 0.0


def grad_axis(plan) -> MeshAxis:
    """The group that holds replicas of each weight shard: dp and cp together."""
    c = plan.choice
    return grad_axis_of(plan.cluster, c.tp, c.cp, c.dp)


def grad_axis_of(cluster, tp: int, cp: int, dp: int) -> MeshAxis:
    gpn = cluster.gpus_per_node
    size, stride = dp * cp, tp
    spans = size > 1 and stride * size > gpn
    per_node = max(1, min(size, gpn // stride)) if spans else size
    return MeshAxis("dp", size, stride, spans, per_node)


def _level(axis: MeshAxis) -> str:
    return "inter" if axis.spans_nodes else "intra"


def layer_times(plan, sol, costs, with_cp: bool) -> LayerTimes:
    c = plan.choice
    fwd_comm, bwd_comm = sol.seconds("fwd", "comm"), sol.seconds("bwd", "comm")
    if with_cp and c.cp > 1:
        # Ring attention: gather K and V of the full sequence, reduce-scatter their gradients.
        kv = 0.0
        for op in sol.graph.ops:
            if op.kind == "attention":
                frac = 1.0 / c.tp if isinstance(sol.chosen[op.name].inputs[0], Shard) else 1.0
                kv += 2.0 * c.microbatch_size * plan.seq * op.attr("kv_heads") * \
                    op.attr("head_dim") * 2 * frac
        cp = plan.mesh.axis("cp")
        fwd_comm += costs.collective("all_gather", kv, cp.size, cp.spans_nodes, cp.per_node)
        bwd_comm += costs.collective("reduce_scatter", kv, cp.size, cp.spans_nodes, cp.per_node)
    rec = sol.recompute_seconds[c.recompute] if c.recompute in sol.recompute_seconds else 0.0
    fb = sum(it[1].nbytes for it in sol.forward if it[0] == "comm")
    bb = sum(it[1].nbytes for it in sol.backward if it[0] == "comm")
    return LayerTimes(sol.seconds("fwd", "compute"), fwd_comm, sol.seconds("bwd", "compute"),
                      bwd_comm, rec, sol.params_per_device, sol.saved_bytes, fb, bb)


def p2p_seconds(plan, costs) -> tuple[float, float]:
    """(bytes, seconds) of sending one microbatch's activations to the next stage."""
    sol = plan.layer
    x = sol.graph.values[sol.graph.input]
    nbytes = x.nbytes / (plan.choice.tp if isinstance(sol.input_placement, Shard) else 1)
    pp = plan.mesh.axis("pp")
    if pp.size <= 1:  # one stage: nothing to send (and a 1-GPU cluster has no pair to send to)
        return nbytes, 0.0
    return nbytes, costs.collective("send_recv", nbytes, 2, pp.spans_nodes and pp.size > 1, 1)


def stage_memory(plan, stage: int) -> MemoryBreakdown:
    """Analytic peak memory of a device of `stage` (weights, grads, Adam, activations, buffers)."""
    c = plan.choice
    layers = plan.stage_layers(stage)
    params = layers * plan.layer.params_per_device
    inflight = max_inflight(c.schedule, c.pp, c.num_microbatches, c.virtual, stage)
    acts = activation_bytes(plan.layer.saved_bytes, layers, inflight, c.recompute)
    if stage == 0:
        params += plan.embed.params_per_device
        acts += inflight * plan.embed.saved_bytes["none"]
    if stage == c.pp - 1:
        params += plan.head.params_per_device
        acts += min(inflight, 1.0 if c.schedule != "gpipe" else inflight) * plan.head.saved_bytes["none"]
    buffers = 0.0
    if c.zero_stage == 3 and c.dp * c.cp > 1:  # two gathered layers: the current and the prefetched
        buffers = 2 * 2.0 * plan.layer.params_per_device
    return device_memory(params, c.zero_stage, c.dp * c.cp, acts, buffers)


def build_tasks(plan, costs) -> tuple[list[Task], dict[int, float]]:
    c = plan.choice
    lt = layer_times(plan, plan.layer, costs, with_cp=True)
    et = layer_times(plan, plan.embed, costs, with_cp=False)
    ht = layer_times(plan, plan.head, costs, with_cp=False)
    tp_level = _level(plan.mesh.axis("tp"))
    gax = grad_axis(plan)
    g_level = _level(gax)
    pp_axis = plan.mesh.axis("pp")
    # Pipeline sends run on their own stream (a separate NCCL communicator), so they never
    # queue behind a gradient bucket.
    p2p_level = "p2p"
    p2p_bytes, p2p_s = p2p_seconds(plan, costs)
    zero = c.zero_stage if gax.size > 1 else 0
    sync_kind = "all_reduce" if zero == 0 else "reduce_scatter"
    layer_grad_bytes = 2.0 * lt.params
    sync_s = costs.collective(sync_kind, layer_grad_bytes, gax.size, gax.spans_nodes, gax.per_node)
    gather_s = costs.collective("all_gather", layer_grad_bytes, gax.size, gax.spans_nodes, gax.per_node)
    tp_step_s = sum(x.seconds for x in plan.layer.step_comm)
    V, m = c.virtual, c.num_microbatches

    tasks: list[Task] = []
    static: dict[int, float] = {}
    send_f: dict[tuple[int, int], int] = {}   # (virtual stage, microbatch) -> send task
    send_b: dict[tuple[int, int], int] = {}
    orders = {p: stage_order(c.schedule, c.pp, m, V, p) for p in range(c.pp)}
    # Build stage by stage in schedule order; cross-stage deps need the sender built first, so
    # emit in rounds: repeatedly advance any stage whose next item's inputs exist.
    pos = {p: 0 for p in range(c.pp)}
    state = {p: {"last_compute": None, "gathered": {}, "chunk_start": {}, "sync": [],
                 "sync_mb": {}} for p in range(c.pp)}

    def add(task: Task) -> int:
        tasks.append(task)
        return len(tasks) - 1

    def emit(p: int, phase: str, mb: int, chunk: int) -> None:
        st = state[p]
        vs = chunk * c.pp + p
        first_vs, last_vs = vs == 0, vs == c.pp * V - 1
        nl = plan.chunk_layers(p, chunk)
        deps = []
        if phase == "F" and not first_vs:
            deps.append(send_f[(vs - 1, mb)])
        if phase == "B" and not last_vs:
            deps.append(send_b[(vs + 1, mb)])
        saved = activation_bytes(lt.saved, nl, 1, c.recompute)
        if c.recompute == "full":
            saved -= lt.saved["none"]
        if first_vs:
            saved += et.saved["none"]
        if last_vs:
            saved += ht.saved["none"]
        prev = deps

        def chain(name, seconds, comm_s, cat="compute", alloc=0.0, comm_bytes=0.0, extra=()):
            nonlocal prev
            i = add(Task(name, p, "compute", seconds, tuple(prev) + tuple(extra), cat, alloc=alloc))
            last = i
            if comm_s > 0:
                last = add(Task(name + ".comm", p, tp_level, comm_s, (i,), "comm",
                                nbytes=comm_bytes, axis="tp"))
            prev = [last]
            return i, last

        alloc = saved
        if phase == "F":
            if first_vs:
                chain(f"F{mb}.embed", et.fwd, et.fwd_comm, alloc=alloc)
                alloc = 0.0
            for l in range(nl):
                extra = ()
                key = (chunk, l)
                if zero == 3 or (zero in (1, 2) and mb == 0):
                    if zero == 3 or key not in st["gathered"]:
                        ag = add(Task(f"F{mb}.ag{chunk}.{l}", p, g_level, gather_s,
                                      (), "comm", nbytes=layer_grad_bytes, axis="dp"))
                        st["gathered"][key] = ag
                        extra = (ag,)
                chain(f"F{mb}.c{chunk}.l{l}", lt.fwd, lt.fwd_comm, alloc=alloc,
                      comm_bytes=lt.fwd_comm_bytes, extra=extra)
                alloc = 0.0
            if last_vs:
                chain(f"F{mb}.head", ht.fwd, ht.fwd_comm)
            else:
                send_f[(vs, mb)] = add(Task(f"F{mb}.send", p, p2p_level, p2p_s, tuple(prev), "p2p",
                                            nbytes=p2p_bytes, axis="pp"))
            return
        # backward
        if last_vs:
            chain(f"B{mb}.head", ht.bwd, ht.bwd_comm)
        last_mb = mb == m - 1
        gathered = {}

        def gather(l):
            return add(Task(f"B{mb}.ag{chunk}.{l}", p, g_level, gather_s, (), "comm",
                            nbytes=layer_grad_bytes, axis="dp"))
        for l in reversed(range(nl)):
            extra = ()
            if zero == 3:
                # FSDP's backward prefetch: the next layer's all-gather is issued before this
                # layer's reduce-scatter, so it overlaps this layer's backward compute
                ag = gathered.pop(l, None)
                if ag is None:
                    ag = gather(l)
                if l > 0:
                    gathered[l - 1] = gather(l - 1)
                extra = (ag,)
            if lt.recompute > 0:
                chain(f"B{mb}.c{chunk}.l{l}.recompute", lt.recompute, 0.0, "recompute", extra=extra)
                extra = ()
            i, last = chain(f"B{mb}.c{chunk}.l{l}", lt.bwd, lt.bwd_comm,
                            comm_bytes=lt.bwd_comm_bytes, extra=extra)
            if gax.size > 1 and (zero >= 2 or last_mb):
                st["sync"].append(add(Task(f"B{mb}.{sync_kind}{chunk}.{l}", p, g_level, sync_s,
                                           (i,), "comm", nbytes=layer_grad_bytes, axis="dp")))
            if tp_step_s > 0 and last_mb:
                st["sync"].append(add(Task(f"B{mb}.tp_grad_sync{chunk}.{l}", p, tp_level,
                                           tp_step_s, (i,), "comm", axis="tp")))
        if first_vs:
            chain(f"B{mb}.embed", et.bwd, et.bwd_comm)
        tasks[prev[0]].free = saved
        if not first_vs:
            send_b[(vs, mb)] = add(Task(f"B{mb}.send", p, p2p_level, p2p_s, tuple(prev), "p2p",
                                        nbytes=p2p_bytes, axis="pp"))

    def ready(p: int) -> bool:
        phase, mb, chunk = orders[p][pos[p]]
        vs = chunk * c.pp + p
        if phase == "F":
            return vs == 0 or (vs - 1, mb) in send_f
        return vs == c.pp * V - 1 or (vs + 1, mb) in send_b

    remaining = sum(len(o) for o in orders.values())
    while remaining:
        progressed = False
        for p in range(c.pp):
            while pos[p] < len(orders[p]) and ready(p):
                emit(p, *orders[p][pos[p]])
                pos[p] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"pipeline schedule {c.schedule} deadlocks for {c}")
    for p in range(c.pp):
        params = plan.stage_layers(p) * lt.params + (et.params if p == 0 else 0) + \
            (ht.params if p == c.pp - 1 else 0)
        shard = gax.size if zero >= 1 else 1
        opt = costs.kernel(0.0, OPTIMIZER_BYTES_MOVED * params / shard, False)
        add(Task("optimizer", p, "compute", opt, tuple(state[p]["sync"]), "optimizer"))
        mem = stage_memory(plan, p)
        static[p] = mem.weights + mem.grads + mem.optimizer + mem.buffers
    return tasks, static
