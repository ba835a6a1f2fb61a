"""Explicitly parallel programs: mesh layout over a cluster, sharding rules, redistribution."""
from cherenkov.parallel.layer_graph import LayerGraph, LayerOp, Value, embedding_graph, head_graph, layer_graph
from cherenkov.parallel.mesh import ClusterMesh, MeshAxis, layout
from cherenkov.parallel.redistribute import Collective, collective_kind, redistribute
from cherenkov.parallel.rules import RULES, Strategy, rule, strategies

__all__ = ["LayerGraph", "LayerOp", "Value", "embedding_graph", "head_graph", "layer_graph",
           "ClusterMesh", "MeshAxis", "layout", "Collective", "collective_kind", "redistribute",
           "RULES", "Strategy", "rule", "strategies"]
