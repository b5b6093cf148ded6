"""scripts/wheel_facts/flags.py on small extracted-wheel trees: the --no-X forms argparse's
BooleanOptionalAction adds (vLLM get_kwargs on bool fields, sglang's explicit actions), the
frontend flags of (Base)FrontendArgs wherever the file lives, and no code read as a field."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from wheel_facts import flags  # noqa: E402

ARG_UTILS = '''
class EngineArgs:
    enable_prefix_caching: bool | None = None
    enable_return_routed_experts: bool | str | None = None
    disable_log_stats: bool = False
    max_num_seqs: int | None = None

    @staticmethod
    def add_cli_args(parser):
        cache_group.add_argument(
            "--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
        group.add_argument("--enable-return-routed-experts", **model_kwargs["enable_return_routed_experts"])
        group.add_argument("--max-num-seqs", **scheduler_kwargs["max_num_seqs"])
        lora_group.add_argument("--enable-lora", action=argparse.BooleanOptionalAction, help="x (y)")
        parser.add_argument("--disable-log-stats", action="store_true")
'''

COMMON_CLI_ARGS = '''
class BaseFrontendArgs:
    headless: bool = False
    host: str | None = None
    if TYPE_CHECKING:
        pass
    else:
        pass


class FrontendArgs(BaseFrontendArgs):
    enable_auto_tool_choice: bool = False

    @classmethod
    def add_cli_args(cls, parser):
        frontend_kwargs = get_kwargs(cls)


def make_arg_parser(
    args: argparse.Namespace,
):
    pass
'''


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_vllm_negated_and_frontend_flags(tmp_path):
    _write(tmp_path, "vllm/engine/arg_utils.py", ARG_UTILS)
    _write(tmp_path, "vllm/entrypoints/common/cli_args.py", COMMON_CLI_ARGS)
    got = flags.vllm_flags(tmp_path)
    assert {"--no-enable-prefix-caching", "--no-enable-lora", "--headless", "--no-headless",
            "--host", "--enable-auto-tool-choice", "--no-enable-auto-tool-choice"} <= got
    # store_true, int and bool-or-string options have no --no- form; code is not a field
    assert not {"--no-disable-log-stats", "--no-max-num-seqs", "--no-enable-return-routed-experts",
                "--no-host", "--else", "--args"} & got


def test_sglang_negated_flags(tmp_path):
    _write(tmp_path, "sglang/srt/server_args.py",
           'parser.add_argument("--enable-tf32-matmul", action=argparse.BooleanOptionalAction)\n'
           'parser.add_argument("--enable-dp-attention", action="store_true")\n')
    _write(tmp_path, "sglang/srt/arg_groups/fields/parallel.py",
           "    dcp_replicate_q_proj: A[\n        Optional[bool],\n"
           "        Arg(help='x', action=argparse.BooleanOptionalAction),\n    ] = None\n"
           "    attn_dp_size: A[\n        int,\n        Arg(help='y'),\n    ] = 1\n")
    got = flags.sglang_flags(tmp_path)
    assert {"--no-enable-tf32-matmul", "--no-dcp-replicate-q-proj", "--attn-dp-size"} <= got
    assert not {"--no-enable-dp-attention", "--no-attn-dp-size"} & got
