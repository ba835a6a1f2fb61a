"""Auto-parallel planning: intra-layer sharding MILP, outer search, memory, simulator, CLI."""
from cherenkov.planner.result import Prediction, plan_model, plan_training, simulate_plan
from cherenkov.planner.search import Infeasible, Planner, Request

__all__ = ["Prediction", "plan_model", "plan_training", "simulate_plan", "Infeasible", "Planner", "Request"]
