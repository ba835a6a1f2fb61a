"""The planner never answers a bad request with a plan, nor a plan with impossible numbers
(each case was a fuzzing find): requests are validated up front, naming the argument;
context parallelism counts each device's queries against the whole sequence; a plan's peak is
its fullest stage's and a plan that does not fit is never returned; a device with vector
rates only is derated like one with tensor cores."""
import dataclasses

import pytest

from cherenkov.hw import cluster
from cherenkov.models import ModelConfig, preset
from cherenkov.planner import Infeasible, Request, plan_training


@pytest.mark.parametrize("kwargs, match", [
    ({"global_batch": -8}, "global_batch"), ({"global_batch": 0}, "global_batch"),
    ({"seq": 0}, "seq"), ({"fixed": {"tp": 0}}, "tp"), ({"fixed": {"pp": -1}}, "pp"),
    ({"fixed": {"microbatch": 0}}, "microbatch"), ({"fixed": {"tensor_parallel": 8}}, "unknown"),
])
def test_bad_requests_name_the_argument(kwargs, match):
    args = {"model": preset("gpt2"), "cluster": cluster("8xH100"), "global_batch": 8,
            "seq": 1024} | kwargs
    with pytest.raises(ValueError, match=match):
        Request(**args)


def test_context_parallel_attention_is_counted_against_the_whole_sequence():
    p = plan_training(Request(preset("llama3-8b"), cluster("8xH100"), 8, 32768, {"cp": 8, "tp": 1}))
    assert 0 < p.mfu <= 1.0


def test_a_vector_only_device_is_derated_too():
    p = plan_training(Request(preset("gpt2"), cluster("1xcpu"), 8, 1024))
    assert 0 < p.mfu <= 1.0


def test_a_returned_plan_fits_in_every_stage():
    m = ModelConfig("llama", layers=10, hidden=4096, heads=32, vocab=1000, seq=4096, name="m10")
    cl = cluster("8xH100")
    cl = dataclasses.replace(cl, device=cl.device.replace(memory_bytes=9.44 * 2**30))
    fixed = dict(pp=4, tp=2, dp=1, microbatch=1, recompute="none", schedule="1f1b", zero=0)
    req = Request(m, cl, 8, 4096, fixed)
    p = plan_training(req)        # the uneven split's middle stage counted: a leaner layout
    assert p.peak_memory_bytes_per_device <= req.usable_memory
    with pytest.raises(Infeasible, match="usable"):         # and nothing at half the memory
        plan_training(dataclasses.replace(req, cluster=dataclasses.replace(
            cl, device=cl.device.replace(memory_bytes=4.7 * 2**30))))


def test_layouts_the_mesh_cannot_make_are_skipped():
    """3 nodes of 8 with a dp group over part of a node crashed in the collective model; a
    tp=3 layer whose embedding has no matching sharding escaped as InfeasibleLayer."""
    for cl, gb, seq in (("3x8xH100", 12, 1024), ("6xH100", 256, 2048)):
        try:
            p = plan_training(Request(preset("gpt2"), cluster(cl), gb, seq))
        except Infeasible as e:
            assert "fit" in str(e) or "layout" in str(e)
        else:
            assert 0 < p.mfu <= 1.0


@pytest.mark.parametrize("field", ["layers", "hidden", "heads", "vocab", "seq"])
def test_model_config_sizes_are_positive(field):
    with pytest.raises(ValueError, match=field):
        ModelConfig("llama", **({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                                 "seq": 64} | {field: 0}))


def test_cluster_tables_name_their_bad_fields():
    from cherenkov.hw.cluster import cluster_from_table
    for table, field in (({"node": "dgx-h100", "nodes": "4"}, "nodes"),
                         ({"name": 5, "gpus_per_node": 8, "device": "h100", "intra": "nvlink4"},
                          "name"),
                         ({"node": "dgx-h100", "nodes": 2, "gpus_per_node": 16}, "gpus_per_node")):
        with pytest.raises(ValueError, match=field):
            cluster_from_table(table)


@pytest.mark.parametrize("flags, match", [
    (["--efficiency", "1.5"], "efficiency"), (["--efficiency", "-0.5"], "efficiency"),
    (["--global-batch", "0"], "global_batch"), (["--seq", "0"], "seq"),
    (["--cluster", "8xFOO"], "FOO"), (["--model", "nope"], "nope"),
])
def test_plan_cli_rejects_bad_flags_without_a_traceback(flags, match, capsys):
    from cherenkov.cli import main
    args = ["plan", "--model", "gpt2", "--cluster", "8xH100", "--json"]
    for i in range(0, len(flags), 2):                 # a flag given twice: the later wins
        args += flags[i:i + 2]
    assert main(args) == 2
    out = capsys.readouterr().out
    assert '"error"' in out and match.lower() in out.lower()


def test_a_faster_link_never_loses_the_plan():
    """A 1.5x faster NVLink turned a feasible small-memory request Infeasible: the lean
    sharding's 1.25x-of-least budget picked heavier placements; the leanest is tried last."""
    m = ModelConfig("llama", layers=32, hidden=1024, heads=32, kv_heads=8, vocab=128256,
                    seq=4096, name="fz")
    base = cluster("4x8xH100")
    base = dataclasses.replace(base, device=base.device.replace(memory_bytes=0.8 * 2**30))
    p = plan_training(Request(m, base, 12, 1024))
    fast = dataclasses.replace(base, intra=base.intra.replace(bandwidth=base.intra.bandwidth * 1.5))
    q = plan_training(Request(m, fast, 12, 1024))
    assert q.step_time_s <= p.step_time_s * (1 + 1e-9)
