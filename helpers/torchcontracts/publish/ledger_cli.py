"""The options of ``torchcontracts ledger``, in a module light enough for the CLI's parser (no Jupyter, no torch)."""

from __future__ import annotations

import argparse

__all__ = ["CACHE_CSV", "CELL_TIMEOUT", "add_arguments"]

CELL_TIMEOUT = 120  # seconds one code cell may run
CACHE_CSV = "ledger_cpu.csv"  # the cached CPU ledger in the package's data/ (lesson 10 reads it), with a .json beside


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``torchcontracts ledger``."""
    p.add_argument("--out", default="ledger.csv")
    p.add_argument("--only", nargs="*", help="lesson number prefixes, e.g. 01 02")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=CELL_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds one code cell may run (default {CELL_TIMEOUT})",
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help=f"write the course's cached CPU ledger (data/{CACHE_CSV} and its .json) instead of --out",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="LEDGER.csv",
        help="run nothing: print the claims whose verdict or evidence differs between two or more ledgers",
    )
    p.add_argument("--check", action="store_true", help="with --compare: exit 1 when a claim differs")
    p.add_argument(
        "--from-records",
        metavar="DIR",
        help="run nothing: build the ledger from the <lesson>.jsonl verdict files a test run left in DIR "
        "(tests/conftest.py writes them when TORCHCONTRACTS_LEDGER_DIR is set)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="also keep the ledger in the package as this torch build's (data/ledgers/torch-<version>.csv)",
    )
    return p
