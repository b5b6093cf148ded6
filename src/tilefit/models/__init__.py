"""MoE model catalog and Hugging Face config loader: everything becomes one `MoEModel` value."""

from tilefit.models.catalog import all_presets, load_model
from tilefit.models.types import MoEModel, WeightFormat

__all__ = ["MoEModel", "WeightFormat", "all_presets", "load_model"]
