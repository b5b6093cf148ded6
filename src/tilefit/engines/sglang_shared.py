"""SGLang's shared-expert fusion: whether SGLang appends a model's shared expert to the routed
experts of its fused MoE, so that the Triton fused-MoE kernel runs E = routed + 1 local experts
with top_k + 1, the shared expert taking every token, and SGLang looks its tuned configs up as
E=257 (DeepSeek-V3 and GLM-5 under TP8; the 0.5.9 wheel ships E=257 files for H200, H20, B200).

Read from the sglang wheels 0.4.0-0.5.23 (every release; models/deepseek_v2.py
shared_experts_fusion_disable_reason and its forerunners, models/glm4_moe.py):
- DeepSeek gate (DeepseekV3ForCausalLM; GlmMoeDsaForCausalLM, GLM-5, from 0.5.9, glm4_moe.py
  l.1283-1285): 256 routed experts and one shared expert (384 only with quark checkpoints, which
  tilefit does not model), CUDA compute capability >= 8.0 (from 0.4.8; 9.0 before), no expert
  parallelism (0.4.10.post2+), no DeepEP-class all-to-all (deepep, mooncake, mori), no single- or
  two-batch overlap (0.5.11+), not --disable-shared-experts-fusion. From 0.5.12
  --enforce-shared-experts-fusion fuses whatever the other checks say (0.5.23 deepseek_v2.py
  l.3340; one shared slot per EP rank). 0.5.23 l.3322-3398 in that order.
- GLM-4 gate (Glm4MoeForCausalLM: GLM-4.5/4.6/4.7, GLM-4.5-Air): one shared expert, any routed
  count, compute capability >= 8.0, no expert parallelism, no DeepEP-class all-to-all, from 0.5.6
  (0.5.6 glm4_moe.py l.1031-1060; 0.5.23 l.1012-1031); 0.5.1-0.5.4 the same; the rewrite of
  0.5.4.post1-0.5.5.post3 fused nothing (tilefit reads 0.5.4's post releases as 0.5.4 and fuses).
- Only SGLang's Triton runner path is followed here: its FlashInfer and TensorRT-LLM runners turn
  fusion off (0.5.23 arg_groups/overrides.py l.1528-1574), and the CUTLASS tactics tilefit checks
  do not depend on E.
- The fused shared expert has the routed experts' width, split over TP like them; its weight is
  1 / routed_scaling_factor (the MoE output is scaled back), so it costs one more expert of work
  with every token routed to it.
Not followed: releases before 0.4.8 (0.4.4.post4-0.4.7.post1 fused tp_size copies of the shared
expert, E=264 at TP8), quark and W4A8 checkpoints, ROCm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilefit.engines.types import parse_version
from tilefit.hw.catalog import Arch
from tilefit.layout.plan import Layout

DEEPSEEK_ARCHS = {"DeepseekV3ForCausalLM": "0.4.8", "GlmMoeDsaForCausalLM": "0.5.9"}
GLM4_ARCH = "Glm4MoeForCausalLM"
FIRST_FOLLOWED = "0.4.8"
GLM4_SINCE, GLM4_GAP = "0.5.1", ("0.5.5", "0.5.6")  # [GLM4_GAP[0], GLM4_GAP[1]) fused nothing
OVERLAP_CHECK_SINCE, ENFORCE_SINCE = "0.5.11", "0.5.12"
DEEPEP_CLASS = {"deepep", "mooncake", "mori"}
MIN_CC = (8, 0)


@dataclass(frozen=True, slots=True)
class SharedFusion:
    """Shared experts the engine appends to the fused MoE on every rank (0: none), and why."""

    experts: int
    why: str


NONE = SharedFusion(0, "")


def _on(flags: Mapping[str, str], name: str) -> bool:
    return str(flags.get(name, "")).lower() in ("1", "true", "yes", "on")


def _at_least(version: str, first: str) -> bool:
    return parse_version(version) >= parse_version(first)


def shared_fusion(version: str, *, architecture: str, routed: int, shared: int, layout: Layout,
                  arch: Arch, runner: str, flags: Mapping[str, str]) -> SharedFusion:
    """What sglang `version` does with the shared expert of this model on this deployment, when
    its Triton runner (`runner`) runs the MoE."""
    if shared != 1 or runner != "triton" or not _at_least(version, FIRST_FOLLOWED):
        return NONE
    deepseek = architecture in DEEPSEEK_ARCHS and _at_least(version, DEEPSEEK_ARCHS[architecture])
    glm4 = (architecture == GLM4_ARCH and _at_least(version, GLM4_SINCE)
            and not (_at_least(version, GLM4_GAP[0]) and not _at_least(version, GLM4_GAP[1])))
    if not (deepseek or glm4):
        return NONE
    where = f"sglang {version}, {architecture}"
    if _on(flags, "disable_shared_experts_fusion"):
        return NONE
    if deepseek and _on(flags, "enforce_shared_experts_fusion") and _at_least(version, ENFORCE_SINCE):
        return SharedFusion(1, f"{where}: --enforce-shared-experts-fusion appends the shared expert "
                               f"to the fused MoE on every rank")
    a2a = str(flags.get("moe_a2a_backend", "none")).lower()
    if (deepseek and routed != 256) or layout.ep > 1 or a2a in DEEPEP_CLASS or arch.cc < MIN_CC:
        return NONE
    if deepseek and _at_least(version, OVERLAP_CHECK_SINCE) and (
            _on(flags, "enable_two_batch_overlap") or _on(flags, "enable_single_batch_overlap")):
        return NONE
    return SharedFusion(1, f"{where}: the shared expert runs inside the fused MoE as expert {routed} "
                           f"(E={routed // layout.ep + 1}, top-k + 1, every token routed to it); "
                           f"--disable-shared-experts-fusion turns it off")
