"""compare models the kernel the engine runs: FlashInfer's CUTLASS tiles where the engine's backend
rule says FlashInfer CUTLASS MoE (sglang NVFP4 on SM120), Triton's otherwise, and says which."""

from tilefit.perf.moe_layer import TRITON_MOE, KernelModel

BASE = ("compare", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000", "--gpus", "8", "--batch", "1,1024", "--json")


def test_engine_running_flashinfer_cutlass_gets_cutlass_tiles(cli):
    d = cli(*BASE, "--engine", "sglang").json()
    k = d["kernel"]
    assert k["family"] == "flashinfer-cutlass" and min(k["token_tiles"]) == 32  # swap-AB N tiles: 32..256
    assert any("CUTLASS tiles are modelled" in a for a in d["assumptions"])
    plain = cli(*BASE).json()
    assert plain["kernel"]["family"] == "triton-moe"
    assert any("kernel choice is not applied" in a for a in plain["assumptions"])


def test_engine_running_triton_keeps_triton_tiles(cli):
    d = cli("compare", "--model", "glm-5-fp8", "--gpu", "h200", "--gpus", "8", "--engine", "sglang",
            "--batch", "64", "--json").json()
    assert d["kernel"]["family"] == "triton-moe" and "Triton" in d["kernel"]["why"]


def test_launch_command_sets_model_gpus_and_kernel(cli):
    d = cli("compare", "--gpu", "rtx-pro-6000", "--batch", "64", "--json", "--", "python", "-m",
            "sglang.launch_server", "--model-path", "zai-org/GLM-5-NVFP4", "--tp", "8", "--ep", "8",
            "--quantization", "modelopt_fp4").json()
    assert d["gpus"] == 8 and d["model"] == "glm-5-nvfp4" and d["kernel"]["family"] == "flashinfer-cutlass"


def test_kernel_model_picks_the_smallest_covering_tile():
    k = KernelModel("x", (32, 64, 128, 256), 128, 0.75, "test")
    assert [k.block_m(r) for r in (1, 33, 200, 900)] == [32, 64, 256, 256]
    assert TRITON_MOE.block_m(1) == 16 and TRITON_MOE.block_m(500) == 128
