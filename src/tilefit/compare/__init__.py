"""compare: TP vs EP (and mixes) for one deployment, predicted and optionally measured."""

from tilefit.compare.data import CompareRequest, compare_data
from tilefit.compare.layouts import parse_layouts

__all__ = ["CompareRequest", "compare_data", "parse_layouts"]
