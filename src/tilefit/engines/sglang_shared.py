"""SGLang's shared-expert fusion: whether SGLang appends a model's shared expert to the routed
experts of its fused MoE, so that the Triton fused-MoE kernel runs E = routed + 1 local experts
with top_k + 1, the shared expert taking every token, and SGLang looks its tuned configs up as
E=257 (DeepSeek-V3 and GLM-5 under TP8; the 0.5.9 wheel ships E=257 files for H200, H20, B200).

Read from the sglang wheels (0.4.x-0.5.9 whole, 0.5.10-0.5.23 sources; models/deepseek_v2.py
shared_experts_fusion_disable_reason and its forerunners, models/glm4_moe.py, models/qwen2_moe.py):
- DeepSeek gate (DeepseekV3ForCausalLM; GlmMoeDsaForCausalLM, GLM-5, from 0.5.9, glm4_moe.py
  l.1283-1285): 256 routed experts and one shared expert, CUDA compute capability >= 8.0 (from
  0.4.8), no expert parallelism (0.4.10.post2+), no DeepEP-class all-to-all (deepep, mooncake,
  mori, deepep_v2; 0.5.23 layers/moe/utils.py l.656-665), no single- or two-batch overlap (0.5.11+),
  not --disable-shared-experts-fusion. --enforce-shared-experts-fusion fuses with a DeepEP-class
  all-to-all in 0.5.11 (deepseek_v2.py l.2241-2250) and whatever the other checks say from 0.5.12
  (0.5.23 l.3340; one shared slot per EP rank). 0.5.23 checks these in deepseek_v2.py l.3322-3398.
- GLM-4 gate (Glm4MoeForCausalLM: GLM-4.5/4.6/4.7, GLM-4.5-Air): one shared expert, any routed
  count, compute capability >= 8.0, no expert parallelism, no DeepEP-class all-to-all; 0.5.1-0.5.4
  and from 0.5.6 (0.5.6 glm4_moe.py l.1031-1060; 0.5.23 l.1012-1031); the rewrite of
  0.5.4.post1-0.5.5.post3 fused nothing (tilefit reads 0.5.4's post releases as 0.5.4 and fuses).
- Qwen gate (Qwen3NextForCausalLM, from 0.5.14: qwen3_next.py passes
  enable_cuda_shared_expert_fusion, 0.5.14 l.547-548, 0.5.23 l.557/714; qwen2_moe.py
  can_fuse_shared_expert, 0.5.23 l.137-167): the shared expert as wide as a routed one, no
  deepep/deepep_v2/mori all-to-all, not --disable-shared-experts-fusion. Under expert parallelism
  it is one global expert (qwen2_moe.py l.279-300), not followed here.
- The fused shared expert has the routed experts' width, split over TP like them; every token is
  routed to it (DeepSeek and GLM: weight 1 / routed_scaling_factor, scaled back after the MoE;
  Qwen3-Next: its per-token gate).
Only the Triton runner is followed: E does not enter the CUTLASS tactics tilefit checks, and the
FlashInfer TensorRT-LLM runners turn fusion off (0.5.23 arg_groups/overrides.py l.1528-1574). On
SM100/SM103 sglang's auto picks flashinfer_trtllm for the DeepSeek-V3, GLM-4 and Qwen3 families
(engines/data/backends.toml, rows with `architectures`), so there the runner passed in is not
Triton and nothing is fused unless --moe-runner-backend triton is on the command line.
Not followed: releases before 0.4.8 (0.4.4.post4-0.4.7.post1 fused tp_size copies of the shared
expert, E=264 at TP8), quantization configs that keep the shared expert apart
(quant_blocks_shared_experts_fusion: quark, modelopt_fp4 with the shared expert excluded),
modelopt_fp4 with Marlin on Hopper, 384-expert quark checkpoints, W4A8, ROCm.
"""

from __future__ import annotations

from collections.abc import Mapping

from tilefit.engines.types import NO_FUSION, SharedFusion, flag_on, parse_version
from tilefit.hw.catalog import Arch
from tilefit.layout.plan import Layout

DEEPSEEK_ARCHS = {"DeepseekV3ForCausalLM": "0.4.8", "GlmMoeDsaForCausalLM": "0.5.9"}
GLM4_ARCH, QWEN_ARCH = "Glm4MoeForCausalLM", "Qwen3NextForCausalLM"
FIRST_FOLLOWED = "0.4.8"
GLM4_SINCE, GLM4_GAP = "0.5.1", ("0.5.5", "0.5.6")  # [GLM4_GAP[0], GLM4_GAP[1]) fused nothing
QWEN_SINCE = "0.5.14"
OVERLAP_CHECK_SINCE, ENFORCE_DEEPEP_SINCE, ENFORCE_SINCE = "0.5.11", "0.5.11", "0.5.12"
# The all-to-all backends that keep the shared expert apart (is_deepep_class_backend); Qwen's
# gate names deepep, deepep_v2 and mori only.
DEEPEP_CLASS = frozenset({"deepep", "mooncake", "mori", "deepep_v2"})
QWEN_APART = frozenset({"deepep", "deepep_v2", "mori"})
MIN_CC = (8, 0)


def _at_least(version: str, first: str) -> bool:
    return parse_version(version) >= parse_version(first)


def shared_fusion(version: str, *, architecture: str, routed: int, shared: int, layout: Layout,
                  arch: Arch, runner: str, flags: Mapping[str, str], shared_width: int = 0,
                  routed_width: int = 0) -> SharedFusion:
    """What sglang `version` does with the shared expert of this model on this deployment, when
    its Triton runner (`runner`) runs the MoE (widths: Qwen's gate compares them)."""
    if shared != 1 or runner != "triton" or not _at_least(version, FIRST_FOLLOWED):
        return NO_FUSION
    a2a = str(flags.get("moe_a2a_backend", "none")).lower()
    where = f"sglang {version}, {architecture}"
    fused = SharedFusion(1, f"{where}: the shared expert runs inside the fused MoE as expert {routed} "
                            f"(E={routed // layout.ep + 1}, top-k + 1, every token routed to it); "
                            f"--disable-shared-experts-fusion turns it off")
    if flag_on(flags, "disable_shared_experts_fusion"):
        return NO_FUSION
    if architecture == QWEN_ARCH:
        ok = (_at_least(version, QWEN_SINCE) and shared_width == routed_width and layout.ep == 1
              and a2a not in QWEN_APART)
        return fused if ok else NO_FUSION
    deepseek = architecture in DEEPSEEK_ARCHS and _at_least(version, DEEPSEEK_ARCHS[architecture])
    glm4 = (architecture == GLM4_ARCH and _at_least(version, GLM4_SINCE)
            and not (_at_least(version, GLM4_GAP[0]) and not _at_least(version, GLM4_GAP[1])))
    if not (deepseek or glm4):
        return NO_FUSION
    if deepseek and flag_on(flags, "enforce_shared_experts_fusion") and (
            _at_least(version, ENFORCE_SINCE)
            or (_at_least(version, ENFORCE_DEEPEP_SINCE) and a2a in DEEPEP_CLASS)):
        return SharedFusion(1, f"{where}: --enforce-shared-experts-fusion appends the shared expert "
                               f"to the fused MoE on every rank")
    if (deepseek and routed != 256) or layout.ep > 1 or a2a in DEEPEP_CLASS or arch.cc < MIN_CC:
        return NO_FUSION
    if deepseek and _at_least(version, OVERLAP_CHECK_SINCE) and (
            flag_on(flags, "enable_two_batch_overlap") or flag_on(flags, "enable_single_batch_overlap")):
        return NO_FUSION
    return fused
