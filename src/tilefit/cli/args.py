"""Argument helpers shared by commands: typed parsing of lists, positive integers and finite
numbers. Each is an argparse `type`: a refusal is argparse's one-line error with exit 2."""

from __future__ import annotations

import argparse

from tilefit.errors import UsageError
from tilefit.numeric import MAX_COUNT, bounded_int, finite_float, shown


def _count(text: str, minimum: int, wanted: str) -> int:
    """minimum..MAX_COUNT; the digits are counted before conversion, so 5,000 of them are refused."""
    try:
        return bounded_int(text, "value", minimum=minimum, maximum=MAX_COUNT)
    except UsageError:
        raise argparse.ArgumentTypeError(f"expected {wanted} up to {MAX_COUNT:,}, "
                                         f"got {shown(str(text))}") from None


def positive_int(text: str) -> int:
    """1..MAX_COUNT."""
    return _count(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """0..MAX_COUNT, for options where 0 turns the feature off."""
    return _count(text, 0, "a whole number from 0")


def positive_float(text: str) -> float:
    """A finite number above zero (nan and inf refused: neither is a timeout or a budget)."""
    try:
        return finite_float(text, "value", positive=True)
    except UsageError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {shown(str(text))}") from None


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
