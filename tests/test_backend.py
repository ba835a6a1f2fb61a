"""The backend's promises: graph breaks and unlowered ops keep eager's answers; a graph that
fails to compile runs in eager with a warning (strict raises); new shapes recompile."""
import pytest
import torch

import cherenkov
import cherenkov.backend as backend
from cherenkov.config import Config


def test_graph_break_and_data_dependent_branch_match_eager(capsys):
    def fn(x):
        y = x.sin() * 2
        print("inside")
        if y.sum() > 0:
            return y.exp()
        return y.cos()
    x = torch.randn(17)
    torch.testing.assert_close(cherenkov.compile(fn, strict=True)(x), fn(x))
    torch.testing.assert_close(cherenkov.compile(fn, strict=True)(-x.abs()), fn(-x.abs()))


def test_op_without_lowering_runs_as_extern_with_reason():
    start = len(backend.COMPILED)
    fn = lambda x: torch.special.i1(x.exp()) + 1  # noqa: E731
    x = torch.randn(33)
    torch.testing.assert_close(cherenkov.compile(fn, strict=True)(x), fn(x))
    externs = [e for _, info in backend.COMPILED[start:] for e in info.externs]
    assert any("i1" in op and "no lowering" in reason for op, reason in externs)


def _runs_in_eager_with_a_warning(reason: str):
    """A small function compiled (not strict) under a planted failure: eager's result, with a
    warning naming the reason. Returns the function and its input for further calls."""
    fn = lambda x: x.tanh() + 1  # noqa: E731
    x = torch.randn(5)
    with pytest.warns(UserWarning, match=reason):
        out = cherenkov.compile(fn)(x)
    torch.testing.assert_close(out, fn(x))
    torch._dynamo.reset()
    return fn, x


def test_failure_runs_in_eager_with_a_warning(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("planted failure")
    monkeypatch.setattr(backend, "compile_fx", boom)
    fn, x = _runs_in_eager_with_a_warning("planted failure")
    with pytest.raises(Exception, match="planted failure"):
        cherenkov.compile(fn, strict=True)(x)


def test_a_first_run_that_fails_runs_in_eager_unless_it_updates_inputs(monkeypatch):
    """A compiled variant that raises on its first run (a kernel launch failing, say) hands
    the call to eager with a warning. A graph that writes into its inputs may have done so in
    part: the inputs it updates are copied before the first run and restored (eager then
    updates them once) -- unless they are too big to copy: that raises rather than apply an
    update twice."""
    from cherenkov import backend
    from cherenkov.runtime import compiled_graph

    def boom(self, inputs):
        inputs[0].mul_(3)                 # a partial update, then the failure
        raise RuntimeError("planted run failure")
    monkeypatch.setattr(compiled_graph.CompiledGraph, "__call__", boom)
    _runs_in_eager_with_a_warning("planted run failure")

    def update(x):
        x.mul_(2)
        return x + 1
    x = torch.randn(5)
    want = x * 2
    with pytest.warns(UserWarning, match="planted run failure"):
        out = cherenkov.compile(update)(x)
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(out, want + 1)
    torch._dynamo.reset()
    monkeypatch.setattr(backend, "SNAPSHOT_MAX_BYTES", 0)
    with pytest.raises(RuntimeError, match="planted run failure"):
        cherenkov.compile(update)(torch.randn(5))


def test_new_shapes_recompile_and_stay_correct():
    fn = lambda x: torch.softmax(x * 3, -1)  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True, dynamic=False)
    for shape in [(4, 10), (3, 7), (4, 10), (2, 33)]:
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), fn(x))


def test_config_from_env_and_unknown_options():
    cfg = Config.from_env({"CHERENKOV_STRICT": "1", "CHERENKOV_CACHE_SIZE": "3",
                           "CHERENKOV_DUMP": "/tmp/d"})
    assert cfg.strict and cfg.cache_size == 3 and cfg.dump_dir == "/tmp/d"
    with pytest.raises(TypeError, match="unknown Cherenkov option"):
        cherenkov.compile(lambda x: x, not_an_option=1)
    with pytest.raises(ValueError, match="CHERENKOV_CACHE_SIZE"):
        Config.from_env({"CHERENKOV_CACHE_SIZE": "many"})


@pytest.mark.parametrize("options, error, match", [
    ({"fusion": "false"}, TypeError, "fusion"), ({"strict": "0"}, TypeError, "strict"),
    ({"cache_size": "8"}, TypeError, "cache_size"), ({"cache_size": 2.5}, TypeError, "cache_size"),
    ({"memory_budget": "0.5"}, TypeError, "memory_budget"),
    ({"compile_workers": -5}, ValueError, "compile_workers"),
    ({"device": "bogus"}, ValueError, "h200"),
])
def test_bad_option_values_name_the_option_at_compile(options, error, match):
    """A string "false" turned fusion on, "0" strict on; an unknown preset ran every graph in
    eager at its first call."""
    with pytest.raises(error, match=match):
        cherenkov.compile(lambda x: x, **options)


def test_environment_flags_are_checked_and_explicit_options_win():
    with pytest.raises(ValueError, match="CHERENKOV_FUSION"):
        Config.from_env({"CHERENKOV_FUSION": "enabled"})       # read as False before
    assert not Config.from_env({"CHERENKOV_FUSION": "off"}).fusion
    assert Config.from_env({"CHERENKOV_CACHE_SIZE": "0"}, cache_size=4).cache_size == 4


def test_torch_compile_options_dict_reaches_the_config():
    """torch.compile(backend="cherenkov", options={...}) hands the options as one dict."""
    fn = lambda x: (x * 2).sum(0)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="cherenkov", options={"fusion": False, "strict": True})
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), fn(x))
    from cherenkov.backend import COMPILED
    assert COMPILED[-1].info.kernels           # compiled by Cherenkov, not run in eager


def test_an_unwritable_dump_dir_keeps_the_compiled_graph(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    fn = lambda x: x.tanh() + 1
    torch._dynamo.reset()
    x = torch.randn(5)
    with pytest.warns(UserWarning, match="dump_dir"):
        out = cherenkov.compile(fn, strict=True, dump_dir=str(blocker / "d"))(x)
    torch.testing.assert_close(out, fn(x))


def test_backend_name_is_registered():
    fn = torch.compile(lambda x: x.relu() * 2, backend="cherenkov")
    x = torch.randn(10)
    torch.testing.assert_close(fn(x), x.relu() * 2)


def test_dump_writes_every_stage(tmp_path):
    fn = lambda x: torch.softmax(x, -1)  # noqa: E731
    cherenkov.compile(fn, strict=True, dump_dir=str(tmp_path))(torch.randn(4, 9))
    graph_dir = next(tmp_path.iterdir())
    names = {p.name for p in graph_dir.iterdir()}
    assert {"0_fx_graph.txt", "1_ir_lowered.txt", "2_ir_after_cse.txt", "3_kernels.txt",
            "summary.json"} <= names
    assert any(n.startswith("kernel_") and n.endswith((".py", ".cpp")) for n in names)


def test_cuda_graph_option_is_skipped_cleanly_on_cpu():
    fn = lambda x: (x * 2).sigmoid().sum(-1)  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True, cuda_graphs=True)
    for _ in range(3):
        x = torch.randn(4, 6)
        torch.testing.assert_close(compiled(x), fn(x))


def test_intermediate_buffers_are_released_after_last_use():
    from cherenkov.compiler import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx
    fn = lambda x, w: torch.softmax(x @ w, -1) @ w.t()  # noqa: E731
    x, w = torch.randn(5, 7), torch.randn(7, 7)
    gm = make_fx(fn)(x, w)
    compiled, _ = compile_fx(gm, [x, w], Config(strict=True))
    freed = {s for step in compiled.steps for s in step.frees}
    assert freed, "no intermediate buffer is ever released"
    assert not freed & {s for s in compiled.output_slots if s is not None}
    torch.testing.assert_close(compiled([x, w])[0], fn(x, w))


def test_inputs_with_a_storage_offset_are_read_from_the_right_place():
    base = torch.arange(20.0)
    fn = lambda a: a * 2 + 1  # noqa: E731
    torch.testing.assert_close(cherenkov.compile(fn, strict=True)(base[3:13]), fn(base[3:13]))
    m = torch.randn(6, 9)
    g = lambda a: a.t().exp().sum(-1)  # noqa: E731
    torch.testing.assert_close(cherenkov.compile(g, strict=True)(m[1:, 2:]), g(m[1:, 2:]))


def test_row_values_broadcast_into_a_fused_store():
    fn = lambda x: x.sum(-1, keepdim=True) + torch.zeros(4, 6)  # noqa: E731
    x = torch.randn(4, 6)
    torch.testing.assert_close(cherenkov.compile(fn, strict=True)(x), fn(x))
    fn2 = lambda x: (x.sum(-1, keepdim=True) + torch.zeros(4, 6), x.softmax(-1))  # noqa: E731
    torch.testing.assert_close(cherenkov.compile(fn2, strict=True)(x), fn2(x))


def test_cost_report_predicts_and_measures_every_kernel():
    fn = lambda x, r: torch.nn.functional.layer_norm(x + r, (40,)).relu()  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True)
    x, r = torch.randn(16, 40), torch.randn(16, 40)
    compiled(x, r)
    cherenkov.profile_next_call()
    torch.testing.assert_close(compiled(x, r), fn(x, r))
    reports = cherenkov.cost_reports()
    assert reports
    report = list(reports.values())[-1]
    assert report.lines and all(line.cost.bytes > 0 and line.cost.time_s > 0
                                for line in report.lines)
    assert all(line.measured_s is not None and line.measured_s > 0 for line in report.lines)
    assert "predicted" in str(report)


def test_view_chains_become_one_as_strided_and_stay_correct():
    """Views of an input (transpose, a copying reshape, a slice) and of a computed value
    (exp, then transposed), each read by a matmul."""
    def fn(a, w, w2):
        return a.t().reshape(4, 6)[:, 1:5] @ w, a.exp().t() @ w2
    a, w, w2 = torch.randn(6, 4), torch.randn(4, 3), torch.randn(6, 6)
    for got, want in zip(cherenkov.compile(fn, strict=True)(a, w, w2), fn(a, w, w2)):
        torch.testing.assert_close(got, want)


def test_identical_kernels_share_one_compiled_function():
    from cherenkov.compiler import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx
    fn = lambda a, b: (torch.softmax(a, -1) @ b, torch.softmax(b, -1) @ a)  # noqa: E731
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    from cherenkov.capture.decompositions import decomposition_table
    gm = make_fx(fn, decomposition_table=decomposition_table())(a, b)
    compiled, info = compile_fx(gm, [a, b], Config(strict=True, cpu_backend="triton"))
    sources = [k[3] for k in info.kernels]
    assert len(sources) == 2 and sources[0] == sources[1]   # same text, same function name


def test_an_input_is_freed_after_its_last_use_when_the_caller_hands_over_its_list():
    """AOTAutograd hands a backward its saved activations in a list it gives up: the plan
    empties the list and drops each input after its last use (peak memory)."""
    import weakref

    from cherenkov.compiler import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx
    fn = lambda x, w: (torch.relu(x) @ w).sin()  # noqa: E731
    x, w = torch.randn(6, 8), torch.randn(8, 5)
    gm = make_fx(fn)(x, w)
    compiled, _ = compile_fx(gm, [x, w], Config(strict=True))
    inputs = [x.clone(), w]
    alive = weakref.ref(inputs[0])
    seen = []
    last = compiled.steps[-1]
    run = last.run
    last.run = lambda env: (seen.append(alive() is None), run(env))
    out = compiled(inputs)
    assert inputs == [] and seen == [True]
    torch.testing.assert_close(out[0], fn(x, w))


def test_a_new_storage_offset_is_noticed_after_a_repeated_call():
    """Repeated calls take the last variant after one list comparison of input layouts; an
    input of the same shape and strides but another storage offset still gets its own
    variant (the kernels index from the storage start)."""
    base = torch.arange(40.0)
    fn = lambda a: a * 2 + 1  # noqa: E731
    compiled = cherenkov.compile(fn, strict=True, dynamic=False)
    for view in (base[:10], base[:10], base[7:17], base[7:17], base[:10]):
        torch.testing.assert_close(compiled(view), fn(view))


def test_matmul_with_a_transposed_stored_weight_calls_linear_without_a_view_step():
    from cherenkov.compiler import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx
    fn = lambda x, w, b: (torch.nn.functional.linear(x, w, b), x @ w.t())  # noqa: E731
    x, w, b = torch.randn(6, 5), torch.randn(7, 5), torch.randn(7)
    compiled, _ = compile_fx(make_fx(fn)(x, w, b), [x, w, b], Config(strict=True))
    labels = [s.label for s in compiled.steps]
    assert labels.count("linear") == 2 and not any(s.kind == "view" for s in compiled.steps)
    for got, want in zip(compiled([x, w, b]), fn(x, w, b)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_compiled_graphs_are_freed_when_dynamo_drops_them():
    # a compiled graph owns its buffers (and on CUDA its graphs' memory pools): the process-wide
    # record of compiled graphs must not keep them alive once Dynamo lets go of them
    import gc
    import weakref
    start = len(backend.COMPILED)
    fn = cherenkov.compile(lambda x: (x * 3).relu() + 1, strict=True)
    x = torch.randn(64)
    torch.testing.assert_close(fn(x), (x * 3).relu() + 1)
    entries = backend.COMPILED[start:]
    graphs = [weakref.ref(g) for g, _ in entries]
    assert graphs and all(g() is not None for g in graphs)
    del fn
    torch._dynamo.reset()
    gc.collect()
    assert all(g() is None for g in graphs)
    assert all(info is not None and graph is None for graph, info in entries)


def test_memory_budget_needs_the_cherenkov_partitioner():
    with pytest.raises(ValueError, match="partitioner='cherenkov'"):
        cherenkov.compile(lambda x: x, memory_budget=0.5, partitioner="torch")
    cherenkov.compile(lambda x: x, memory_budget=0.5)     # the default partitioner takes it
