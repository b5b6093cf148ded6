"""Launch-command reading: each engine's parallel flags with its own meaning, settings, env,
and unknown flags named (flag semantics read from the engines' wheels: sglang server_args.py and
arg_groups 0.5.10-0.5.23, vLLM arg_utils.py and fused_moe/config.py 0.9.0-0.33.0, trtllm-serve's
click options)."""

import pytest

from tilefit.errors import UsageError
from tilefit.launch import parse_launch
from tilefit.layout.plan import plan_layer
from tilefit.models.catalog import load_model


def test_sglang_tp8_ep8_is_eight_gpus_with_32_experts_each_for_glm5():
    spec = parse_launch("python -m sglang.launch_server --model-path zai-org/GLM-5 --tp 8 --ep 8")
    assert spec.gpus == 8 and (spec.layout.tp, spec.layout.ep) == (1, 8)
    plan = plan_layer(load_model("glm-5"), spec.layout)
    assert plan.local_experts == 32 and plan.routed[0].n == 2 * 2048
    assert spec.headline().startswith("8 GPUs: sglang builds MoE EP8 on 8 GPUs")


def test_vllm_expert_parallel_spans_tp_times_dp():
    spec = parse_launch("vllm serve zai-org/GLM-5 -tp 4 -dp 2 --enable-expert-parallel")
    assert spec.gpus == 8 and (spec.layout.tp, spec.layout.ep, spec.layout.dp) == (1, 8, 2)
    no_ep = parse_launch("vllm serve zai-org/GLM-5 -tp 4 -dp 2")
    assert (no_ep.layout.tp, no_ep.layout.ep) == (8, 1)  # MoE TP flattened over tp x dp


def test_sglang_dp_without_dp_attention_is_replicas():
    spec = parse_launch("sglang serve --model-path m --tp 4 --dp 2")
    assert spec.gpus == 8 and spec.replicas == 2 and spec.layout.gpus == 4


def test_settings_env_and_equals_form():
    spec = parse_launch(
        "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=1 python3 -m sglang.launch_server "
        "--model-path=nvidia/GLM-5-NVFP4 --tp-size=4 --quantization modelopt_fp4 "
        "--mem-fraction-static 0.85 --max-running-requests 64 --context-length 32768 "
        "--chunked-prefill-size 8192 --cuda-graph-bs 1 2 4 8 --kv-cache-dtype fp8_e4m3 "
        "--disable-flashinfer-autotune --moe-runner-backend flashinfer_cutlass")
    s = spec.settings
    assert spec.environ == {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "1"}
    assert (s.quantization, s.moe_backend, s.kv_cache_dtype) == ("modelopt_fp4", "flashinfer_cutlass", "fp8_e4m3")
    assert (s.mem_fraction, s.mem_fraction_kind, s.max_running_requests) == (0.85, "static", 64)
    assert (s.context_length, s.chunked_prefill_size, s.cuda_graph_batch_sizes) == (32768, 8192, (1, 2, 4, 8))
    assert s.flashinfer_autotune is False and spec.flags()["quantization"] == "modelopt_fp4"


def test_vllm_settings_and_underscore_spelling():
    spec = parse_launch("vllm serve m --tensor_parallel_size 2 --gpu-memory-utilization 0.9 "
                        "--max-num-seqs 128 --max-model-len 8192 --max-num-batched-tokens 4096")
    s = spec.settings
    assert spec.gpus == 2 and s.mem_fraction_kind == "utilization" and s.max_running_requests == 128
    assert (s.context_length, s.chunked_prefill_size) == (8192, 4096)


def test_unknown_and_ignored_flags_are_named():
    spec = parse_launch("vllm serve m --host 0.0.0.0 --frobnicate 3 --enable-prefix-caching")
    assert "--host" in spec.ignored and "--enable-prefix-caching" in spec.ignored
    assert spec.unknown == ("--frobnicate",)


def test_trtllm_yaml_overrides_the_command_line():
    yaml = "enable_attention_dp: true\nmoe_expert_parallel_size: 8\nkv_cache_config:\n  dtype: fp8\n" \
           "  free_gpu_memory_fraction: 0.7\nmoe_config:\n  backend: CUTLASS\n  disable_finalize_fusion: true\n"
    spec = parse_launch("trtllm-serve nvidia/DeepSeek-R1-FP4 --tp_size 8 --ep_size 4 --config opts.yml",
                        read_file=lambda name: yaml)
    assert (spec.layout.tp, spec.layout.ep, spec.layout.dp) == (1, 8, 8)
    s = spec.settings
    assert (s.kv_cache_dtype, s.mem_fraction, s.mem_fraction_kind, s.moe_backend) == ("fp8", 0.7, "free", "CUTLASS")
    assert spec.flags()["moe_config.disable_finalize_fusion"] == "True"


def test_legacy_sglang_switches_are_applied_and_said():
    spec = parse_launch("python -m sglang.launch_server --model-path m --tp 8 --enable-ep-moe")
    assert spec.layout.ep == 8 and any("0.5.3" in n for n in spec.notes)


@pytest.mark.parametrize("command,needle", [
    ("echo hello", "no sglang, vLLM or TensorRT-LLM server command"),
    ("vllm serve", "names no model"),
    ("python -m sglang.launch_server --model-path m --tp 8 --ep 3", "does not divide"),
    ("python -m sglang.launch_server --model-path m --tp $TP", "shell variable"),
    ("vllm serve 'm --tp 2", "cannot read the launch command"),
    ("trtllm-serve m --config missing-file.yml", "cannot read the options file"),
])
def test_bad_commands_are_one_clear_error(command, needle):
    with pytest.raises(UsageError, match=needle):
        parse_launch(command)


@pytest.mark.parametrize("engine,kw,gpus,layout", [
    ("sglang", dict(tp=8, ep=8), 8, (1, 8, 1)),  # EP carved out of TP: 8 GPUs, not 64
    ("sglang", dict(ep=8), 8, (1, 8, 1)),  # --ep alone: read as --tp 8 --ep 8, and said
    ("sglang", dict(tp=8, dp=8, enable_dp_attention=True), 8, (8, 1, 8)),
    ("sglang", dict(tp=4, dp=2), 8, (4, 1, 1)),  # two replicas of TP4
    ("vllm", dict(tp=4, dp=2, enable_expert_parallel=True), 8, (1, 8, 2)),
    ("vllm", dict(ep=8), 8, (1, 8, 1)),
    ("trtllm", dict(tp=8, ep=4), 8, (2, 4, 1)),
])
def test_tilefit_flags_mean_what_the_engine_means(engine, kw, gpus, layout):
    from tilefit.launch import parallel_of

    par = parallel_of(engine, **kw)
    assert par.gpus == gpus and (par.layout.tp, par.layout.ep, par.layout.dp) == layout


def test_sglang_attention_dp_size_and_moe_dp_size():
    # 0.5.22+: --attn-dp-size splits attention inside the TP group; moe_tp = tp // ep // moe_dp
    # (model_runner_components/moe_ep_setup.py, sglang 0.5.23).
    a = parse_launch("sglang serve --model-path m --tp 8 --attn-dp-size 4")
    assert a.gpus == 8 and (a.layout.tp, a.layout.dp, a.layout.attention_tp) == (8, 4, 2)
    m = parse_launch("sglang serve --model-path m --tp 8 --ep 2 --moe-dp-size 2")
    assert m.gpus == 8 and (m.layout.tp, m.layout.ep) == (2, 2)


def test_a_command_inside_bash_c_in_a_container():
    # NVIDIA's DGX Spark playbook shape: docker -e sets the variable the inner command expands.
    spec = parse_launch("docker exec \\\n  -e MODEL=\"nvidia/Qwen3-235B-A22B-FP4\" \\\n  -it c bash -c '\n"
                        "    mpirun -x HF_TOKEN \\\n      trtllm-serve \\\n      $MODEL \\\n"
                        "      --tp_size 2 --port 8355\n'")
    assert spec.engine == "trtllm" and spec.model == "nvidia/Qwen3-235B-A22B-FP4" and spec.gpus == 2


def test_vllm_compilation_config_cuda_graph_sizes():
    spec = parse_launch("""vllm serve m --compilation-config '{"cudagraph_capture_sizes": [1, 2, 4], "max_cudagraph_capture_size": 4}'""")
    assert spec.settings.cuda_graph_batch_sizes == (1, 2, 4) and spec.settings.cuda_graph_max_bs == 4
    assert parse_launch("""vllm serve m -O '{"cudagraph_mode": "NONE"}'""").settings.disable_cuda_graph


def test_continuation_lines_with_trailing_comments_are_joined_and_said():
    # vLLM's expert_parallel_deployment.md writes `--flag 8 \      # comment` on each line.
    spec = parse_launch("vllm serve deepseek-ai/DeepSeek-V3-0324 \\\n"
                        "    --tensor-parallel-size 1 \\      # TP\n"
                        "    --data-parallel-size 8 \\  # DP\n"
                        "    --enable-expert-parallel         # EP\n")
    assert (spec.gpus, spec.layout.ep, spec.layout.dp) == (8, 8, 8)
    assert not spec.unknown and "a shell would end the command" in spec.notes[0]
    # A comment line after `\ #` that is not followed by a flag still ends the command.
    spec = parse_launch("vllm serve m -tp 2 \\ # two GPUs\necho done\n")
    assert spec.gpus == 2 and not spec.notes


def test_unknown_flags_say_which_releases_were_read():
    from tilefit.cli.launch_args import launch_lines

    spec = parse_launch("python3 -m sglang.launch_server --model-path m --tp 8 --enable-flashmlx")
    line = next(x for x in launch_lines(spec, None) if "not understood" in x)
    assert "not in sglang wheels 0.4.0-" in line and line.endswith("--enable-flashmlx")
