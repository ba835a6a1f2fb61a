"""Replay per-device programs on a timeline: streams, dependencies, overlap, memory.

A program is a list of `Task`s. Each device has one compute stream and one communication
stream per topology level ("intra" for NVLink, "inter" for the fabric); a stream runs its
tasks in program order, one at a time, like a CUDA stream. A task starts when its stream is
free and every task it depends on has finished:

    start = max(end of the previous task on its stream, end of each dependency)

so communication hides under computation exactly when the dependency graph lets it. A task
allocates `alloc` bytes when it starts and frees `free` bytes when it ends; with each
device's static bytes (weights, grads, optimizer states) this gives the memory timeline.

Each device's step time splits into compute (its compute stream busy with model work),
exposed communication (compute stream idle waiting for its own collectives), bubble (idle
waiting for another pipeline stage) and other (optimizer step, idle waiting on nothing).

    >>> tl = simulate([Task("a", 0, "compute", 2.0), Task("c", 0, "intra", 3.0, deps=(0,)),
    ...                Task("b", 0, "compute", 2.0)])
    >>> tl.step_time        # b runs while c communicates: 2 + max(2, 3)
    5.0
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

COMPUTE_CATEGORIES = ("compute", "recompute")


@dataclass(slots=True)
class Task:
    name: str
    device: int
    stream: str                 # "compute" | "intra" | "inter"
    seconds: float
    deps: tuple[int, ...] = ()  # indices of tasks (in the same list) that must finish first
    category: str = "compute"   # compute | recompute | comm | p2p | optimizer
    alloc: float = 0.0          # bytes allocated at start
    free: float = 0.0           # bytes freed at end
    nbytes: float = 0.0         # for collectives: the whole buffer
    axis: str = ""


@dataclass
class Timeline:
    tasks: list[Task]
    start: list[float]
    end: list[float]
    static_memory: dict[int, float] = field(default_factory=dict)

    @property
    def step_time(self) -> float:
        return max(self.end, default=0.0)

    @property
    def devices(self) -> list[int]:
        return sorted({t.device for t in self.tasks} | set(self.static_memory))

    def memory_curve(self, device: int) -> list[tuple[float, float]]:
        """(time, bytes in use) after each allocation or free on `device`."""
        events = []
        for i, t in enumerate(self.tasks):
            if t.device != device:
                continue
            if t.alloc:
                events.append((self.start[i], 1, t.alloc))
            if t.free:
                events.append((self.end[i], 0, -t.free))  # frees sort before allocs at a tie
        events.sort()
        level = self.static_memory.get(device, 0.0)
        curve = [(0.0, level)]
        for time, _, delta in events:
            level += delta
            curve.append((time, level))
        return curve

    def peak_memory(self, device: int) -> float:
        return max(b for _, b in self.memory_curve(device))

    def breakdown(self, device: int) -> dict[str, float]:
        """compute + exposed_comm + bubble + other == step_time for this device."""
        out = {"compute": 0.0, "exposed_comm": 0.0, "bubble": 0.0, "other": 0.0}
        ids = [i for i, t in enumerate(self.tasks) if t.device == device and t.stream == "compute"]
        ids.sort(key=lambda i: self.start[i])
        clock = 0.0
        for i in ids:
            gap = self.start[i] - clock
            if gap > 1e-15:
                out[self._gap_kind(i, device)] += gap
            t = self.tasks[i]
            out["compute" if t.category in COMPUTE_CATEGORIES else "other"] += t.seconds
            clock = self.end[i]
        tail = self.step_time - clock
        if tail > 1e-15:  # after its last kernel: own collectives still running, then waiting
            own = max((self.end[j] for j, t in enumerate(self.tasks)
                       if t.device == device and t.stream != "compute"
                       and t.category != "p2p"), default=clock)
            comm = max(0.0, min(own, self.step_time) - clock)
            out["exposed_comm"] += comm
            out["bubble"] += tail - comm
        return out

    def _gap_kind(self, i: int, device: int) -> str:
        deps = self.tasks[i].deps
        if not deps:
            return "other"
        gate = max(deps, key=lambda j: self.end[j])
        g = self.tasks[gate]
        if g.device != device or g.category == "p2p":
            return "bubble"
        return "exposed_comm" if g.stream != "compute" else "other"


def simulate(tasks: list[Task], static_memory: dict[int, float] | None = None) -> Timeline:
    """List-schedule `tasks`: each stream in program order, each task after its dependencies."""
    n = len(tasks)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    last_on_stream: dict[tuple[int, str], int] = {}
    for i, t in enumerate(tasks):
        preds = set(t.deps)
        key = (t.device, t.stream)
        if key in last_on_stream:
            preds.add(last_on_stream[key])
        last_on_stream[key] = i
        for j in preds:
            if not 0 <= j < n or j == i:
                raise ValueError(f"task {i} ({t.name}) depends on invalid task {j}")
            succ[j].append(i)
        indeg[i] = len(preds)
    start, end = [0.0] * n, [0.0] * n
    ready_at = [0.0] * n
    heap = [(0.0, i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    done = 0
    while heap:
        _, i = heapq.heappop(heap)
        start[i] = ready_at[i]
        end[i] = start[i] + tasks[i].seconds
        done += 1
        for k in succ[i]:
            ready_at[k] = max(ready_at[k], end[i])
            indeg[k] -= 1
            if indeg[k] == 0:
                heapq.heappush(heap, (ready_at[k], k))
    if done != n:
        stuck = next(tasks[i].name for i in range(n) if indeg[i] > 0)
        raise ValueError(f"the programs deadlock: {n - done} tasks never become ready "
                         f"(first: {stuck!r})")
    return Timeline(tasks, start, end, dict(static_memory or {}))
