"""What the serving engines (sglang, vLLM, TensorRT-LLM) do with MoE kernels, as typed data.

backends: which kernel family runs; defaults: the Triton config an engine uses when no tuned file
exists; lookup: where an engine finds tuned config files; remedies: what is fatal, and the fixes.
Nothing here imports torch, triton or an engine.
"""
