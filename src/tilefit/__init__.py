"""tilefit: shared-memory-exact planning, fitting, diagnosis and tuning of MoE expert GEMMs.

The package root imports nothing heavy: torch and triton are loaded lazily by the modules that
need them, so `import tilefit` and `tilefit plan` run on a machine with neither installed.
"""

__version__ = "0.1.0"
