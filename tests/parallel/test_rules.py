"""Sharding rules + intra-layer MILP on hand-derived cases (a fixed alpha-beta cost stand-in)."""
from cherenkov.ir.placement import Partial, Replicate, Shard
from cherenkov.models import ModelConfig, preset
from cherenkov.parallel import layer_graph, layout, strategies
from cherenkov.parallel.redistribute import collective_kind
from cherenkov.planner.intra_layer import SolveOptions, solve_layer


class AlphaBeta:
    """Roofline and ring collectives with round numbers: 1 PFLOP/s, 3 TB/s, 450/50 GB/s links."""
    def kernel(self, flops, nbytes, tc, kind=""):
        return max(flops / (1e15 if tc else 6e13), nbytes / 3e12) + 4e-6

    def collective(self, kind, nbytes, g, spans, per_node=None):
        bw = 5e10 if spans else 4.5e11
        share = {"all_reduce": 2 * (g - 1) / g, "all_gather": (g - 1) / g,
                 "reduce_scatter": (g - 1) / g, "all_to_all": (g - 1) / g,
                 "send_recv": 1.0}[kind]
        return 1e-5 + share * nbytes / bw


class Node:
    world_size, gpus_per_node, name = 8, 8, "1x8"


def tp8():
    return layout(Node(), tp=8).axis("tp")


def test_redistribution_table():
    S0, S2, R, P = Shard(0), Shard(2), Replicate(), Partial()
    assert collective_kind(P, R) == "all_reduce"
    assert collective_kind(P, S0) == "reduce_scatter"
    assert collective_kind(S0, R) == "all_gather"
    assert collective_kind(S0, S2) == "all_to_all"
    assert collective_kind(R, S0) is None and collective_kind(S0, S0) is None


def test_matmul_rule_megatron_pairs():
    g = layer_graph(preset("gpt2"), 1, 1024)
    fc1 = next(op for op in g.ops if op.name == "fc1")
    by_name = {s.name: s for s in strategies(fc1, g, 8)}
    col, row = by_name["column"], by_name["row"]
    assert (col.inputs, col.output, col.weights[0], col.grads) == ((Replicate(),), Shard(2), Shard(1), (Partial(),))
    assert (row.inputs, row.output, row.weights[0], row.grads) == ((Shard(2),), Partial(), Shard(0), (Shard(2),))


def comms(items):
    return [(it[1].kind, it[2]) for it in items if it[0] == "comm"]


def test_megatron_column_then_row_with_replicated_residual():
    """Large weights, small batch, residual kept replicated: column->row, one all-reduce per
    block forward (after proj, after fc2) and one per block backward (into qkv, into fc1)."""
    cfg = ModelConfig("gpt", layers=1, hidden=8192, heads=64, vocab=1024, seq=2048)
    g = layer_graph(cfg, 1, 2048)
    sol = solve_layer(g, tp8(), AlphaBeta(), SolveOptions(fixed_io=Replicate()))
    names = {op: st.name for op, st in sol.chosen.items()}
    assert [names[o] for o in ("qkv", "attn", "proj", "fc1", "gelu", "fc2")] == \
        ["column", "heads", "row", "column", "features", "row"]
    assert comms(sol.forward) == [("all_reduce", "h1"), ("all_reduce", "h2")]
    assert comms(sol.backward) == [("all_reduce", "fc1"), ("all_reduce", "qkv")]
    assert sol.params_per_device < g.param_count / 7


def test_unconstrained_layer_gets_sequence_parallel_mlp():
    """Free to choose the residual's placement, the MLP is column->row with the all-reduce
    split into reduce-scatter + all-gather around sequence-sharded norms and residuals."""
    cfg = ModelConfig("gpt", layers=1, hidden=8192, heads=64, vocab=1024, seq=2048)
    sol = solve_layer(layer_graph(cfg, 1, 2048), tp8(), AlphaBeta(), SolveOptions())
    assert sol.input_placement == Shard(1) == sol.output_placement
    assert (sol.chosen["fc1"].name, sol.chosen["fc2"].name) == ("column", "row")
    assert ("reduce_scatter", "h2") in comms(sol.forward)
    assert ("all_gather", "fc1") in comms(sol.forward)


def test_milp_picks_data_parallel_for_small_model_large_batch():
    sol = solve_layer(layer_graph(preset("gpt2"), 64, 1024), tp8(), AlphaBeta(),
                      SolveOptions(microbatches=16))
    assert all(s.name == "batch" for s in sol.chosen.values())
    assert sol.input_placement == Shard(0)
    assert comms(sol.forward) == [] and sol.step_comm  # only per-step gradient all-reduces


def test_memory_budget_forces_weight_sharding():
    """With weights worth a large part of memory (ZeRO off, 64 bytes/param to exaggerate),
    a budget below the data-parallel solution's memory makes the MILP shard weights."""
    g = layer_graph(preset("gpt2"), 8, 1024)
    opts = dict(microbatches=16, state_bytes_per_param=64.0)
    free = solve_layer(g, tp8(), AlphaBeta(), SolveOptions(**opts))
    free_mem = free.params_per_device * 64 + free.saved_bytes["none"]
    budget = 0.5 * free_mem
    tight = solve_layer(g, tp8(), AlphaBeta(), SolveOptions(**opts, memory_budget=budget))
    assert tight.params_per_device * 64 + tight.saved_bytes["none"] <= budget
    assert tight.params_per_device < free.params_per_device
    assert tight.objective_s >= free.objective_s
