"""Command-line types the bench scripts share (argparse ``type=`` callables: a bad value is a
usage error, exit 2, never a traceback)."""

from __future__ import annotations

import argparse


def day_window(text: str) -> tuple[float, float]:
    """``FROM:TO`` in days since the trace's start, ``0 <= FROM < TO``."""
    try:
        low, high = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FROM:TO in days, e.g. 28:42, not {text!r}"
        ) from None
    if not 0 <= low < high:
        raise argparse.ArgumentTypeError(f"window {text!r}: needs 0 <= FROM < TO (days)")
    return low, high
