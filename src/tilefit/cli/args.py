"""Argument helpers shared by commands: typed parsing of lists and positive integers."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def int_list(text: str) -> tuple[int, ...]:
    """'1,64,1024' -> (1, 64, 1024); every item a positive integer, no duplicates kept."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of positive integers")
    values = []
    for t in items:
        v = positive_int(t)
        if v not in values:
            values.append(v)
    return tuple(values)


def add_target_args(p: argparse.ArgumentParser, *, gpu_help: str = "GPU name (see `tilefit gpus`); "
                    "defaults to the local GPU when one is present") -> None:
    p.add_argument("--gpu", metavar="NAME", help=gpu_help)
    p.add_argument("--arch", metavar="smXX", help="target arch instead of a GPU name, e.g. sm120")


def add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON on stdout instead of a table")
