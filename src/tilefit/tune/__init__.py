"""`tilefit tune`: crash-proof, shared-memory-exact tuning of fused-MoE kernels.

Data flows: a target (targets/) offers a config space -> the family's SMEM model prefilters it ->
a strategy (strategies/) picks configs -> isolated workers (workers.py) compile and time them ->
every result goes to the journal (journal.py) -> winners go to the engines' files (each engine in
tilefit.engines writes its own format).
"""
