"""Kernel families. Each family module answers the questions in `base.KernelFamily`; the CLI, the
tuner and the diagnoser talk only to that protocol. `registry` maps family names to modules and
imports them lazily."""
