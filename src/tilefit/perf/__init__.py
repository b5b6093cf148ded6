"""Performance models: grouped-GEMM time from the roofline with wave quantisation, and collective
communication time from the interconnect, combined per MoE layer and layout."""
