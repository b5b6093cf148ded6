"""scripts/engine_facts.py's readers on small extracted-wheel trees written here: each fact comes
out as the engine's code says it, and tilefit's side of the table reads tilefit's own data."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from wheel_facts import flashinfer, sglang, tilefit_side, vllm  # noqa: E402


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_sglang_reader(tmp_path):
    _write(tmp_path, "sglang/srt/environ.py", "    SGLANG_FLASHINFER_MOE_FUSED_FINALIZE = EnvBool(False)\n")
    _write(tmp_path, "sglang/srt/arg_groups/overrides.py",
           'if (\n    moe_runner_backend == "auto"\n    and view.quantization == "modelopt_fp4"\n'
           '    and get_platform().is_sm120\n):\n    moe_runner_backend = "flashinfer_cutlass"\n')
    _write(tmp_path, "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py",
           'd = os.environ.get("SGLANG_MOE_CONFIG_DIR", os.path.dirname(__file__))\n'
           "available_versions = sorted(os.listdir(configs_root))\n")
    f = sglang.facts(tmp_path)
    assert f["sglang: fused-finalize switch default"] == "off"
    assert f["sglang: NVFP4 MoE on SM120, --moe-runner-backend auto"].startswith("flashinfer_cutlass when")
    assert f["sglang: tuned-config package folder"] == "moe_runner/triton_utils"
    assert f["sglang: Triton-version folder fallback"] == "triton_* folders on disk, newest first"


@pytest.mark.parametrize("order,expected", [
    ("FLASHINFER_TRTLLM, FLASHINFER_CUTLASS, TRITON", "FLASHINFER_CUTLASS"),
    ("TRITON, FLASHINFER_CUTLASS", "TRITON"),
])
def test_vllm_reader_follows_the_cuda_priority_list(tmp_path, order, expected):
    items = ",\n".join(f"    UnquantizedMoeBackend.{x.strip()}" for x in order.split(","))
    _write(tmp_path, "vllm/model_executor/layers/fused_moe/oracle/unquantized.py",
           f"if rocm:\n  _AVAILABLE_BACKENDS = [\n    UnquantizedMoeBackend.AITER,\n  ]\n"
           f"elif cuda:\n  _AVAILABLE_BACKENDS = [\n{items},\n  ]\n")
    assert vllm.facts(tmp_path)["vllm: bf16 MoE on SM120, auto"].startswith(expected)


def test_flashinfer_reader_sees_the_switch_before_the_tactic_list(tmp_path):
    binding = "flashinfer/data/csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu"
    _write(tmp_path, binding, "mKernelRunner->use_fused_finalize_ = mUseFusedFinalize;\n"
                              "auto g2 = mKernelRunner->getTactics(kernels::MoeGemmId::GEMM_2);\n")
    assert flashinfer.facts(tmp_path)["flashinfer: gemm2 list follows use_fused_finalize"].startswith("yes")
    _write(tmp_path, binding, "auto g2 = mKernelRunner->getTactics(kernels::MoeGemmId::GEMM_2);\n")
    assert flashinfer.facts(tmp_path)["flashinfer: gemm2 list follows use_fused_finalize"].startswith("no")


def test_tilefit_side_reads_tilefit_data():
    says = tilefit_side.SAYS
    assert says["flashinfer: FLASHINFER_TACTICS_BLOCKLIST"]("0.6.14") == "absent"
    assert says["flashinfer: FLASHINFER_TACTICS_BLOCKLIST"]("0.6.15") == "read"
    assert says["flashinfer: gemm2 list follows use_fused_finalize"]("0.6.15").startswith("yes")
    assert says["sglang: NVFP4 MoE on SM120, --moe-runner-backend auto"]("0.5.12") == "absent"
    assert says["sglang: NVFP4 MoE on SM120, --moe-runner-backend auto"]("0.5.13").startswith("flashinfer_cutlass when")
    assert says["vllm: bf16 MoE on SM120, auto"]("0.15.0") == "TRITON unless VLLM_USE_FLASHINFER_MOE_FP16=1 with EP"
    assert says["sglang: pinned flashinfer-python"]("0.5.23") == "0.7.2"


def test_tuned_file_readers_and_tilefit_writers_agree(tmp_path):
    # sglang 0.5.23 fused_moe_triton_config.py; vLLM 0.10.2 vs 0.11.0 get_moe_configs.
    _write(tmp_path, "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py",
           'config_file_path = os.path.join(\n    config_dir,\n    "configs",\n    version_dir,\n'
           '    json_file_name,\n)\n')
    assert sglang.facts(tmp_path)["sglang: tuned-file folder under the config dir"] == \
        tilefit_side.SAYS["sglang: tuned-file folder under the config dir"]("0.5.23") == \
        "<dir>/configs/triton_X_Y_Z/"
    moe = "vllm/model_executor/layers/fused_moe/fused_moe.py"
    key = "vllm: triton_version key of a tuned file"
    _write(tmp_path, moe, "def get_moe_configs(E, N):\n    return {int(key): val for key, val in "
                          "json.load(f).items()}\n")
    assert vllm.facts(tmp_path)[key] == tilefit_side.SAYS[key]("0.10.2") != "popped"
    _write(tmp_path, moe, 'def get_moe_configs(E, N):\n    tuned_config.pop("triton_version", None)\n'
                          "    return {int(key): val for key, val in tuned_config.items()}\n")
    assert vllm.facts(tmp_path)[key] == tilefit_side.SAYS[key]("0.11.0") == "popped"


# Short excerpts of the engines' fused_moe_kernel and its launcher (vllm 0.33.0 fused_moe.py
# l.488/542/844; sglang 0.5.23 kernels/ops/moe/fused_moe_triton_kernels.py l.527/591).
_KERNEL = ("            offs_bsn = offs_bn // group_n\n"
           "                offs_ks = k_start // group_k\n")
_CLAMP = "        BLOCK_SIZE_K = min(BLOCK_SIZE_K, min(block_shape[0], block_shape[1]))\n"


@pytest.mark.parametrize("engine,clamp,wide", [("vllm", True, "runs as 128"),
                                               ("sglang", False, "one scale per step (wrong)")])
def test_block_fp8_tile_readers_and_runs_as_tuned_agree(tmp_path, engine, clamp, wide):
    fact = f"{engine}: block-fp8 tiles of the Triton fused-MoE kernel"
    rel = ("vllm/model_executor/layers/fused_moe/fused_moe.py" if engine == "vllm"
           else "sglang/kernels/ops/moe/fused_moe_triton_kernels.py")
    _write(tmp_path, rel, _KERNEL + (_CLAMP if clamp else ""))
    says = (vllm if engine == "vllm" else sglang).facts(tmp_path)[fact]
    assert says == f"BLOCK_SIZE_N 32/64, BLOCK_SIZE_K 64: as tuned; BLOCK_SIZE_K 256: {wide}"
    assert tilefit_side.SAYS[fact]("0.33.0" if engine == "vllm" else "0.5.23") == says
    _write(tmp_path, rel, "accumulator += tl.dot(a, b)\n")  # no block-scaled path: absent
    assert (vllm if engine == "vllm" else sglang).facts(tmp_path)[fact] == "absent"


def test_swap_ab_readers_and_swaps_ab_agree(tmp_path):
    # vllm 0.33.0 fused_moe/utils.py l.706-711; sglang 0.5.23 fused_moe_triton_kernels.py l.62-69.
    _write(tmp_path, "vllm/model_executor/layers/fused_moe/utils.py",
           "def enable_swap_ab(BLOCK_SIZE_M: int, BLOCK_SIZE_N: int) -> bool:\n    return (\n"
           "        current_platform.is_device_capability(90)\n        and BLOCK_SIZE_M < 64\n"
           "        and BLOCK_SIZE_N >= 64\n    )\n")
    _write(tmp_path, "sglang/kernels/ops/moe/fused_moe_triton_kernels.py",
           "def should_enable_swap_ab(\n    BLOCK_SIZE_M: int,\n    BLOCK_SIZE_N: int,\n) -> bool:\n"
           "    return is_sm90_supported() and BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64\n")
    for engine, reader, version in (("vllm", vllm, "0.33.0"), ("sglang", sglang, "0.5.23")):
        fact = f"{engine}: fp8 swap-AB path of the Triton fused-MoE kernel"
        assert reader.facts(tmp_path)[fact] == "sm90, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64"
        assert tilefit_side.SAYS[fact](version) == reader.facts(tmp_path)[fact]
    assert tilefit_side.SAYS["vllm: fp8 swap-AB path of the Triton fused-MoE kernel"]("0.24.0") == "absent"
    assert vllm.facts(tmp_path / "none")["vllm: fp8 swap-AB path of the Triton fused-MoE kernel"] == "absent"
