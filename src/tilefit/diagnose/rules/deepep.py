"""DeepEP's kernel timeouts. DeepEP (the expert-parallel all-to-all that sglang and vLLM use for MoE
dispatch and combine) bounds every wait loop of its kernels by a cycle budget; when a peer rank's data
never arrives, the kernel prints "DeepEP ... timeout ..." from the device and calls trap(), which aborts
it: a sticky CUDA error, so the process is lost whatever it prints next.

Read from DeepEP's source (it is built from source, not published as a wheel) at commit dd758ca
(v1.2.1-36): in csrc/kernels/legacy/intranode.cu, internode.cu and utils.cuh every "DeepEP ... timeout"
printf is followed by trap(). The low-latency kernels' "Warning: DeepEP timeout for ..." (internode_ll.cu)
traps only when no mask buffer is set (with one, the late rank is masked and the run goes on), so it is
not matched here: the pattern wants "DeepEP" at the start of the line.
"""

from __future__ import annotations

from tilefit.diagnose.events import CUDA_ERROR, ERROR, Rule

E = "deepep"

RULES = (
    Rule("kernel-timeout", E, CUDA_ERROR, ERROR, "DeepEP ",
         "DeepEP dispatch NVL receiver timeout, channel: 9, RDMA: 1, nvl: 3, src RDMA: 0, src nvl: 3, start: 0, "
         "end: 0",
         pattern=r"^DeepEP (?P<error>(?:[\w()]{1,12} ){0,6}timeout)\b", body=True,
         fields=(("trap", "DeepEP"),)),
)
