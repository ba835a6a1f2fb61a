"""Alpha-beta collectives against hand-computed numbers on known rings and clusters."""
import math

import pytest

from cherenkov import cost
from cherenkov.hw import device
from cherenkov.hw.spec import ClusterSpec, LinkSpec

A_I, B_I = 2e-6, 400e9       # intra-node: alpha, beta (bytes/s per GPU per direction)
A_E, B_E = 10e-6, 50e9       # inter-node
INTRA = LinkSpec("intra", bandwidth=B_I, latency_s=A_I)
INTER = LinkSpec("inter", bandwidth=B_E, latency_s=A_E)
NODE = ClusterSpec(device("h100"), gpus_per_node=8, nodes=1, intra=INTRA)
CLUSTER = ClusterSpec(device("h100"), gpus_per_node=8, nodes=4, intra=INTRA, inter=INTER)
S = 1e9


def test_ring_all_reduce_on_a_known_ring():
    n = 8
    expected = 2 * (n - 1) / n * S / B_I + 2 * (n - 1) * A_I
    assert cost.collective_time("all_reduce", S, n, NODE, algorithm="ring") == \
        pytest.approx(expected)
    assert cost.collective_time("all_reduce", S, n, NODE) == pytest.approx(expected)   # auto


def test_tree_all_reduce_and_auto_choice():
    tree = cost.collective_time("all_reduce", S, 8, NODE, algorithm="tree")
    assert tree == pytest.approx(2 * 3 * A_I + 2 * S / B_I)
    small = 1024
    assert cost.best_algorithm("all_reduce", small, 8, INTRA) == "tree"     # latency-bound
    assert cost.best_algorithm("all_reduce", S, 8, INTRA) == "ring"         # bandwidth-bound
    assert cost.collective_time("all_reduce", small, 8, NODE) == \
        pytest.approx(6 * A_I + 2 * small / B_I)


@pytest.mark.parametrize("kind,algorithm,expected", [
    ("reduce_scatter", "ring", 7 * A_I + 7 / 8 * S / B_I),
    ("all_gather", "ring", 7 * A_I + 7 / 8 * S / B_I),
    ("all_gather", "tree", 3 * A_I + 7 / 8 * S / B_I),
    ("all_reduce", "direct", 2 * A_I + 2 * 7 / 8 * S / B_I),
    ("all_to_all", "direct", A_I + 7 / 8 * S / B_I),
    ("all_to_all", "ring", 7 * A_I + 7 / 8 * S / B_I),
    ("send_recv", "direct", A_I + S / B_I),
])
def test_flat_formulas(kind, algorithm, expected):
    assert cost.collective_time(kind, S, 8, NODE, algorithm=algorithm) == pytest.approx(expected)


def test_auto_for_the_other_kinds():
    assert cost.collective_time("all_gather", S, 8, NODE) == pytest.approx(7 * A_I + 7 / 8 * S / B_I)
    assert cost.collective_time("all_to_all", S, 8, NODE) == pytest.approx(A_I + 7 / 8 * S / B_I)
    assert cost.collective_time("send_recv", S, 2, NODE) == pytest.approx(A_I + S / B_I)


def test_a_group_of_one_costs_nothing():
    assert cost.collective_time("all_reduce", S, 1, CLUSTER) == 0.0
    assert cost.collective_phases("all_gather", S, 1, CLUSTER) == []


def test_hierarchical_all_reduce_across_nodes():
    # 32 ranks = 4 nodes x 8: reduce-scatter in the node, all-reduce of S/8 across nodes on
    # every rail at once, all-gather in the node.
    rs_intra = 7 * A_I + 7 / 8 * S / B_I
    ar_inter = 2 * 3 * A_E + 2 * 3 / 4 * (S / 8) / B_E          # ring of 4 nodes
    expected = rs_intra + ar_inter + rs_intra
    assert cost.collective_time("all_reduce", S, 32, CLUSTER) == pytest.approx(expected)
    phases = cost.collective_phases("all_reduce", S, 32, CLUSTER)
    assert [(p.kind, p.link, p.group_size, p.nbytes) for p in phases] == [
        ("reduce_scatter", "intra", 8, S), ("all_reduce", "inter", 4, S / 8),
        ("all_gather", "intra", 8, S)]
    flat_over_ib = 2 * 31 / 32 * S / B_E + 2 * 31 * A_E
    assert expected < flat_over_ib


def test_hierarchical_reduce_scatter_and_all_gather():
    expected = 7 * A_I + 7 / 8 * S / B_I + 3 * A_E + 3 / 4 * (S / 8) / B_E
    assert cost.collective_time("reduce_scatter", S, 32, CLUSTER) == pytest.approx(expected)
    assert cost.collective_time("all_gather", S, 32, CLUSTER) == pytest.approx(expected)
    assert [p.kind for p in cost.collective_phases("all_gather", S, 32, CLUSTER)] == \
        ["all_gather", "all_gather"]


def test_group_placed_one_rank_per_node_runs_over_the_fabric():
    expected = 2 * 3 / 4 * S / B_E + 2 * 3 * A_E
    assert cost.collective_time("all_reduce", S, 4, CLUSTER, spans_nodes=True) == \
        pytest.approx(expected)


def test_hierarchical_all_to_all_splits_the_traffic():
    block = S / 32                       # each rank sends one block to each of 32 ranks
    expected = (A_I + 7 * block / B_I) + (A_E + 24 * block / B_E)
    assert cost.collective_time("all_to_all", S, 32, CLUSTER) == pytest.approx(expected)


def test_send_recv_across_nodes():
    assert cost.collective_time("send_recv", S, 2, CLUSTER, spans_nodes=True) == \
        pytest.approx(A_E + S / B_E)


def test_h200_node_numbers():
    c = ClusterSpec(device("h200"), 8, 1, intra=LinkSpec("nvlink4", 450e9, 3e-6))
    assert cost.collective_time("all_reduce", 2**30, 8, c, algorithm="ring") == \
        pytest.approx(2 * 7 / 8 * 2**30 / 450e9 + 14 * 3e-6)
    assert math.isclose(cost.flat_time("all_reduce", 2**30, 8, c.intra, "ring"),
                        cost.collective_time("all_reduce", 2**30, 8, c, algorithm="ring"))


@pytest.mark.parametrize("args,match", [
    (("broadcast", S, 8), "unknown collective kind"),
    (("all_reduce", S, 8, CLUSTER, False, "butterfly"), "unknown algorithm"),
    (("all_reduce", -1.0, 8), "nbytes"),
    (("all_reduce", S, 0), "group_size"),
    (("all_reduce", S, 64), "group_size"),
    (("all_reduce", S, 12), "cannot be laid out"),
])
def test_bad_requests(args, match):
    kind, nbytes, n, *rest = args
    cluster = rest[0] if rest else CLUSTER
    with pytest.raises(ValueError, match=match):
        cost.collective_time(kind, nbytes, n, cluster, *rest[1:])
