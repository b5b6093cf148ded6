"""`tilefit tune`: crash-proof, shared-memory-exact tuning of fused-MoE kernels.

Data flows: a target (targets/) offers a config space -> the family's SMEM model prefilters it ->
a strategy (strategies/) picks configs, a layer's searches side by side (schedule.py) -> pools of
isolated workers (pools.py, workers.py) compile and time them ->
every result goes to the journal (journal.py) -> winners go to the engines' files (each engine in
tilefit.engines writes its own format).
"""
