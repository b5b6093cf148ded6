"""Command-line interface: one module per command group, all rendered through `output`."""
