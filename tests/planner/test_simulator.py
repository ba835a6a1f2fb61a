"""The simulator on tiny hand-made programs, and pipeline schedules against their formulas."""
import pytest

from cherenkov.planner.schedule import bubble_fraction, stage_order
from cherenkov.planner.simulator import Task, simulate


def test_overlap_when_dependencies_allow():
    # a(2) -> comm c(3) on a comm stream; b(2) does not need c: b hides under c.
    tl = simulate([Task("a", 0, "compute", 2.0), Task("c", 0, "intra", 3.0, deps=(0,), category="comm"),
                   Task("b", 0, "compute", 2.0)])
    assert tl.start == [0.0, 2.0, 2.0] and tl.step_time == 5.0
    assert tl.breakdown(0) == {"compute": 4.0, "exposed_comm": 1.0, "bubble": 0.0, "other": 0.0}


def test_no_overlap_when_consumer_needs_the_collective():
    tl = simulate([Task("a", 0, "compute", 2.0), Task("c", 0, "intra", 3.0, deps=(0,), category="comm"),
                   Task("b", 0, "compute", 2.0, deps=(1,))])
    assert tl.start == [0.0, 2.0, 5.0] and tl.step_time == 7.0
    assert tl.breakdown(0)["exposed_comm"] == 3.0


def test_streams_run_in_order_and_levels_are_independent():
    tasks = [Task("g0", 0, "inter", 4.0, category="comm"), Task("g1", 0, "inter", 1.0, category="comm"),
             Task("t0", 0, "intra", 1.0, category="comm")]
    tl = simulate(tasks)
    assert tl.start == [0.0, 4.0, 0.0] and tl.step_time == 5.0


def test_two_stage_pipeline_bubble_and_memory():
    # Stage 0 forward F (1s) -> send (0.5s) -> stage 1 forward (1s); stage 1 backward (2s),
    # send back (0.5s), stage 0 backward (2s). Activations: 10 bytes alive from F to B.
    t = [Task("F0", 0, "compute", 1.0, alloc=10), Task("s", 0, "p2p", 0.5, deps=(0,), category="p2p"),
         Task("F1", 1, "compute", 1.0, deps=(1,), alloc=7), Task("B1", 1, "compute", 2.0, free=7),
         Task("r", 1, "p2p", 0.5, deps=(3,), category="p2p"), Task("B0", 0, "compute", 2.0, deps=(4,), free=10)]
    tl = simulate(t, static_memory={0: 100, 1: 50})
    assert tl.step_time == 7.0
    assert tl.breakdown(0) == {"compute": 3.0, "exposed_comm": 0.0, "bubble": 4.0, "other": 0.0}
    assert tl.breakdown(1) == {"compute": 3.0, "exposed_comm": 0.0, "bubble": 4.0, "other": 0.0}
    assert tl.peak_memory(0) == 110 and tl.peak_memory(1) == 57
    assert tl.memory_curve(0)[-1] == (7.0, 100)


def test_deadlock_is_reported():
    with pytest.raises(ValueError, match="deadlock"):
        simulate([Task("a", 0, "compute", 1.0, deps=(1,)), Task("b", 0, "intra", 1.0, deps=(0,))])


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_schedule_bubbles_match_formula(schedule, v):
    """Equal stages with F=1, B=2 per chunk and free sends: step = (m + (pp-1)/v) * 3 / ... """
    pp, m = 4, 8
    f, b = 1.0 / v, 2.0 / v
    tasks, sends = [], {}
    orders = {p: stage_order(schedule, pp, m, v, p) for p in range(pp)}
    pos = {p: 0 for p in range(pp)}
    left = sum(map(len, orders.values()))
    while left:
        for p in range(pp):
            while pos[p] < len(orders[p]):
                ph, mb, c = orders[p][pos[p]]
                vs = c * pp + p
                need = (("F", vs - 1, mb) if ph == "F" and vs > 0 else
                        ("B", vs + 1, mb) if ph == "B" and vs < pp * v - 1 else None)
                if need and need not in sends:
                    break
                deps = (sends[need],) if need else ()
                tasks.append(Task(f"{ph}{mb}.{c}", p, "compute", f if ph == "F" else b, deps))
                sends[(ph, vs, mb)] = len(tasks) - 1
                pos[p] += 1
                left -= 1
    tl = simulate(tasks)
    ideal = m * 3.0
    assert tl.step_time == pytest.approx(ideal * (1 + bubble_fraction(schedule, pp, m, v)))


def test_zero3_backward_prefetches_the_next_layers_gather():
    """FSDP issues layer l-1's all-gather before layer l's reduce-scatter, so it overlaps
    layer l's backward: the timeline shows each backward gather starting before the previous
    layer's reduce-scatter, and the closed-form estimate (which assumes that overlap) agrees
    with the simulation."""
    from cherenkov.hw import cluster
    from cherenkov.models import preset
    from cherenkov.planner.program import build_tasks
    from cherenkov.planner.search import Planner, Request
    fixed = {"dp": 128, "tp": 1, "pp": 1, "cp": 1, "zero": 3, "microbatch": 1,
             "recompute": "none", "schedule": "1f1b"}
    planner = Planner(Request(preset("llama3-8b"), cluster("16x8xH100"), 512, 8192, fixed))
    (estimate, plan), = planner.search()[0]
    tasks, static = build_tasks(plan, planner.costs)
    tl = simulate(tasks, static)
    start = {t.name: tl.start[i] for i, t in enumerate(tasks)}
    layers = plan.model.layers
    for l in range(1, layers):
        assert start[f"B0.ag0.{l - 1}"] <= start[f"B0.reduce_scatter0.{l}"]
    assert abs(estimate / tl.step_time - 1) < 0.05
