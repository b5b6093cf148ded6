"""`tilefit check`: GO / GO-WITH-WARNINGS / NO-GO for a planned deployment, before it launches."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tilefit.check.types import DEFAULT_BATCHES
from tilefit.cli.args import add_json_arg, int_list, positive_int
from tilefit.cli.memory_args import add_memory_args, memory_settings
from tilefit.cli.launch_args import add_launch_args, deployment, launch_lines, model_of
from tilefit.cli.output import Block, Table, plain, print_json, show

if TYPE_CHECKING:
    from tilefit.check import CheckReport


def register(sub: argparse._SubParsersAction) -> None:
    from tilefit.engines import engine_names

    p = sub.add_parser("check", help="go/no-go for a deployment: what fails at warmup and what to set",
                       description="Predict what a serving engine's MoE warmup will do on a GPU: the kernel "
                                   "family it runs, the configs/tactics that cannot launch, whether that is "
                                   "fatal, and the fix. Exit 0 for GO and GO-WITH-WARNINGS, 1 for NO-GO.")
    p.add_argument("--model", metavar="M", help="preset, config.json path or Hugging Face id "
                                                   "(default: the launch command's model)")
    p.add_argument("--gpu", required=True, metavar="NAME", help="GPU name (see `tilefit gpus`)")
    p.add_argument("--engine", choices=engine_names(),
                   help="the serving engine whose MoE warmup to predict (default: the launch command's)")
    p.add_argument("--tp", type=positive_int, default=1, help="the engine's --tp (sglang: GPUs of a replica)")
    p.add_argument("--ep", type=positive_int, default=1,
                   help="the engine's --ep (sglang: carved out of --tp; vLLM: see --enable-expert-parallel)")
    p.add_argument("--dp", type=positive_int, default=1, help="the engine's --dp")
    p.add_argument("--gpus", type=positive_int, metavar="N", help="GPUs you have: said when the layout needs more")
    p.add_argument("--backend", default="auto", choices=("auto", "triton", "flashinfer-cutlass"),
                   help="MoE kernel family (default: the engine's own rule)")
    p.add_argument("--engine-version", metavar="V",
                   help="engine version (default: not given; where behaviour depends on it, e.g. sglang's "
                        "fused finalize, the worst case is assumed)")
    p.add_argument("--flashinfer", metavar="V", help="FlashInfer version (default: newest catalogued)")
    p.add_argument("--batch", type=int_list, default=DEFAULT_BATCHES, metavar="B,B,...",
                   help="batch sizes whose engine default Triton configs to judge (a tuned config file is "
                        "judged whole) (default: %(default)s)")
    p.add_argument("--config-dir", metavar="DIR", help="folder of tuned config files the engine will be "
                                                        "pointed at (searched first)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="a variable of the engine's environment (repeatable), on top of this shell's, e.g. "
                        "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0 or VLLM_TUNED_CONFIG_FOLDER=/configs")
    add_memory_args(p, engine=False)
    add_json_arg(p)
    add_launch_args(p)
    p.set_defaults(func=run)


def _environ(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    """This shell's environment with --env KEY=VALUE on top: what the engine will start with."""
    import os

    from tilefit.errors import UsageError

    env = dict(os.environ)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--env {pair!r}: write KEY=VALUE")
        env[key.strip()] = value
    return tuple(sorted(env.items()))


def run(args: argparse.Namespace) -> int:
    from tilefit.check import CheckRequest, run_check

    spec = deployment(args)
    environ = dict(_environ(args.env))
    environ.update(spec.environ)  # what the launch command sets wins over this shell
    report = run_check(CheckRequest(
        model=model_of(args, spec if spec.argv else None) or spec.model, gpu=args.gpu, engine=spec.engine, tp=args.tp, ep=args.ep,
        dp=args.dp, backend=args.backend, engine_version=args.engine_version,
        family_options=(("flashinfer", args.flashinfer),) if args.flashinfer else (),
        batches=tuple(args.batch), config_dir=args.config_dir, environ=tuple(sorted(environ.items())),
        layout=spec.layout, flags=tuple(spec.flags().items()) if spec.argv else None,
        memory=memory_settings(args, spec if spec.argv else None), a2a_backend=args.a2a_backend))
    launch = spec.as_dict()
    if args.json:
        print_json({**report.as_dict(), "launch": launch})
    else:
        out = blocks(report, launch)
        at = 2 if len(out) > 1 and str(out[1]).startswith("    ") else 1
        show(*out[:at], *launch_lines(spec, args.gpus, headline=False), *out[at:])
    return report.exit_code


def render(report: CheckReport, launch: dict[str, Any] | None = None) -> str:
    """The report as the plain text that pipes and golden files see."""
    return plain(*blocks(report, launch))


def blocks(report: CheckReport, launch: dict[str, Any] | None = None) -> list[Block]:
    """A short headline (verdict, deployment, the worst finding on the line below), then the detail."""
    m, g, lay, b = report.model, report.gpu, report.layout, report.backend
    findings = report.ordered()
    worst = [f for f in findings if f.severity != "info"]
    engine = (f"{report.engine} {report.engine_version}" if report.engine_version
              else f"{report.engine} (version not given: worst case)")
    # The GPUs the engine's command uses (replicas and pipeline stages included) and its layout.
    gpus = (launch or {}).get("gpus", lay.gpus)
    label = lay.label() + (f", attention DP{lay.dp}" if lay.dp > 1 else "")
    if gpus != lay.gpus:
        label += f" per replica of {lay.gpus} GPUs"
    out: list[Block] = [f"{report.verdict}: {m.name} on {gpus} x {g.key} ({g.arch.name}), {label}, {engine}"]
    if worst:
        out.append(f"    {worst[0].title}" + (f" (+{len(worst) - 1} more below)" if len(worst) > 1 else ""))
    out.append("")
    lines = [f"GPU: {g.name}",
             f"MoE kernel: {b.family} {b.family_dtype} ({b.engine_backend}; selected by {b.selector})"]
    if report.checked is not None:
        lines.append(report.checked.line())
    out += [*lines, "", Table.of(["gemm", "groups", "N", "K"], [(x.name, x.groups, x.n, x.k) for x in report.gemms],
                                 "lrrr"), ""]
    if report.memory is not None:
        from tilefit.cli.memory_view import render_memory_table

        out += ["device memory per GPU (verdict and fixes in the memory finding below):",
                render_memory_table(report.memory), ""]
    for f in findings:
        lines = [f"[{f.severity.upper()}] {f.title}"]
        lines += [f"    {x}" for x in f.details]
        for r in f.remedies:
            lines.append(f"    fix ({r.kind}): {r.text}")
            if r.setting:
                lines += [f"        {s}" for s in r.setting.splitlines()]
        out += ["\n".join(lines), ""]
    return out[:-1]
