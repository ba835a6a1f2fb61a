"""cherenkov/bench/timing.py: input rotation and the CPU timer."""
from cherenkov.bench.timing import copies_for, cpu_median_s, rotating


def test_copies_span_twice_the_l2():
    l2 = 60 * 2**20
    assert copies_for(256 * 2**20, l2) == 1              # one copy is bigger than the L2
    assert copies_for(30 * 2**20, l2) == 4               # 4 x 30 MiB = 2 x 60 MiB
    assert copies_for(1, l2) == 8                        # capped
    assert copies_for(0, l2) == 1


def test_rotating_cycles_through_copies():
    seen = []
    thunk = rotating(lambda inputs: seen.append(inputs[0]), [("a",), ("b",), ("c",)])
    for _ in range(5):
        thunk()
    assert seen == ["a", "b", "c", "a", "b"]


def test_cpu_timer_returns_a_positive_median():
    calls = []
    t = cpu_median_s(lambda: calls.append(sum(range(1000))), reps=3)
    assert t > 0 and len(calls) == 4                    # one warm-up + three timed
