"""Write src/tilefit/launch/data/flags.toml: every flag the engines' parsers accept, with the first
and last wheel version read that accept it (so the launch parser can tell ignored from unknown)."""

from __future__ import annotations

from pathlib import Path

from wheel_facts import flags, wheels

# trtllm-serve's click options (tensorrt_llm/commands/serve.py, NVIDIA/TensorRT-LLM at 00209af1);
# the TensorRT-LLM wheel was not read (multi-GB), its source file was.
TRTLLM = ("--tokenizer", "--custom_tokenizer", "--host", "--port", "--backend", "--custom_module_dirs",
          "--log_level", "--max_beam_width", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
          "--tensor_parallel_size", "--tp_size", "--pipeline_parallel_size", "--pp_size",
          "--context_parallel_size", "--cp_size", "--moe_expert_parallel_size", "--ep_size",
          "--moe_cluster_parallel_size", "--cluster_size", "--gpus_per_node",
          "--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction",
          "--num_postprocess_workers", "--trust_remote_code", "--revision", "--config",
          "--extra_llm_api_options", "--reasoning_parser", "--tool_parser",
          "--metadata_server_config_file", "--server_role", "--fail_fast_on_attention_window_too_large",
          "--otlp_traces_endpoint", "--disagg_cluster_uri", "--enable_chunked_prefill",
          "--media_io_kwargs", "--chat_template")


def table(cache: Path, flags_cache: Path | None = None) -> str:
    """The table from the releases in `cache` and, for flags only, in `flags_cache` (older releases
    whose other facts tilefit does not encode, e.g. sglang 0.4.0-0.5.9: their commands are still
    posted, and their flags are real flags, not typos)."""
    out = ["# Flags each engine's launch parser accepts: [first, last] wheel version read that has it.",
           "# Written by scripts/engine_facts.py --write-flags from the extracted wheels; do not edit.", ""]
    readers = {"sglang": flags.sglang_flags, "vllm": flags.vllm_flags}

    def releases(engine: str) -> list[tuple[str, Path]]:
        found = {v: cache / engine / v for v in wheels.versions_cached(cache, engine)}
        if flags_cache is not None:
            found.update({v: flags_cache / engine / v for v in wheels.versions_cached(flags_cache, engine)
                          if v not in found})
        return sorted(found.items(), key=lambda item: wheels.version_key(item[0]))

    out.append("[sources]")
    for engine in readers:
        vs = [v for v, _ in releases(engine)]
        out.append(f'{engine} = "{engine} wheels {vs[0]}-{vs[-1]} ({len(vs)} versions)"')
    out.append('trtllm = "NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py at 00209af1 (click options)"')
    for engine, read in readers.items():
        seen: dict[str, list[str]] = {}
        for v, root in releases(engine):
            for f in read(root):
                seen.setdefault(f, [v, v])[1] = v
        out += ["", f"[{engine}]"] + [f'"{f}" = ["{a}", "{b}"]' for f, (a, b) in sorted(seen.items())]
    out += ["", "[trtllm]"] + [f'"{f}" = ["", ""]' for f in TRTLLM]
    return "\n".join(out) + "\n"
