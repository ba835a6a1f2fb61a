"""Memory accounting against a hand calculation for GPT-2 small on one device."""
from cherenkov.models import preset
from cherenkov.parallel import layer_graph, layout
from cherenkov.planner.intra_layer import SolveOptions, solve_layer
from cherenkov.planner.memory import activation_bytes, device_memory, state_bytes
from tests.parallel.test_rules import AlphaBeta


class One:
    world_size, gpus_per_node, name = 1, 1, "1x1"


def test_state_bytes_by_zero_stage():
    assert state_bytes(0, 8) == (2, 2, 12)
    assert state_bytes(1, 8) == (2, 2, 1.5)
    assert state_bytes(2, 8) == (2, 0.25, 1.5)
    assert state_bytes(3, 8) == (0.25, 0.25, 1.5)


def test_gpt2_layer_hand_calculation():
    cfg = preset("gpt2")
    b, s, h = 4, 1024, 768
    sol = solve_layer(layer_graph(cfg, b, s), layout(One()).axis("tp"), AlphaBeta(), SolveOptions())
    # Parameters of one block: qkv 768*2304+2304, proj 768*768+768, fc1 768*3072+3072,
    # fc2 3072*768+768, two LayerNorms 2*2*768.
    params = 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768 + 4 * 768
    assert sol.params_per_device == params == 7_087_872
    bsh = b * s * h * 2  # one bf16 [b, s, h] tensor
    # Saved for backward (bytes, in units of b*s*h bf16 tensors):
    #   ln1 input 1, qkv input 1, attention q,k,v 3, proj input 1, ln2 input 1, fc1 input 1,
    #   gelu input (4h) 4, fc2 input (4h) 4 = 16 tensors = 32*b*s*h bytes.
    assert sol.saved_bytes["none"] == 16 * bsh
    # Selective: outputs of cheap ops (ln1 -> qkv input, ln2 -> fc1 input, gelu -> fc2 input)
    # are recomputed: 16 - 1 - 1 - 4 = 10 tensors.
    assert sol.saved_bytes["selective"] == 10 * bsh
    # Full: only the layer input.
    assert sol.saved_bytes["full"] == 1 * bsh
    L = 12
    assert activation_bytes(sol.saved_bytes, L, 1, "none") == 12 * 16 * bsh
    assert activation_bytes(sol.saved_bytes, L, 2, "selective") == 2 * 12 * 10 * bsh
    assert activation_bytes(sol.saved_bytes, L, 1, "full") == 12 * bsh + 16 * bsh
    mem = device_memory(L * params, 0, 1, activation_bytes(sol.saved_bytes, L, 1, "none"))
    assert (mem.weights, mem.grads, mem.optimizer) == (2 * L * params, 2 * L * params, 12 * L * params)
    assert mem.total == 16 * L * params + 12 * 16 * bsh
