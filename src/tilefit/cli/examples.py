"""Two or three worked examples per command, printed at the foot of its --help page.

Kept in one table so that every help page has them and a test can run each one; `attach` puts
them on the parsers after every command module has registered its own.
"""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "check": (
        ("GLM-5-NVFP4 on eight RTX PRO 6000s under EP8 with sglang",
         "tilefit check --model glm-5-nvfp4 --gpu rtx-pro-6000 --ep 8 --engine sglang"),
        ("vLLM's Triton path for a tuned-config folder, as JSON",
         "tilefit check --model qwen3-30b-a3b --gpu rtx-4090 --tp 2 --engine vllm --config-dir ./configs --json"),
        ("the engine's own launch command, read as sglang reads it (8 GPUs, EP8)",
         "tilefit check --gpu rtx-pro-6000 -- python -m sglang.launch_server --model-path zai-org/GLM-5-NVFP4 "
         "--tp 8 --ep 8 --quantization modelopt_fp4"),
    ),
    "plan": (
        ("GLM-5's per-GPU expert GEMMs under EP8",
         "tilefit plan --model glm-5 --gpu h200 --ep 8"),
        ("a Hugging Face config.json under TP2 at three batch sizes",
         "tilefit plan --model ./Qwen3-30B-A3B/config.json --tp 2 --batch 1,64,1024"),
        ("a vLLM command: -tp 4 -dp 2 with expert parallelism is EP8 over eight GPUs",
         "tilefit plan --gpu h200 -- vllm serve zai-org/GLM-5-FP8 -tp 4 -dp 2 --enable-expert-parallel"),
    ),
    "fit": (
        ("which Triton fused-MoE tiles fit an RTX 5090 (one row per tile and pipeline depth)",
         "tilefit fit --family triton-moe --gpu rtx-5090"),
        ("one config, with its shared-memory breakdown",
         "tilefit fit --family triton-moe --arch sm120 --config 64,128,64,8,4,3"),
        ("FlashInfer's CUTLASS tactics on SM120 and the blocklist for the ones that fail",
         "tilefit fit --family flashinfer-cutlass --arch sm120 --dtype nvfp4 --emit-blocklist"),
    ),
    "compare": (
        ("TP8 against EP8 for GLM-5-NVFP4 on eight RTX PRO 6000s",
         "tilefit compare --model glm-5-nvfp4 --gpu rtx-pro-6000 --gpus 8"),
        ("two H200s, predicted and measured",
         "tilefit compare --model glm-5 --gpu h200 --gpus 2 --measure --json > compare.json"),
    ),
    "diagnose": (
        ("a server log after warmup", "tilefit diagnose sglang.log"),
        ("a log that is still being written, until it settles",
         "tilefit diagnose server.log --follow --max-wait 600"),
        ("from a pipe, as JSON", "docker logs vllm 2>&1 | tilefit diagnose - --json"),
    ),
    "tune": (
        ("GLM-5 under EP8 on this machine's GPUs, ten minutes at most",
         "tilefit tune --model glm-5 --ep 8 --budget 10 --out glm5-ep8"),
        ("continue a run that was killed", "tilefit tune --model glm-5 --ep 8 --out glm5-ep8 --resume"),
        ("the kernel vLLM will run, at three batch sizes",
         "tilefit tune --model qwen3-30b-a3b --target vllm --batches 1,64,1024"),
    ),
    "report": (
        ("the seed deployment: fit maps, tactics, TP vs EP",
         "tilefit report --model glm-5-nvfp4 --gpu rtx-pro-6000 --gpus 8 --engine sglang -o glm5.html"),
        ("recorded results: a tune folder and a compare --measure JSON, with PNGs too",
         "tilefit report --tune glm5-ep8/ --compare compare.json -o h200.html --png figures/"),
    ),
    "gpus": (
        ("the catalog", "tilefit gpus"),
        ("with the public source of every figure", "tilefit gpus --sources"),
    ),
    "models": (
        ("the presets", "tilefit models"),
        ("as JSON, for scripts", "tilefit models --json"),
    ),
}


def epilog(command: str) -> str | None:
    examples = EXAMPLES.get(command)
    if not examples:
        return None
    return "examples:\n" + "\n".join(f"  # {what}\n  {line}" for what, line in examples)


def attach(sub: argparse._SubParsersAction) -> None:
    """Put each command's examples at the foot of its help page."""
    for name, parser in sub.choices.items():
        if parser.epilog is None:
            parser.epilog = epilog(name)
