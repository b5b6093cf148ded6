"""Readers that re-derive tilefit's engine facts from the engines' own released wheels.

wheels.py turns a downloaded wheel into a small cache of the source files the readers need;
sglang.py, vllm.py and flashinfer.py each read one engine's files and return Fact values that
scripts/engine_facts.py compares with what tilefit's data files say.
"""
