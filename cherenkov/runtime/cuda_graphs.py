"""Replay a compiled graph's plan through a CUDA graph (static shapes, CUDA only).

Warm-up calls run the plan as usual; the next call runs it as usual too and then captures it
(capture records without running, so each call runs the plan once: an in-place update of an
input -- an optimizer step -- is never applied twice). Inputs whose storage stayed
put since the previous call (parameters updated in place, the saved activations a graphed
forward hands its backward) are read where they are; the others are copied into static
buffers before each replay. A static input that later moves makes the plan capture again (a
few times at most, then it runs without graphs).

Outputs are the graph's own buffers, returned without a copy (as fresh aliases): a training step's saved
activations go straight from the forward's replay to the backward's. Before each replay the
plan checks that nobody still holds an output of the previous one (storage use counts back to
what they were right after capture); if someone does -- a loss kept across steps, two forwards
before one backward -- that call runs the plan without the graph, so an output is never
overwritten under its holder. If capture fails (a sync inside an extern op, say), the plan runs
without graphs, with the reason logged.

A training graph's forward and backward capture into one memory pool (`PoolGroup`), as
torch's CUDA-graph trees do: the backward's capture reuses the blocks the forward freed (its
transient buffers), so graphing both holds about what the step holds without graphs, not the
two working sets side by side. Sharing has a rule: a plan's replay writes its transient
buffers on blocks that a later capture in the pool may have taken for its outputs (every
capture's outputs stay allocated, held by the plan, so no capture reuses another's). So
before each replay the plan also checks that no later capture's output is held (the
gradients a backward returned, let go by the optimizer's zero_grad before the next forward);
if one is (gradient accumulation), the call runs without the graph.

With `PoolGroup(pooled=True)` (config `cuda_graphs_pooled`) the group's warm-up calls before
its first capture also allocate from the pool (the allocator's per-thread pool routing, as
torch's graph trees warm up), on the side stream the captures run on (the allocator keeps free
blocks per stream: warm-ups on the default stream left the capture 9 GB it could not reuse,
pool 19.2 GB reserved for 9.1 allocated on GPT-2); later warm-ups (a backward waiting for its
forward's replays) run outside the pool, where their outputs cannot land on a captured plan's
transient blocks. A capture comes before the call's run: capturing executes nothing, so the
call's result is the first replay (in-place updates applied once) and the capturing call's
outputs exist once, not a plain run's beside the graph's. Measured at fcedae4 (train suite,
`2026-11-30_train_pooled_h200_fcedae4.md`): GPT-2 30.7 vs 30.8 ms ungraphed, 13.4 GB reserved
vs 12.5; Llama 91.7 vs 91.5 ms with 1.22x torch.compile's peak (our reading, not traced: the
forward graph holds its saved activations through the backward, where a plain step frees them
as it goes) -- so off.
"""
from __future__ import annotations

import contextlib
import logging
import time
import weakref

import torch

log = logging.getLogger("cherenkov")

MAX_CAPTURES = 4
MAX_OFFSET_WASTE = 64 << 20     # bytes a copied input's storage offset may cost its copy
MAX_FALLBACKS = 3               # calls in a row run without the graph before it is given up
COPY_OUT_ELEMENTS = 16          # outputs this small are returned as copies (a loss kept
                                # from one step to the next does not stop the replays)


def storage_uses(tensors) -> list[int]:
    """Use counts of the tensors' storages (how many tensors and views share each)."""
    return [torch._C._storage_Use_Count(t.untyped_storage()._cdata) for t in tensors]


def _overlapping(t: torch.Tensor) -> bool:
    """Whether two of t's elements may share memory (then it cannot be copied into place).
    torch answers "too hard" for any non-dense view; a layout whose dims, by stride, each step
    over all the smaller ones' extent is free of overlap."""
    answer = torch._debug_has_internal_overlap(t)
    if answer != 2:
        return answer == 1
    extent = 0
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if stride <= extent:
            return True
        extent += (size - 1) * stride
    return False


def _extent(t: torch.Tensor) -> int:
    """Elements from t's first to its last, inclusive."""
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) if t.numel() else 0


def _same_layout(t: torch.Tensor) -> torch.Tensor:
    """An uninitialized tensor with t's shape, strides and storage offset."""
    storage = torch.empty(t.storage_offset() + _extent(t), dtype=t.dtype, device=t.device)
    return storage.as_strided(t.shape, t.stride(), t.storage_offset())


def _uncopyable(t: torch.Tensor) -> str | None:
    """Why a moving input cannot be copied into a static buffer laid out as it is, or None.
    A broadcast cannot be copied into place; a copy keeps the storage offset (the plan indexes
    from the storage start), so an input far into a big storage would cost all before it."""
    if _overlapping(t):
        return f"has overlapping elements (shape {tuple(t.shape)}, strides {t.stride()})"
    if t.storage_offset() > max(MAX_OFFSET_WASTE // t.element_size(), _extent(t)):
        return f"sits {t.storage_offset() * t.element_size() / 1e6:.0f} MB into its storage"
    return None


@contextlib.contextmanager
def allocating_in(pool, device_index: int):
    """This thread's CUDA allocations come from graph pool `pool` (torch >= 2.8)."""
    torch._C._cuda_beginAllocateCurrentThreadToPool(device_index, pool)
    try:
        yield
    finally:
        torch._C._cuda_endAllocateToPool(device_index, pool)
        torch._C._cuda_releasePool(device_index, pool)


def _held(tensors, baseline) -> bool:
    return storage_uses(tensors) != baseline


@contextlib.contextmanager
def on_stream(stream):
    """Work issued inside runs on `stream`, after the current stream's earlier work and before
    its later work (so tensors passed either way need no other synchronization)."""
    current = torch.cuda.current_stream()
    stream.wait_stream(current)
    try:
        with torch.cuda.stream(stream):
            yield
    finally:
        current.wait_stream(stream)


class PoolGroup:
    """The graphed plans sharing one CUDA graph memory pool (a forward and its backward), in
    capture order, and the forward's verdict for its backward to follow."""

    def __init__(self, pooled: bool = False):
        self.pooled = pooled             # warm-ups in the pool; capture before the run
        self.handles: dict = {}          # device index -> pool handle
        self.holds: dict = {}            # device index -> the finalizer of the group's use
        self.streams: dict = {}          # device index -> side stream (pooled warm-ups, captures)
        # weak references to the GraphedPlans whose outputs sit in the pool, by capture order
        # (a plan that gave up its graph stays while its outputs are held)
        self.members: list = []
        self.ever_captured = False
        self.verdict = None              # the forward's measured GraphDecision, once judged

    def handle(self, device_index: int):
        """The group's pool on that device, created on first use. The group holds one use of
        it until no captured plan is left in it: the allocator counts a pool's users (each
        capture into it, each routed block of calls) and, once none is left, frees its blocks
        as they return and refuses to route into it again -- without the group's use, a
        warm-up after another's release would fail. A pool let go makes way for a fresh one."""
        if device_index not in self.handles:
            handle = torch.cuda.graph_pool_handle()
            torch._C._cuda_beginAllocateCurrentThreadToPool(device_index, handle)
            torch._C._cuda_endAllocateToPool(device_index, handle)
            done = weakref.finalize(self, torch._C._cuda_releasePool, device_index, handle)
            done.atexit = False          # at exit the allocator goes anyway
            self.handles[device_index], self.holds[device_index] = handle, done
        return self.handles[device_index]

    def stream(self, device_index: int):
        """The side stream the group's pooled warm-ups and captures run on: the allocator
        keeps free blocks per stream, so a capture reuses only what was freed on its own."""
        if device_index not in self.streams:
            self.streams[device_index] = torch.cuda.Stream(device_index)
        return self.streams[device_index]

    def routes_warmups(self) -> bool:
        """Whether warm-up calls allocate from the pool: only before the group's first
        capture. After it, a warm-up's outputs there (a backward's gradients) could sit on a
        captured plan's transient blocks, which its replays overwrite unwatched."""
        return self.pooled and not self.ever_captured

    def _let_go(self) -> None:
        """No plan captured in the pool is left: the group's uses go (the blocks return to the
        device as the graphs and their outputs go), and a later capture takes a fresh pool."""
        for done in self.holds.values():
            done()
        self.handles, self.holds = {}, {}

    def live(self) -> list:
        return [p for p in (ref() for ref in self.members) if p is not None]

    def _drop(self, plan: "GraphedPlan") -> None:
        self.members = [ref for ref in self.members if ref() is not None and ref() is not plan]

    def captured(self, plan: "GraphedPlan") -> None:
        """`plan` has just captured (again): it is the latest member."""
        self._drop(plan)
        self.members.append(weakref.ref(plan))
        self.ever_captured = True

    def forget(self, plan: "GraphedPlan") -> None:
        self._drop(plan)
        if not self.members:
            self._let_go()

    def clash(self, plan: "GraphedPlan") -> str | None:
        """Why replaying `plan` now could overwrite a tensor someone holds, or None. A member
        that gave up its graph is watched until nobody holds its outputs, then let go --
        wherever it stands (a plan that captured again after it moved behind it), so that
        the group can let its pool go once no captured plan is left."""
        for m in self.live():
            if m is not plan and m.graph is None and not _held(m.owned, m.baseline):
                m._release()             # given up and no longer held: its blocks are free
        live = self.live()
        later = live[live.index(plan) + 1:] if plan in live else []
        for m in later:
            if _held(m.owned, m.baseline):
                return f"an output of {m.name} (captured later in the same pool) is held"
        return None


class GraphedPlan:
    def __init__(self, run_plan, name: str, warmup: int = 1, judge=None,
                 device_index: int | None = None, group: PoolGroup | None = None,
                 caller_outputs: int | None = None):
        self.run_plan = run_plan        # callable(list of inputs) -> list of outputs
        self.name = name
        # the plan's GPU: timing, capture and replay run with it current (the plan launches
        # on its device's stream whatever the current device is)
        self.device_index = device_index
        self.warmup = warmup            # calls before capture (a backward waits for its forward)
        # judge(host_s, device_s) -> GraphDecision: the last warm-up call is timed (host issue
        # time and GPU time, from an idle GPU) and the plan is captured only if judged so
        self.judge = judge
        self.verdict = None
        self.calls = 0
        self.replays = 0
        self.captures = 0
        self.prev_ptrs: list | None = None
        self.graph = None
        self.disabled = False
        self.held_logged = False
        self.static_inputs: list = []
        self.static_slots: list[bool] = []
        self.captured_ptrs: list = []
        self.input_storages: list = []  # storage of each input at capture (for inspection)
        self.static_outputs: list = []
        self.owned: list = []           # outputs in the graph's pool (not inputs passed through)
        self.baseline: list[int] = []
        self.group = group              # the pool shared with its forward / backward, if any
        # outputs [0, caller_outputs) reach the caller (a forward's others are its saved
        # activations, read in place by its backward); None: all
        self.caller_outputs = caller_outputs
        self.fallbacks = 0              # calls in a row run beside the graph (held outputs)
        self.copied_out: set = set()    # tiny outputs returned as copies (a loss), not watched

    def __call__(self, inputs: list):
        if self.disabled or torch.cuda.is_current_stream_capturing():
            # (inside a caller's own capture, the plan is simply recorded into theirs)
            return self.run_plan(inputs)
        if self.device_index is not None and torch.cuda.current_device() != self.device_index:
            with torch.cuda.device(self.device_index):
                return self._step(inputs)
        return self._step(inputs)

    def _step(self, inputs: list):
        self.calls += 1
        ptrs = [t.data_ptr() if isinstance(t, torch.Tensor) else None for t in inputs]
        if self.graph is None and self.calls <= self.warmup:
            self.prev_ptrs = ptrs
            with self._in_pool(inputs):
                if self.judge is not None and self.calls == self.warmup:
                    return self._timed(inputs)
                return self.run_plan(inputs)
        if self.graph is None:
            return self._run_and_capture(inputs, ptrs)
        held = "an output of the previous replay is still held" \
            if _held(self.owned, self.baseline) else None
        if held is None and self.group is not None:
            held = self.group.clash(self)
        if held is not None:
            return self._run_beside(inputs, held)
        self.fallbacks = 0
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor):
                continue
            if self.static_slots[i]:
                if ptrs[i] != self.captured_ptrs[i]:               # moved: capture again
                    self._release()
                    self.prev_ptrs = ptrs
                    return self.run_plan(inputs)
            else:
                self.static_inputs[i].copy_(t)
        return self._replay()

    def _replay(self) -> list:
        self.graph.replay()
        self.replays += 1
        # fresh tensors on the graph's buffers (not marked as views): whoever holds one adds
        # to its storage's use count, which is what the check above reads
        return [o.clone() if i in self.copied_out else
                o.detach() if isinstance(o, torch.Tensor) else o
                for i, o in enumerate(self.static_outputs)]

    def _pooled(self) -> bool:
        return self.group is not None and self.group.pooled

    @contextlib.contextmanager
    def _in_pool(self, inputs: list):
        """A pooled warm-up's context: on the group's side stream, allocating from its pool
        (where the capture will find the blocks it freed). The inputs are marked as used on
        the side stream: the plan drops them after their last read, and their blocks must not
        go to another allocation on their own stream before the side stream is past it."""
        if self.group is None or not self.group.routes_warmups():
            yield
            return
        device = torch.cuda.current_device()
        side = self.group.stream(device)
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(side)
        with on_stream(side), allocating_in(self.group.handle(device), device):
            yield

    def _run_beside(self, inputs: list, why: str) -> list:
        """This call runs without the graph (replaying would overwrite a tensor someone
        holds). A graph that keeps being bypassed is given up, so that its pool is not held
        beside the memory the plain runs take."""
        self.fallbacks += 1
        if self.fallbacks >= MAX_FALLBACKS:
            log.info("cherenkov: %s: %s on %d calls in a row; CUDA graph given up", self.name,
                     why, self.fallbacks)
            # the graph goes; its outputs, still held, stay watched by the pool's earlier
            # members that can still replay (their replays write on blocks these may sit
            # on) until let go; with none, nothing is watched or kept
            live = self.group.live() if self.group is not None else []
            earlier = live[:live.index(self)] if self in live else []
            if any(m.graph is not None for m in earlier):
                self.graph, self.static_inputs = None, []
            else:
                self._release()
            self.disabled = True
        elif not self.held_logged:
            log.info("cherenkov: %s: %s; running without the CUDA graph while it is",
                     self.name, why)
            self.held_logged = True
        return self.run_plan(inputs)

    def _timed(self, inputs: list) -> list:
        """Run the plan from an idle GPU, timing the host's issue of its launches and the GPU's
        execution; the judge decides whether later calls go through a CUDA graph."""
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        outs = self.run_plan(inputs)
        host_s = time.perf_counter() - t0
        end.record()
        end.synchronize()
        self.verdict = self.judge(host_s, start.elapsed_time(end) / 1e3)
        log.info("cherenkov: %s: CUDA graphs %s", self.name, self.verdict)
        if not self.verdict.use:
            self.disabled = True
        return outs

    def _release(self) -> None:
        if self.group is not None:
            self.group.forget(self)
        self.graph, self.static_inputs, self.static_outputs, self.owned = None, [], [], []

    def _run_and_capture(self, inputs, ptrs) -> list:
        """This call's result, computed by running the plan as usual; then the capture.

        Capturing records the plan without running it, so the call runs exactly once: a plan
        that updates its inputs in place (an optimizer step, running statistics) must not be
        applied twice on the call that captures it."""
        if self.captures >= MAX_CAPTURES:
            log.warning("cherenkov: %s: inputs keep moving; running without CUDA graphs",
                        self.name)
            self.disabled = True
            return self.run_plan(inputs)
        self.captures += 1
        prev = self.prev_ptrs or [None] * len(ptrs)
        self.static_slots = [p is not None and p == q for p, q in zip(ptrs, prev)]
        self.input_storages = [t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor)
                               else None for t in inputs]
        copied = [t for t, keep in zip(inputs, self.static_slots)
                  if isinstance(t, torch.Tensor) and not keep]
        why = next(filter(None, map(_uncopyable, copied)), None)
        if why is not None:
            log.info("cherenkov: %s not captured: an input that changes address between calls "
                     "%s", self.name, why)
            self.disabled = True
            return self.run_plan(inputs)
        # the copied slots' buffers, laid out as the plan was compiled for (strides and
        # storage offset); their values now do not matter: each replay copies in
        self.static_inputs = [t if (not isinstance(t, torch.Tensor) or keep) else _same_layout(t)
                              for t, keep in zip(inputs, self.static_slots)]
        originals, outs = None, None
        if self._pooled():          # capture first; the call's result is the first replay
            originals = list(inputs)
            inputs.clear()
            for t, buffer, keep in zip(originals, self.static_inputs, self.static_slots):
                if isinstance(t, torch.Tensor) and not keep:
                    buffer.copy_(t)
        else:
            outs = self.run_plan(inputs)
        try:
            graph = torch.cuda.CUDAGraph()
            device = torch.cuda.current_device()
            pool = None if self.group is None else self.group.handle(device)
            # pooled: on the stream its warm-ups freed their blocks on
            stream = self.group.stream(device) if self._pooled() else None
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                outputs = self.run_plan(list(self.static_inputs))
        except Exception as e:  # noqa: BLE001 -- capture is an optimization, never a failure
            log.warning("cherenkov: CUDA graph capture of %s failed (%s); running without",
                        self.name, e)
            self.disabled = True
            self._release()
            return outs if originals is None else self.run_plan(originals)
        self.graph = graph
        self.captured_ptrs = ptrs
        # keep only the copies: holding a static input (a forward graph's output read in place
        # by its backward) would look like a holder to that forward's liveness check forever
        self.static_inputs = [None if keep else t
                              for t, keep in zip(self.static_inputs, self.static_slots)]
        self.static_outputs = outputs
        # outputs on a read-in-place input's storage are the caller's own tensors (the plan
        # writes them only with the in-place updates it makes on every call): not watched.
        # Outputs on the graph's buffers -- its pool, and the copied inputs' buffers, which
        # each replay overwrites -- are
        callers = {p for p, keep in zip(self.input_storages, self.static_slots)
                   if keep and p is not None}
        seen, self.owned, self.copied_out = set(), [], set()
        for i, o in enumerate(outputs):
            if isinstance(o, torch.Tensor):
                key = o.untyped_storage().data_ptr()
                if key in callers:
                    continue
                if o.numel() <= COPY_OUT_ELEMENTS and not o._is_view() and (
                        self.caller_outputs is None or i < self.caller_outputs):
                    self.copied_out.add(i)
                elif key not in seen:
                    seen.add(key)
                    self.owned.append(o)
        self.baseline = storage_uses(self.owned)
        if self.group is not None:
            self.group.captured(self)
        log.info("cherenkov: %s captured (capture %d): %d inputs read in place, %d copied "
                 "before each replay (%.1f MB)", self.name, self.captures,
                 sum(self.static_slots), len(copied),
                 sum(t.numel() * t.element_size() for t in copied) / 1e6)
        if originals is not None:
            del originals
            return self._replay()
        return outs
