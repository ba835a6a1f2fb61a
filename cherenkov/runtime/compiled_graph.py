"""A compiled graph: its kernels and a flat execution plan, run with little per-call Python.

The plan is a list of steps in dependency order -- kernel launches, library calls (cuBLAS,
SDPA, any aten op), and views of buffers -- over a list of slots. Every buffer is dropped from
its slot right after its last use, so PyTorch's caching allocator reuses its memory for later
buffers (buffer reuse by lifetime). On CUDA with static shapes the plan can be captured once
in a CUDA graph and replayed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from cherenkov.ir.graph import Graph, Node, TensorMeta, contiguous_strides
from cherenkov.ir.ops import GroupOp, Op
from cherenkov.ir.views import final_layout, torch_view
from cherenkov.lowering.library import Slot, template_filler, template_has_slots
from cherenkov.passes.fusion import FusionResult, Group, const_fill, is_library
from cherenkov.runtime.alloc import Recycler, allocator
from cherenkov.runtime.schedule import plan_order
from cherenkov.runtime.triton_launch import TritonLaunch


@dataclass
class Step:
    kind: str                 # "kernel" | "library" | "view" | "getitem"
    run: object               # callable(env) -> None
    label: str
    frees: tuple = ()         # slots whose last use is this step


class CompiledGraph:
    def __init__(self, graph: Graph, fusion: FusionResult, kernels: dict[Group, tuple],
                 device: torch.device, tune_matmuls: float | None = None):
        self.graph = graph
        self.device = device
        # mm / addmm doing at least this many FLOPs by cuBLASLt's fastest algorithm (None: none)
        self.tune_matmuls = tune_matmuls
        self.slot: dict[Node, int] = {}
        for i, node in enumerate(graph.inputs):
            self.slot[node] = i
        self.n_inputs = len(graph.inputs)
        self.steps: list[Step] = []
        self.view_strides: dict[Node, tuple] = {}   # a view step's node -> its run's strides
        self.empty = allocator(device)
        if device.type == "cpu":
            self.empty = Recycler(self.empty)
        self._plan(fusion, kernels)
        self._call = self.run_plan

    # ---- planning -------------------------------------------------------------------------
    def _slot_of(self, node: Node) -> int:
        if node not in self.slot:
            self.slot[node] = len(self.slot)
        return self.slot[node]

    def _plan(self, fusion: FusionResult, kernels) -> None:
        self.schedule = fusion.schedule or plan_order(self.graph, fusion.groups,
                                                      fusion.realized, fusion.views, is_library)
        planned = self.schedule.order
        for obj in planned:
            if isinstance(obj, Group):
                self.steps.append(self._kernel_step(obj, kernels[obj]))
            elif obj in fusion.views:
                self.steps.append(self._view_step(obj, fusion.views[obj]))
            elif obj.op == Op.GETITEM:
                self.steps.append(self._getitem_step(obj))
            else:
                self.steps.append(self._library_step(obj, fusion))
        self.output_slots = [None if o is None else self.slot[o] for o in self.graph.outputs]
        self._drop_unread_views()
        aliases = self._aliases()
        self._in_place_mutations(aliases)
        self._lifetimes()
        if isinstance(self.empty, Recycler):
            self._recycle_limits()
        self.fast_steps = _batched(self.steps, self._storage_roots(aliases))

    def _recycle_limits(self) -> None:
        """Which layouts the CPU recycler keeps, and how many of each (see alloc.Recycler)."""
        backing = {s for s in self.output_slots if s is not None}
        for step in reversed(self.steps):          # a returned view keeps its base alive
            if step.kind == "view" and step.out_slots[0] in backing:
                backing.add(step.reads[0])
        layouts, outputs = [], []
        for step in self.steps:
            for slot, shape, strides, dtype in getattr(step, "allocs", ()):
                if slot in step.into:
                    continue
                layouts.append((shape, strides, dtype))
                if slot in backing:
                    outputs.append((shape, strides, dtype))
        self.empty.set_limits(layouts, outputs)

    def _in_place_mutations(self, aliases: dict[int, set]) -> None:
        """A pointwise kernel whose output is copied back into an input it reads only at the
        element it writes (an optimizer's parameter and moment updates) writes into the input
        directly, when nothing after it reads the input or a view of it: the copy after the
        run (four per parameter in an AdamW step) disappears."""
        self.in_place: set[int] = set()          # positions in graph.mutations done in place
        producer = {}
        for i, step in enumerate(self.steps):
            for slot in getattr(step, "out_slots", ()):
                producer[slot] = i
        targets = [m[0] for m in self.graph.mutations]
        updates = {position for _, position in self.graph.mutations}
        # what the caller gets back (not the values written into inputs)
        returned = {s for p, s in enumerate(self.output_slots) if p not in updates}
        for k, (index, position) in enumerate(self.graph.mutations):
            out = self.output_slots[position]
            node, value = self.graph.inputs[index], self.graph.outputs[position]
            if out is None or out not in producer or targets.count(index) > 1:
                continue
            meta = node.meta
            if (meta.shape != value.shape or meta.dtype != value.dtype or meta.storage_offset
                    or tuple(meta.strides) != contiguous_strides(meta.shape)):
                continue
            at = producer[out]
            step = self.steps[at]
            reads_in_place = getattr(step, "reads_in_place", None)   # kernel steps only
            if reads_in_place is None or not reads_in_place(index, out):
                continue
            family = aliases.get(index, {index})
            if any(s in family and s != index for s in step.reads):
                continue        # it also reads the input through an alias (a library view)
            later = any(s in family for st in self.steps[at + 1:] for s in st.reads)
            # the input (or a view) is an output, or the new value is handed back itself
            # (`x.add_(1); return x.clone()`): written in place it would be the input
            handed_back = out in returned or any(s in family for s in self.output_slots
                                                 if s is not None and s != out)
            if later or handed_back:
                continue
            step.into[out] = index
            self.in_place.add(k)

    def _aliases(self) -> dict[int, set]:
        """Input slot -> slots that may share its memory (views of it, library results read
        from it), transitively."""
        out = {i: {i} for i in range(self.n_inputs)}
        for step in self.steps:
            if step.kind in ("view", "getitem", "library"):
                for family in out.values():
                    if any(s in family for s in step.reads):
                        family.update(getattr(step, "out_slots", ()))
        return out

    @staticmethod
    def _storage_roots(aliases: dict[int, set]) -> dict[int, int]:
        """Slot -> the input whose memory it may share (an input's family in `_aliases`), for
        the slots that may; other slots own their memory."""
        roots: dict[int, int] = {}
        for index, family in aliases.items():
            for s in family:
                roots[s] = min(roots.get(s, index), index)
        return roots

    def _lifetimes(self) -> None:
        last: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            for s in step.reads:
                last[s] = i
        keep = set(s for s in self.output_slots if s is not None)
        frees: dict[int, list[int]] = {}
        for s, i in last.items():
            if s not in keep:            # inputs too: a backward's saved activations
                frees.setdefault(i, []).append(s)
        for i, step in enumerate(self.steps):
            step.frees = tuple(frees.get(i, ()))

    # ---- steps ----------------------------------------------------------------------------
    def _kernel_step(self, group: Group, compiled) -> Step:
        rendered, launcher = compiled, compiled.launch
        by_name = {}
        for r in group.reads:
            by_name[_buffer_name(r)] = self._slot_of(r)
        outs, prefills = [], []
        for m in group.members:
            name = _buffer_name(m)
            if name in rendered.arg_names:
                by_name[name] = self._slot_of(m)
                if m.op in GroupOp.SCATTER:      # scatter into a copy of its base
                    fill = const_fill(m.inputs[0])
                    src = None if fill is not None else self._slot_of(m.inputs[0])
                    prefills.append((self.slot[m], tuple(m.shape), m.dtype, fill, src))
                else:
                    outs.append((self.slot[m], tuple(m.shape), tuple(m.meta.strides),
                                 m.dtype))
        arg_slots = [by_name[n] for n in rendered.arg_names]
        # index expressions include an input's storage offset: hand Triton the storage start
        from_start = {self.slot[r] for r in group.reads
                      if r.op == Op.INPUT and r.meta.storage_offset != 0}
        device, empty = self.device, self.empty
        into: dict[int, int] = {}                 # output slot -> input slot written in place

        def prepare(env) -> list:
            """Allocate (or pre-fill) the outputs; the kernel's arguments in order."""
            _allocate(env, outs, into, empty)
            for slot, shape, dtype, fill, src in prefills:
                env[slot] = (torch.full(shape, fill, dtype=dtype, device=device) if src is None
                             else env[src].to(dtype).contiguous().clone())
            return [env[s].as_strided((1,), (1,), 0) if s in from_start else env[s]
                    for s in arg_slots]

        if prefills or from_start:
            def run(env):
                launcher(*prepare(env))
        else:
            def run(env):                     # the common step: no pre-fill, no offsets
                _allocate(env, outs, into, empty)
                launcher(*[env[s] for s in arg_slots])

        step = Step("kernel", run, rendered.name)
        step.kernel = rendered.kernel             # kernel IR, for cost reports
        step.launcher = launcher
        step.reads = list(arg_slots) + [p[4] for p in prefills if p[4] is not None]
        step.out_slots = [o[0] for o in outs]
        step.into = into
        step.prepare = prepare
        # for batched calls: outputs to allocate, the slots passed, whether anything needs
        # more than allocation (pre-filled scatter bases, inputs passed from their storage start)
        step.allocs = outs
        step.empty = empty
        step.arg_slots = list(arg_slots)
        step.simple = not prefills and not from_start
        kernel = rendered.kernel
        names = {slot: name for name, slot in zip(rendered.arg_names, arg_slots)}

        def reads_in_place(slot: int, out: int) -> bool:
            """Whether this kernel reads `slot` only at the element each program writes, and
            never after storing `out` (so writing `out` into `slot` changes nothing it reads).
            A combo: the part storing `out` so, and no other part reading `slot` at all."""
            parts = getattr(kernel, "parts", None) or [kernel]
            if kernel is None or slot not in names or out not in names or prefills \
                    or any(k.R != 1 or not k.body for k in parts):
                return False
            from cherenkov.codegen import indexing as ix
            from cherenkov.codegen.kernel_ir import Load, Store

            def touches(k, kind, buffer) -> bool:
                return any(isinstance(st, kind) and st.buffer == buffer for st in k.body)
            writers = [k for k in parts if touches(k, Store, names[out])]
            if len(writers) != 1 or any(touches(k, Load, names[slot])
                                        for k in parts if k is not writers[0]):
                return False
            x = ix.var("x", writers[0].X)
            stored = False
            for st in writers[0].body:
                if isinstance(st, Store) and st.buffer == names[out]:
                    stored = True
                elif isinstance(st, Load) and st.buffer == names[slot] and (stored
                                                                            or st.index != x):
                    return False
            return True
        step.reads_in_place = reads_in_place
        return step

    @staticmethod
    def _as_linear(node: Node, fusion: FusionResult):
        """mm(x, w.t()) / addmm(b, x, w.t()) with w a stored 2-D buffer, as the call
        F.linear(x, w[, b]) (the same ATen addmm on 2-D inputs) reading w itself: no view step
        per call for the transposed weight. Returns (target, args, kwargs, inputs) or None."""
        target, t_args, t_kwargs, _ = node.args
        aten = torch.ops.aten
        if target not in (aten.mm.default, aten.addmm.default) or t_kwargs:
            return None
        n = 2 if target is aten.mm.default else 3
        if len(t_args) != n or not all(isinstance(a, Slot) for a in t_args) \
                or not isinstance(node.meta, TensorMeta):
            return None
        view = node.inputs[t_args[-1].index]
        base = fusion.views.get(view)
        if (base is None or view.op != Op.PERMUTE or tuple(view.args[0]) != (1, 0)
                or view.inputs[0] is not base or len(base.shape) != 2):
            return None
        inputs = (node.inputs[t_args[-2].index], base) + \
            ((node.inputs[t_args[0].index],) if n == 3 else ())
        return torch.nn.functional.linear, tuple(Slot(i) for i in range(n)), {}, inputs

    def _drop_unread_views(self) -> None:
        """View steps nothing reads any more (their matmul takes the weight itself) go."""
        read = {s for step in self.steps for s in step.reads}
        read |= {s for s in self.output_slots if s is not None}
        self.steps = [st for st in self.steps
                      if not (st.kind == "view" and st.out_slots[0] not in read)]

    def _library_step(self, node: Node, fusion: FusionResult) -> Step:
        target, t_args, t_kwargs, _ = node.args
        inputs = node.inputs
        if self.tune_matmuls is not None:
            from cherenkov.runtime.algo_step import algo_step
            step = algo_step(self, node, fusion)
            if step is not None:
                return step
        linear = self._as_linear(node, fusion)
        if linear is not None:
            target, t_args, t_kwargs, inputs = linear
        in_slots = [self._slot_of(i) for i in inputs]
        out = self._slot_of(node)
        fill_args, fill_kwargs = template_filler(t_args), template_filler(t_kwargs)
        # kernels read library outputs with the strides PyTorch's fake run promised
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        layouts = [(m.shape, m.strides) if m is not None else None for m in metas]
        many = isinstance(node.meta, tuple)

        call = getattr(target, "_op", target)     # an OpOverload's C++ callable: no Python frame
        top = [v.index if isinstance(v, Slot) else None for v in t_args]
        if (not many and not t_kwargs and layouts[0] is not None
                and all(i is not None or not template_has_slots(v) for i, v in zip(top, t_args))):
            # the common call (mm, linear, addmm): positional tensors and constants only
            shape, strides = layouts[0]
            strided = len(shape) > 0 and any(d != 1 for d in shape)
            args = [(True, in_slots[i]) if i is not None else (False, v)
                    for i, v in zip(top, t_args)]

            def run(env):
                t = call(*[env[x] if is_slot else x for is_slot, x in args])
                if t.storage_offset() or (strided and t.stride() != strides):
                    t = _relaid(t, shape, strides)
                env[out] = t
        else:
            def run(env):
                values = [env[s] for s in in_slots]
                result = call(*fill_args(values), **fill_kwargs(values))
                parts = list(result) if many else [result]
                for i, (t, layout) in enumerate(zip(parts, layouts)):
                    if layout is not None and isinstance(t, torch.Tensor) and (
                            t.storage_offset() or (t.numel() > 1
                                                   and tuple(t.stride()) != layout[1])):
                        parts[i] = _relaid(t, *layout)
                env[out] = tuple(parts) if many else parts[0]

        step = Step("library", run, getattr(target, "__name__", str(target)))
        step.node = node                          # for the CUDA-graph policy's estimate
        step.reads = in_slots
        step.out_slots = [out]
        return step

    def _getitem_step(self, node: Node) -> Step:
        src, index, out = self._slot_of(node.inputs[0]), node.args[0], self._slot_of(node)

        def run(env):
            env[out] = env[src][index]

        step = Step("getitem", run, "getitem")
        step.reads = [src]
        step.out_slots = [out]
        return step

    def _view_step(self, node: Node, base: Node) -> Step:
        chain = []
        n = node
        while n is not base:
            chain.append(n)
            n = n.inputs[0]
        chain.reverse()
        ops = [torch_view(v) for v in chain]
        src, out = self._slot_of(base), self._slot_of(node)
        layout = final_layout(base, ops)

        if layout is not None:              # the whole chain is one as_strided of the base
            size, stride, offset = layout
            self.view_strides[node] = stride

            def run(env):
                env[out] = env[src].as_strided(size, stride, offset)
        else:
            def run(env):
                t = env[src]
                for op in ops:
                    t = op(t)
                env[out] = t

        step = Step("view", run, "view")
        step.reads = [src]
        step.out_slots = [out]
        return step

    # ---- running --------------------------------------------------------------------------
    def use_cuda_graphs(self, warmup: int = 1, judge=None, group=None,
                        caller_outputs: int | None = None) -> None:
        """Replay the plan through a CUDA graph after `warmup` calls (see cuda_graphs.py);
        `judge(host_s, device_s)`: the last warm-up call is timed and judged first; `group`:
        the cuda_graphs.PoolGroup whose pool it captures into (its forward's / backward's);
        `caller_outputs`: how many leading outputs reach the caller (None: all).
        Whether it can be (a CUDA plan, no host tensors, ...) is graph_policy's to say."""
        from cherenkov.runtime.cuda_graphs import GraphedPlan
        index = None                # one GPU: it is always the current one (no check per call)
        if torch.cuda.device_count() > 1:
            index = self.device.index if self.device.index is not None \
                else torch.cuda.current_device()
        self._call = GraphedPlan(self.run_plan, self.graph.name, warmup, judge, index, group,
                                 caller_outputs)

    def __call__(self, inputs: list):
        """Runs the plan on `inputs`, taking ownership of the list: it is emptied, so each
        input can be freed after its last use (AOTAutograd hands a backward its saved
        activations this way, as it does Inductor's). In-place updates of inputs are applied
        after the run."""
        if not self.graph.mutations:
            return self._call(inputs)
        targets = [inputs[i] for i, _ in self.graph.mutations]
        return self.apply_mutations(targets, self._call(inputs))

    def apply_mutations(self, targets: list, outs: list) -> list:
        """Copy each updated value into its input (a kernel that wrote it in place only bumps
        its version, as copy_ would); return the graph's own outputs."""
        written, copies = [], []
        for dst, (_, position) in zip(targets, self.graph.mutations):
            value = outs[position]
            if value is dst or _same_view(value, dst):
                # written in place (a CUDA graph replay hands back an alias of the input it
                # wrote, not the input itself: copying it onto itself would cost a clone and
                # a copy of every updated tensor, an optimizer's whole state, per call)
                written.append(dst)
            else:
                copies.append((dst, value))
        if copies:
            # a value on any target's storage (an input passed through: t = a.clone();
            # a.copy_(b); b.copy_(t) hands back a itself for b) is read before any copy lands
            storages = {t.untyped_storage().data_ptr() for t in targets}
            copies = [(dst, value.clone() if value.untyped_storage().data_ptr() in storages
                       else value) for dst, value in copies]
            for dst, value in copies:
                dst.copy_(value)
        if written:
            _bump_versions(written)
        return outs[: len(outs) - len(targets)]

    def bind_stream(self) -> None:
        """Generated kernels launch on the current CUDA stream, looked up once per run."""
        if self.device.type == "cuda":
            index = self.device.index
            TritonLaunch.stream = torch._C._cuda_getCurrentRawStream(
                index if index is not None else torch.cuda.current_device())

    def run_plan(self, inputs: list):
        self.bind_stream()
        env = list(inputs) + [None] * (len(self.slot) - self.n_inputs)
        inputs.clear()
        for step in self.fast_steps:
            step.run(env)
            for s in step.frees:
                env[s] = None
        outs = []
        for i, s in enumerate(self.output_slots):
            outs.append(self.graph.scalar_outputs.get(i) if s is None else env[s])
        return outs

    @property
    def kernel_count(self) -> int:
        return sum(1 for s in self.steps if s.kind == "kernel")


def _batched(steps: list[Step], roots: dict[int, int] | None = None) -> list[Step]:
    """The plan with each run of consecutive C++ kernels (of one library) made one step that
    calls them all at once (`cpp_build.run_many`): on a CPU each ctypes call and the Python
    around it cost microseconds, a compiled optimizer step has one kernel per parameter."""
    out, run = [], []

    def flush():
        out.extend([_cpp_batch(list(run), roots or {})] if len(run) >= 2 else run)
        run.clear()
    for step in steps:
        launcher = getattr(step, "launcher", None)
        batchable = (step.kind == "kernel" and getattr(launcher, "batch_id", None) is not None
                     and hasattr(launcher, "library"))
        if batchable and (not run or run[0].launcher.library is launcher.library):
            run.append(step)
            continue
        flush()
        if batchable:
            run.append(step)
        else:
            out.append(step)
    flush()
    return out


def _levels(members: list[Step], roots: dict[int, int]) -> list[list[int]] | None:
    """The batch's kernels (positions) in levels: a kernel goes one level past every earlier
    kernel it conflicts with (it reads what that one writes, writes what it reads or writes;
    memory compared by storage root, so views of one input and an output written in place
    into an input conflict with that input); a kernel that spreads
    its own loop over the threads is a level of its own, after everything before it. None
    when no level holds two kernels (nothing to run side by side)."""
    home = {}                    # an output written in place lives in its input's memory
    for m in members:
        home.update(m.into)

    def memory(slot: int) -> int:
        slot = home.get(slot, slot)
        return roots.get(slot, slot)
    reads, writes, level = [], [], []
    floor = 0
    for j, m in enumerate(members):
        outs = set(m.out_slots)
        r = {memory(s) for s in m.reads if s not in outs}
        w = {memory(o) for o in m.out_slots}
        lvl = floor
        for i in range(j):
            if writes[i] & r or writes[i] & w or reads[i] & w:
                lvl = max(lvl, level[i] + 1)
        if m.launcher.parallel_inside:
            lvl = max([floor] + [x + 1 for x in level])
            floor = lvl + 1
        reads.append(r)
        writes.append(w)
        level.append(lvl)
    groups = [[j for j in range(len(members)) if level[j] == lvl] for lvl in sorted(set(level))]
    return groups if any(len(g) > 1 for g in groups) else None


def _cpp_batch(members: list[Step], roots: dict[int, int]) -> Step:
    from cherenkov.runtime.cpp_build import run_levels, run_many
    kernels = [m.launcher for m in members]
    levels = _levels(members, roots)
    call = run_many(kernels) if levels is None else run_levels(kernels, levels)

    # Every argument starts its storage: kernel outputs are fresh or in-place contiguous
    # tensors, library outputs are brought to offset 0, inputs with an offset are passed from
    # their storage start, and the input signature (backend._signature) pins inputs' offsets. The
    # first call, which checks every argument, confirms it; then a pointer is just data_ptr.
    allocs = [a for m in members for a in m.allocs]
    arg_slots = [s for m in members for s in m.arg_slots]
    into: dict = {}
    for m in members:
        into.update(m.into)          # filled by _in_place_mutations before batching
    empty = members[0].empty
    fast = [None]                    # decided by the first call

    def run(env):
        if fast[0]:
            _allocate(env, allocs, into, empty)
            call([env[s].data_ptr() for s in arg_slots])
        elif fast[0] is None:        # first call: each kernel checks its own arguments
            args = []
            for m in members:
                tensors = m.prepare(env)
                args.extend(tensors)
                m.launcher(*tensors)
            fast[0] = all(m.simple for m in members) and not any(t.storage_offset()
                                                                  for t in args)
        else:
            call([t.data_ptr() - t.storage_offset() * t.element_size()
                  for m in members for t in m.prepare(env)])

    step = Step("kernel_batch", run, "+".join(m.label for m in members))
    step.members = members
    step.reads = [s for m in members for s in m.reads]
    step.frees = tuple(s for m in members for s in m.frees)   # all dead by the batch's end
    return step


def _same_view(a, b: torch.Tensor) -> bool:
    """Whether tensor a is b's very elements: same first element, shape, strides and dtype."""
    return (isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr()
            and a.device == b.device and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


def _relaid(t: torch.Tensor, shape, strides) -> torch.Tensor:
    """A library result copied into the layout PyTorch's fake run promised (kernels index it
    with those strides)."""
    return torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def _allocate(env: list, allocs: list, into: dict, empty) -> None:
    """Kernel outputs into their slots: new buffers, or the input an update is written into."""
    for slot, shape, strides, dtype in allocs:
        env[slot] = empty(shape, strides, dtype) if slot not in into else env[into[slot]]


def _bump_versions(tensors: list) -> None:
    """What an in-place op does to a tensor's version counter (autograd's check that a saved
    tensor was not modified), for writes kernels made directly; one call for all."""
    try:
        torch.autograd.graph.increment_version(tensors)     # a list: recent torch
    except TypeError:
        for t in tensors:
            torch.autograd.graph.increment_version(t)


def _buffer_name(node: Node) -> str:
    from cherenkov.passes.fusion import buffer_name
    return buffer_name(node)
