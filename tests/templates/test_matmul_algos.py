"""cuBLASLt algorithm choice (templates/matmul_algos.py, templates/cublaslt.py) on the CPU:
which calls it takes, how cuBLAS sees row-major operands, and the timing verdict's rules
(the GPU runs are in tests/gpu/test_matmul_algos_gpu.py)."""
import pytest
import torch

from cherenkov.config import Config
from cherenkov.ir.graph import TensorMeta
from cherenkov.templates import cublaslt, matmul_algos
from cherenkov.templates.matmul_algos import MARGIN, TORCH, pick, problem_of_node

aten = torch.ops.aten
CUDA = torch.device("cuda", 0)


def meta(shape, dtype=torch.bfloat16, stride=None):
    return TensorMeta(tuple(shape), dtype, CUDA, stride)


def test_row_major_operands_as_cublas_sees_them():
    # row-major (k, n): column-major (n, k), untransposed, leading dimension n
    assert cublaslt.operand_layout(768, 3072, (3072, 1)) == (cublaslt.OP_N, 3072, 768, 3072)
    # a transposed weight view (k, n) with strides (1, k): column-major (k, n), transposed
    assert cublaslt.operand_layout(768, 3072, (1, 768)) == (cublaslt.OP_T, 768, 3072, 768)
    # a padded row (leading dimension past the row) is fine; no unit stride is not
    assert cublaslt.operand_layout(4, 8, (16, 1)) == (cublaslt.OP_N, 8, 4, 16)
    assert cublaslt.operand_layout(4, 8, (16, 2)) is None


def test_problem_of_mm_and_addmm():
    a, w_t, out = meta((64, 32)), meta((32, 48), stride=(1, 32)), meta((64, 48))
    p = problem_of_node(aten.mm.default, [a, w_t], out, CUDA)
    assert (p.m, p.n, p.k, p.a_strides, p.b_strides, p.epilogue) == \
        (64, 48, 32, (32, 1), (1, 32), "none")
    q = problem_of_node(aten.addmm.default, [meta((48,)), a, w_t], out, CUDA)
    assert q.epilogue == "bias" and q.dtype == torch.bfloat16


@pytest.mark.parametrize("case", ["cpu", "fp32", "bias 2-d", "transposed out", "bmm",
                                  "mixed dtypes"])
def test_calls_left_to_torch(case):
    a, b, out, target = meta((64, 32)), meta((32, 48)), meta((64, 48)), aten.mm.default
    metas, device = [a, b], CUDA
    if case == "cpu":
        device = torch.device("cpu")
    elif case == "fp32":
        a, b, out = (meta(m.shape, torch.float32) for m in (a, b, out))
        metas = [a, b]
    elif case == "bias 2-d":
        target, metas = aten.addmm.default, [meta((64, 48)), a, b]
    elif case == "transposed out":
        out = meta((64, 48), stride=(1, 64))
    elif case == "bmm":
        target = aten.bmm.default
    elif case == "mixed dtypes":
        metas = [meta((64, 32), torch.float16), b]
    assert problem_of_node(target, metas, out, device) is None


def _clock(times):
    """Fake timing: a run's time is looked up by the label it returns."""
    return lambda run: times[run()]


def _runs(*labels):
    return [(k, lambda k=k: k, lambda k=k: k) for k in labels]


def test_pick_takes_the_fastest_candidate_that_beats_torch_by_the_margin():
    times = {"ref": 1.0, "a": 0.99, "b": 0.90, "c": 0.80}
    same = lambda got, expected: True                       # noqa: E731
    best, timings = pick(lambda: "ref", _runs("a", "b", "c"), "ref", _clock(times), same)
    assert best == "c" and timings == {TORCH: 1.0, "a": 0.99, "b": 0.90, "c": 0.80}
    # within the margin of torch's time: not worth leaving torch's call
    best, _ = pick(lambda: "ref", _runs("a"), "ref", _clock(times), same)
    assert times["a"] > MARGIN * times["ref"] and best is None


def test_pick_leaves_a_short_matmul_untried():
    times = {"ref": matmul_algos.MIN_MS / 2, "a": 0.0}
    best, timings = pick(lambda: "ref", _runs("a"), "ref", _clock(times),
                         lambda got, expected: True)
    assert best is None and list(timings) == [TORCH]


def test_pick_never_takes_a_wrong_or_failing_candidate():
    times = {"ref": 1.0, "wrong": 0.1, "right": 0.9}

    def fails():
        raise RuntimeError("cuBLASLt cublasLtMatmul failed with status 7")
    runs = _runs("wrong") + [("fails", fails, fails)] + _runs("right")
    best, timings = pick(lambda: "ref", runs, "ref", _clock(times),
                         lambda got, expected: got != "wrong")
    assert best == "right"
    assert timings["wrong"] == "wrong result" and timings["fails"] == "RuntimeError"


def test_operands_without_a_unit_stride_run_torchs_call():
    planned = cublaslt.Problem(8, 6, 4, (4, 1), (6, 1), torch.bfloat16, "none")
    a = torch.zeros(8, 8, dtype=torch.bfloat16)[:, ::2]          # strides (8, 2)
    b = torch.zeros(4, 6, dtype=torch.bfloat16)
    assert matmul_algos.for_operands(a, b, planned) is None


def test_no_library_off_the_gpu():
    if torch.cuda.is_available():
        pytest.skip("a machine with CUDA")
    assert cublaslt.library() is None
    assert cublaslt.candidates(cublaslt.Problem(64, 48, 32, (32, 1), (48, 1), torch.bfloat16,
                                                "none")) == []


def test_config_switch(monkeypatch):
    assert Config().matmul_algos is False
    monkeypatch.setenv("CHERENKOV_MATMUL_ALGOS", "1")
    assert Config.from_env().matmul_algos is True


def test_problem_of_a_widened_product():
    # mm.dtype(a, b, float32): bf16 operands, the fp32 accumulator written out
    a, b = meta((768, 4096), stride=(1, 768)), meta((4096, 3072))
    out = meta((768, 3072), torch.float32)
    p = problem_of_node(aten.mm.dtype, [a, b], out, CUDA)
    assert (p.m, p.n, p.k, p.dtype, p.out_dtype, p.d_dtype, p.epilogue) == \
        (768, 3072, 4096, torch.bfloat16, torch.float32, torch.float32, "none")
    assert matmul_algos.problem_key(p) != matmul_algos.problem_key(
        problem_of_node(aten.mm.default, [a, b], meta((768, 3072)), CUDA))
    # an output dtype that is not the fp32 accumulator's, or mm writing fp32: torch's call
    assert problem_of_node(aten.mm.dtype, [a, b], meta((768, 3072)), CUDA) is None
    assert problem_of_node(aten.mm.default, [a, b], out, CUDA) is None


def test_pick_times_contenders_in_rotating_rounds():
    # the reference's first timing (right after its first call) reads slow: the verdict
    # comes from the medians of the rounds, where it is timed as often as the rest
    calls = {"ref": 0}
    order = []

    def clock(run):
        label = run()
        order.append(label)
        if label == "ref":
            calls["ref"] += 1
            return 2.0 if calls["ref"] == 1 else 1.0        # slow only the first time
        return {"a": 0.99, "b": 1.5}[label]
    same = lambda got, expected: True                       # noqa: E731
    best, timings = pick(lambda: "ref", _runs("a", "b"), "ref", clock, same)
    assert best is None and timings[TORCH] == 1.0 and timings["a"] == 0.99
    # b (over KEEP_WITHIN of the fastest after round one) is timed once; a and torch in
    # every round, each round starting with another contender
    assert order.count("b") == 1 and order.count("a") == matmul_algos.ROUNDS
    assert order[1:4] == ["ref", "a", "b"] and order[4] == "a"


def test_reps_follow_the_matmuls_length():
    assert matmul_algos.reps_for(0.1) == matmul_algos.REPS
    assert matmul_algos.reps_for(2.0) == matmul_algos.MIN_REPS


def test_the_heuristics_first_is_a_reference_too():
    # torch's call read slow, the same algorithm called directly (ws#0) did not: a
    # candidate must beat ws#0 by the margin as well, and ws#0 itself is never taken
    times = {"ref": 2.0, "ws#0": 1.0, "ws#4": 0.99, "ws#6": 0.90}
    same = lambda got, expected: True                       # noqa: E731
    best, timings = pick(lambda: "ref", _runs("ws#0", "ws#4"), "ref", _clock(times), same)
    assert best is None and timings["ws#0"] == 1.0
    best, _ = pick(lambda: "ref", _runs("ws#0", "ws#4", "ws#6"), "ref", _clock(times), same)
    assert best == "ws#6"


class _Event:
    """torch.cuda.Event stand-in: an event records which contender ran last; a start/end
    pair reads that contender's in-step time."""
    last = None
    times: dict = {}

    def __init__(self, enable_timing=False):
        self.label = None

    def record(self, stream=None):
        self.label = _Event.last

    def query(self):
        return True

    def elapsed_time(self, end):
        return _Event.times[end.label]


class _Lt:
    def __init__(self, label):
        self.label = label

    def __call__(self, a, b, out, bias=None, stream=None):
        _Event.last = self.label
        out.copy_(a @ b)


@pytest.fixture
def in_step(monkeypatch, tmp_path):
    from cherenkov.templates import autotune
    monkeypatch.setenv("CHERENKOV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_MEMORY", {})
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)
    capturing = {"now": False}
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing["now"])
    labels = ["ws#0", "ws#1", "ws#2", "nows#0"]
    monkeypatch.setattr(matmul_algos, "_candidates", lambda p: [(k, _Lt(k)) for k in labels])
    alone = {"ref": 1.0, "ws#0": 1.0, "ws#1": 0.8, "ws#2": 0.9, "nows#0": 1.1}

    def clock(run, warmup=0, reps=0):                     # time alone: by who ran
        run()
        return alone[_Event.last]
    monkeypatch.setattr(matmul_algos, "events_median_ms", clock)
    return capturing, alone


def test_the_step_decides_among_the_fastest_alone(in_step):
    # timed alone ws#1 led; in the step it is the slowest: ws#2 is kept
    _Event.times = {"ws#0": 1.0, "ws#1": 1.05, "ws#2": 0.9}
    algo = matmul_algos.AlgoMatmul(cublaslt.Problem(8, 6, 4, (4, 1), (6, 1), torch.float32,
                                                    "none"))
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    used = []

    def torch_call():
        used.append(TORCH)
        _Event.last = "ref"
        return a @ b

    def step():
        got = algo.run(a, b, None, torch_call, lambda: torch.empty(8, 6))
        torch.testing.assert_close(got, a @ b)           # every run computes the product
        used.append(_Event.last)

    step()
    # shortlist: the reference and the candidates faster than it alone (nows#0 is not)
    assert set(algo.samples) == {"ws#0", "ws#1", "ws#2"} and not algo.decided
    capturing, _ = in_step
    capturing["now"] = True                              # a capture tries and times nothing
    n = len(used)
    step()
    assert used[n:] == [TORCH, "ref"] and not algo.decided
    capturing["now"] = False
    for _ in range(3 * matmul_algos.SAMPLES - 1):
        step()
    step()                                               # the last times are read: decided
    assert algo.decided and algo.lt.label == "ws#2"
    problem, verdict, timings = matmul_algos.AlgoMatmul.tuned[-1]
    assert verdict == "ws#2" and timings[TORCH] == 1.0 and timings["ws#1"] == 1.05
    step()
    assert used[-1] == "ws#2"


def test_no_contender_ahead_of_the_reference_keeps_torchs_call(in_step):
    _, alone = in_step
    alone.update({"ws#1": 1.0, "ws#2": 1.2})              # none faster than ws#0 alone
    algo = matmul_algos.AlgoMatmul(cublaslt.Problem(8, 6, 4, (4, 1), (6, 1), torch.float32,
                                                    "bias"))
    a, b = torch.randn(8, 4), torch.randn(4, 6)

    def torch_call():
        _Event.last = "ref"
        return a @ b
    got = algo.run(a, b, None, torch_call, lambda: torch.empty(8, 6))
    torch.testing.assert_close(got, a @ b)
    assert algo.decided and algo.lt is None and matmul_algos.AlgoMatmul.tuned[-1][1] == TORCH
