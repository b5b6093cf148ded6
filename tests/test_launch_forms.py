"""Launch-command forms the second held-out set showed (benchmarks/RESULTS.md, 2026-12-02): shell
redirections, trtllm-serve's module form, vLLM's prefill context parallelism, and an argparse
prefix that was unique in older releases only."""

from __future__ import annotations

import pytest

from tilefit.launch import parse_launch
from tilefit.launch.shell import parse_command


@pytest.mark.parametrize("text, args", [
    ("vllm serve m -tp 2 2>&1 | tee x.log", ("m", "-tp", "2")),
    ("python -m sglang.launch_server --model-path m --tp 8 > log.txt 2>&1 &",
     ("--model-path", "m", "--tp", "8")),
    ("nohup vllm serve m -tp 4 >> out.log 2> err.log < /dev/null &", ("m", "-tp", "4")),
    ("vllm serve m --x a>b", ("m", "--x", "a>b")),  # inside a word: not a redirection
    ("vllm serve m --chat-template '>{x}' &> all.log", ("m", "--chat-template", ">{x}")),
    ("vllm serve m -tp 2 > 'my log.txt' 2>&1", ("m", "-tp", "2")),
    ('vllm serve m -tp 2 >"a b" &', ("m", "-tp", "2")),
    ("vllm serve m -tp 2 2>", ("m", "-tp", "2")),  # a redirection cut off at the end of the paste
])
def test_redirections_are_not_arguments(text, args):
    assert parse_command(text).args == args


def test_trtllm_serve_module_form():
    # tensorrt_llm/commands/serve.py ends `if __name__ == "__main__": main()` (NVIDIA/TensorRT-LLM
    # at 00209af1); its click group runs `serve` when the first word is no subcommand.
    for cmd in ('srun -N 2 bash -c "trtllm-llmapi-launch python3 -m tensorrt_llm.commands.serve /m '
                '--tp_size 8 --ep_size 8"', "python3 -m tensorrt_llm.commands.serve serve /m --tp_size 8 "
                "--ep_size 8"):
        spec = parse_launch(cmd)
        assert (spec.engine, spec.model, spec.gpus, spec.layout.ep) == ("trtllm", "/m", 8, 8)


def test_vllm_prefill_context_parallel_multiplies_the_gpus():
    # vLLM docs, context_parallel_deployment.md: -pcp 4 with --enable-expert-parallel on one node.
    spec = parse_launch("vllm serve m --tensor-parallel-size 1 --prefill-context-parallel-size 4 "
                        "--enable-expert-parallel")
    assert (spec.gpus, spec.layout.ep, spec.layout.tp, spec.layout.attention_tp) == (4, 4, 1, 1)
    spec = parse_launch("vllm serve m -tp 2 -pcp 2 -pp 2")
    assert (spec.gpus, spec.layout.tp, spec.layout.ep, spec.layout.attention_tp) == (8, 4, 1, 2)


def test_a_prefix_unique_before_newer_flags_came_is_read_as_its_flag():
    # --speculative-draft: only --speculative-draft-model-path has it before sglang 0.5.2 (sglang#7762)
    spec = parse_launch("python3 -m sglang.launch_server --model-path m --tp 8 --speculative-algorithm "
                        "NEXTN --speculative-draft d")
    assert "--speculative-draft" not in spec.unknown
    assert any("read as --speculative-draft-model-path" in n for n in spec.notes)


def test_a_prefix_of_a_removed_flag_is_read_as_the_newest_release_reads_it():
    # --enable-ep: --enable-ep-moe (removed, made EP = TP) and --enable-eplb share it until the
    # first is gone; the newest releases read --enable-eplb, which leaves the layout alone.
    spec = parse_launch("python3 -m sglang.launch_server --model-path m --tp 8 --enable-ep")
    assert spec.layout.ep == 1 and any("read as --enable-eplb" in n for n in spec.notes)


@pytest.mark.parametrize("text, args", [
    # vllm-project/vllm#23819 (held_out3, vllm-f3): an empty flag variable leaves no word
    ('F=""\nvllm serve m -tp 2 ${F} --max-num-seqs 8', ("m", "-tp", "2", "--max-num-seqs", "8")),
    # a flag list in one variable is split into its words, as a shell splits $EXTRA
    ('EXTRA="--tp 8 --ep 8"\npython -m sglang.launch_server --model-path m $EXTRA',
     ("--model-path", "m", "--tp", "8", "--ep", "8")),
    # inside a larger word the value is kept in place; an unknown variable stays as written
    ('D=/models\nvllm serve $D/glm -tp ${N}', ("/models/glm", "-tp", "${N}")),
])
def test_unquoted_expansions_split_as_a_shell_splits_them(text, args):
    assert parse_command(text).args == args
