"""How vLLM and SGLang move tokens between expert-parallel ranks (Engine.ep_comm), read per version.

Two styles matter to a layer's cost: "allreduce" (every EP rank gets every token, replicated across
the TP ranks or gathered from the data-parallel ranks, runs its local experts on all of them, and the
partial outputs are summed) and "alltoall" (each token's top-k copies go only to the ranks that hold
those experts and come back). engines/types.EpComm carries the answer and why.

vLLM (wheels 0.8.5-0.33.0, every minor release between 0.9.0 and 0.33.0 read for the boundaries):
- an all2all manager exists only with --data-parallel-size > 1 (base_device_communicator.py, 0.9.0
  l.106; config/parallel.py use_all2all, 0.28.0 l.690-695), from 0.26.0 also under EP with
  --prefill-context-parallel-size > 1; with EP over TP ranks alone the tokens are replicated and the
  output goes through the TP all-reduce (runner/moe_runner.py l.509-515 in 0.33.0);
- the backend: VLLM_ALL2ALL_BACKEND alone in 0.9.0-0.11.0 (envs.py; default "naive" through 0.10.2,
  "allgather_reducescatter" from 0.11.0); --all2all-backend from 0.11.1, where the flag wins and the
  variable fills in when it is unset (config/parallel.py l.466-474 in 0.11.1) through 0.13.0; in
  0.14.0-0.15.0 a set variable overrides the flag (parallel.py l.529-536 in 0.14.0); from 0.16.0 the
  variable is gone from envs.py and only the flag counts;
- gather-style managers: NaiveAll2AllManager ("naive": broadcast, then all-reduce) and
  AgRsAll2AllManager ("allgather_reducescatter"); every other backend is a dispatch/combine
  all-to-all (device_communicators/all2all.py); "pplx" runs as allgather_reducescatter from 0.17.0
  and "naive" from 0.19.0 (config/parallel.py remaps them);
- from 0.32.0 the FlashInfer MoE-EP --moe-backend values bind the "passthrough" manager: the kernel
  dispatches and combines itself in every EP topology, TP-only included (config/kernel.py l.194-228,
  fused_moe/config.py l.1081-1084 in 0.33.0).

SGLang (wheels 0.4.6-0.5.23): --moe-a2a-backend from 0.4.10.post2 (default None, "none" from 0.5.1;
server_args.py), before it --enable-deepep-moe (launch/sglang.py reads it as "deepep"). Every backend
in `_A2A_EP_SPANNING_BACKENDS` (arg_groups/overrides.py l.1578-1620 in 0.5.23; deepep, mooncake, nixl,
mori, ascend_fuseep, flashinfer, megamoe, pplx, deepep_v2, flashinfer_megamoe) sets the EP size to the
TP size and scatters the attention ranks' tokens before dispatch (layers/moe/utils.py l.721-727,
is_moe_input_scattered_across_dp_ranks); with "none" the MoE input is whole and the output is
all-reduced over the MoE group (fused_moe_triton/layer.py l.1026-1027 in 0.5.10).
"""

from __future__ import annotations

from collections.abc import Mapping

from tilefit.engines.types import EpComm, parse_version
from tilefit.errors import UsageError
from tilefit.layout.plan import Layout

VLLM_GATHER = ("naive", "allgather_reducescatter")
VLLM_DISPATCH = ("pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori",
                 "mori_high_throughput", "mori_low_latency", "nixl_ep", "flashinfer_all2allv",
                 "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "moonep")
VLLM_ENV = "VLLM_ALL2ALL_BACKEND"
# --moe-backend values that bind vLLM's passthrough manager (0.32.0-0.33.0, config/kernel.py)
VLLM_KERNEL_DISPATCH = ("flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm")
# vLLM release where each backend first reads (config/parallel.py All2AllBackend or envs.py)
VLLM_BACKEND_SINCE = {"naive": "0.9.0", "pplx": "0.9.0", "deepep_high_throughput": "0.9.1",
                      "deepep_low_latency": "0.9.1", "allgather_reducescatter": "0.11.0",
                      "flashinfer_all2allv": "0.11.0", "mori": "0.15.0", "nixl_ep": "0.18.0",
                      "flashinfer_nvlink_two_sided": "0.18.0", "flashinfer_nvlink_one_sided": "0.18.0",
                      "mori_high_throughput": "0.23.0", "mori_low_latency": "0.23.0",
                      "deepep_v2": "0.24.0", "moonep": "0.31.0"}
VLLM_BACKEND_UNTIL = {"mori": "0.23.0"}  # replaced by mori_high_throughput / mori_low_latency
SGLANG_A2A_FLAG_SINCE = "0.4.10.post2"
SGLANG_DISPATCH = ("deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe",
                   "pplx", "deepep_v2", "flashinfer_megamoe")

_GATHERED = ("each EP rank gets every token and the partial outputs are summed (counted as an "
             "all-reduce of the layer output)")
_DISPATCHED = "each token's top-k copies are dispatched to the ranks holding those experts and combined back"


def _at_least(version: str, first: str) -> bool:
    return parse_version(version) >= parse_version(first)


def _vllm_backend(v: str, flags: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, str]:
    """(backend, where it came from) as vLLM `v` resolves its all2all backend."""
    flag, env = flags.get("all2all_backend"), environ.get(VLLM_ENV)
    default = "allgather_reducescatter" if _at_least(v, "0.11.0") else "naive"
    if not _at_least(v, "0.11.1"):  # the variable alone
        return (env, f"{VLLM_ENV}={env}") if env else (default, f"the default, {VLLM_ENV} unset")
    if env and _at_least(v, "0.14.0") and not _at_least(v, "0.16.0"):
        return env, f"{VLLM_ENV}={env}, which overrides --all2all-backend in vLLM 0.14-0.15"
    if flag:
        return flag, f"--all2all-backend {flag}"
    if env and not _at_least(v, "0.16.0"):
        return env, f"{VLLM_ENV}={env}"
    ignored = f", {VLLM_ENV} ignored from vLLM 0.16.0" if env else ""
    return default, f"the default --all2all-backend{ignored}"


def vllm_ep_comm(layout: Layout, version: str, flags: Mapping[str, str],
                 environ: Mapping[str, str]) -> EpComm:
    name = f"vLLM {version}"
    if layout.ep <= 1:
        return EpComm("allreduce", f"{name}: no expert parallelism")
    moe_backend = str(flags.get("moe_backend") or "")
    if moe_backend in VLLM_KERNEL_DISPATCH and _at_least(version, "0.32.0"):
        return EpComm("alltoall", f"{name}: --moe-backend {moe_backend} dispatches and combines "
                      "inside its kernel (the passthrough all2all manager), TP-only included")
    # layout.dp counts vLLM's data-parallel and prefill-context ranks together (launch/vllm.py)
    pcp = int(flags.get("prefill_context_parallel_size") or 1)
    dp = int(flags.get("data_parallel_size") or max(layout.dp // pcp, 1))
    if dp <= 1 and not (pcp > 1 and _at_least(version, "0.26.0")):
        return EpComm("allreduce", f"{name}: expert parallelism without --data-parallel-size > 1 "
                      "uses no all2all manager; the tokens are replicated across the TP ranks and "
                      "the MoE output all-reduced")
    backend, source = _vllm_backend(version, flags, environ)
    since = VLLM_BACKEND_SINCE.get(backend)
    if since is None:
        raise UsageError(f"vLLM has no all2all backend {backend!r} (from {source}); it reads "
                         f"{', '.join(VLLM_GATHER + VLLM_DISPATCH)}")
    until = VLLM_BACKEND_UNTIL.get(backend)
    if not _at_least(version, since) or (until and _at_least(version, until)):
        span = f"vLLM {since}-{until} reads it" if until else f"vLLM reads it from {since}"
        raise UsageError(f"vLLM {version} has no all2all backend {backend!r} (from {source}; "
                         f"{span}): give the version you run with --engine-version")
    remapped = ((backend == "pplx" and _at_least(version, "0.17.0"))
                or (backend == "naive" and _at_least(version, "0.19.0")))
    if remapped:
        source += f", which vLLM {version} runs as allgather_reducescatter"
        backend = "allgather_reducescatter"
    if backend in VLLM_GATHER:
        return EpComm("allreduce", f"{name}: all2all backend {backend} ({source}): {_GATHERED}")
    return EpComm("alltoall", f"{name}: all2all backend {backend} ({source}): {_DISPATCHED}")


def sglang_ep_comm(layout: Layout, version: str, flags: Mapping[str, str]) -> EpComm:
    name = f"SGLang {version}"
    if layout.ep <= 1:
        return EpComm("allreduce", f"{name}: no expert parallelism")
    a2a = str(flags.get("moe_a2a_backend") or "none").lower()
    flag = "--moe-a2a-backend" if _at_least(version, SGLANG_A2A_FLAG_SINCE) else "--enable-deepep-moe"
    if a2a == "none":
        said = f"{flag} none (the default)" if flag == "--moe-a2a-backend" else f"no {flag}"
        return EpComm("allreduce", f"{name}: {said}: each EP rank gets "
                      "every token (replicated, or gathered from the DP-attention ranks) and the "
                      "MoE output is all-reduced")
    if a2a != "deepep" and flag != "--moe-a2a-backend":
        raise UsageError(f"SGLang {version} has no --moe-a2a-backend (from {SGLANG_A2A_FLAG_SINCE}; "
                         "before it --enable-deepep-moe chose DeepEP): give the version you run "
                         "with --engine-version")
    if a2a in SGLANG_DISPATCH:
        shown = f"{flag} {a2a}" if flag == "--moe-a2a-backend" else flag
        return EpComm("alltoall", f"{name}: {shown}: {_DISPATCHED}; without DP attention the TP "
                      "ranks split their tokens first")
    raise UsageError(f"SGLang's --moe-a2a-backend {a2a!r} is not one tilefit models (NVIDIA "
                     f"backends: none, {', '.join(SGLANG_DISPATCH)}); pass --ep-comm allreduce|alltoall")
