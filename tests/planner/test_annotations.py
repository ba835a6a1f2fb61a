"""cherenkov.shard annotations: recorded on parameters, read off built-in models in the
planner's layout, honoured by the sharding MILP, and rejected clearly when they cannot be."""
import pytest
import torch

import cherenkov
from cherenkov import Replicate, Shard
from cherenkov.hw import cluster
from cherenkov.ir.placement import Partial
from cherenkov.models import GPT, Llama, ModelConfig, preset
from cherenkov.parallel.annotate import layer_placements
from cherenkov.planner.intra_layer import AnnotationError
from cherenkov.planner.search import Infeasible

TINY_LLAMA = ModelConfig("llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=64,
                         seq=32, name="tiny")


def meta_model(cls, cfg):
    with torch.device("meta"):
        return cls(cfg)


def test_shard_records_and_returns_the_tensor_and_rejects_bad_placements():
    w = torch.nn.Parameter(torch.zeros(4, 3))
    assert cherenkov.shard(w, [Shard(0)]) is w
    with pytest.raises(ValueError, match="exactly one"):
        cherenkov.shard(w, [Shard(0), Replicate()])
    with pytest.raises(TypeError, match="partial"):
        cherenkov.shard(w, [Partial()])
    with pytest.raises(ValueError, match="Shard\\(2\\) of a 2-d"):
        cherenkov.shard(w, Shard(2))


def test_layer_placements_in_the_planners_layout():
    """nn.Linear weights are [out, in]; the planner's are [in, out]: Shard(0) (output
    features) reads as Shard(1). Llama's wq/wk/wv are the planner's one qkv matmul."""
    model = meta_model(Llama, TINY_LLAMA)
    for block in model.layers:
        for w in (block.attention.wq, block.attention.wk, block.attention.wv):
            cherenkov.shard(w.weight, [Shard(0)])
        cherenkov.shard(block.feed_forward.w2.weight, [Shard(1)])
        cherenkov.shard(block.attention_norm.weight, [Replicate()])
    assert layer_placements(model) == {"qkv.w": Shard(1), "fc2.w": Shard(0), "ln1.w": Replicate()}


def test_annotations_that_disagree_are_rejected():
    model = meta_model(Llama, TINY_LLAMA)
    for block in model.layers:
        cherenkov.shard(block.attention.wq.weight, [Shard(0)])
        cherenkov.shard(block.attention.wk.weight, [Shard(1)])
    with pytest.raises(ValueError, match="one matmul to the planner"):
        layer_placements(model)
    model = meta_model(Llama, TINY_LLAMA)
    cherenkov.shard(model.layers[0].feed_forward.w1.weight, [Shard(0)])
    with pytest.raises(ValueError, match="annotate every block alike"):
        layer_placements(model)
    model = meta_model(Llama, TINY_LLAMA)
    cherenkov.shard(model.output.weight, [Shard(0)])
    with pytest.raises(ValueError, match="only transformer-block weights"):
        layer_placements(model)


def test_planner_honours_a_column_parallel_annotation():
    """GPT-2 with a large batch on one node plans pure data parallelism; annotating the MLP's
    up projection column-parallel makes the planner use tensor parallelism with that split,
    choosing everything else itself."""
    model = meta_model(GPT, preset("gpt2"))
    free = cherenkov.plan(model, "8xH100", 512, 1024)
    assert free.plan.choice.tp == 1
    for block in model.h:
        cherenkov.shard(block.mlp.c_fc.weight, [Shard(0)])
    pinned = cherenkov.plan(model, "8xH100", 512, 1024)
    assert pinned.plan.choice.tp > 1
    fc1 = pinned.plan.layer.chosen["fc1"]
    assert fc1.weights[0] == Shard(1) and fc1.name == "column"
    assert pinned.step_time_s >= free.step_time_s * 0.999     # a constraint never helps


def test_impossible_annotations_say_why():
    model = meta_model(GPT, preset("gpt2"))
    for block in model.h:
        cherenkov.shard(block.mlp.c_fc.weight, [Shard(0)])
    with pytest.raises(Infeasible, match="tp is fixed to 1"):
        cherenkov.plan(model, "8xH100", 512, 1024, tp=1)
    model = meta_model(GPT, preset("gpt2"))
    for block in model.h:
        cherenkov.shard(block.ln_1.weight, [Shard(0)])       # norms keep their weights whole
    with pytest.raises(AnnotationError, match="ln1"):
        cherenkov.plan(model, cluster("8xH100"), 512, 1024)
