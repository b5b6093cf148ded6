"""TP/EP layouts -> the grouped GEMMs one GPU runs for one MoE layer, and the tokens they see."""

from tilefit.layout.plan import GemmShape, Layout, LayerPlan, plan_layer
from tilefit.layout.routing import RoutingStats, routing_stats

__all__ = ["GemmShape", "Layout", "LayerPlan", "plan_layer", "RoutingStats", "routing_stats"]
