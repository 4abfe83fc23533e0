"""The ``torchcontracts`` command: doctor, ledger, record, site, labs build/check, grade, new-lesson, course-map."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from torchcontracts import scaffold  # light: its arguments are the command's

__all__ = ["build_parser", "main"]


def _doctor(args: argparse.Namespace) -> int:
    from torchcontracts.core.device import diagnose, render

    report = diagnose()
    print(report.to_json() if args.json else render(report))
    return 0 if report.ok else 1


def _ledger(args: argparse.Namespace) -> int:
    from torchcontracts.publish.ledger import run

    return run(args)


def _record(args: argparse.Namespace) -> int:
    from torchcontracts.publish.record import run

    return run(args)


def _site(args: argparse.Namespace) -> int:
    from torchcontracts.publish.site import run

    return run(args)


def _new_lesson(args: argparse.Namespace) -> int:
    from torchcontracts.scaffold import run

    return run(args)


def _course_map(args: argparse.Namespace) -> int:
    from torchcontracts.publish.course_map import run

    return run(args)


def _labs(args: argparse.Namespace) -> int:
    from torchcontracts.labs.build import LabFormatError, build_all, check_all, find_root

    try:
        root = find_root()
        if args.action == "build":
            written = build_all(root)
            print(
                "labs: " + (", ".join(str(p.relative_to(root)) for p in written) if written else "already up to date")
            )
            return 0
        problems = check_all(root)
    except (LabFormatError, FileNotFoundError) as err:
        print(f"labs: {err}")
        return 1
    if problems:
        for p in problems:
            print(f"labs check: {p}")
        print("labs check: run `torchcontracts labs build` (never edit labs/ by hand)")
        return 1
    print("labs check: labs/ is in step with solutions/")
    return 0


def _grade(args: argparse.Namespace) -> int:
    try:
        from torchcontracts.grading.cli import cli_main
    except ImportError:
        print("grade: the grader is not installed in this version of torchcontracts")
        return 1
    return cli_main(args.rest)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grade"]:  # the grader parses its own options, wherever they stand
        return _grade(argparse.Namespace(rest=argv[1:]))
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def build_parser() -> argparse.ArgumentParser:
    """The command's parser, one subparser per tool (tests compare it with each module's own options)."""
    parser = argparse.ArgumentParser(prog="torchcontracts", description="Torch Contracts course tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="check that this machine can run the course (exit 1 if not)")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("ledger", help="run the lessons headless and write one row per claim")
    from torchcontracts.publish.ledger_cli import add_arguments as ledger_arguments  # light: no torch, no Jupyter

    ledger_arguments(p).set_defaults(func=_ledger)
    p = sub.add_parser("record", help="on a GPU: run every lesson and GPU comparison on CUDA, write the GPU record")
    from torchcontracts.publish.record import add_arguments as record_arguments  # light: no torch, no Jupyter

    record_arguments(p).set_defaults(func=_record)
    p = sub.add_parser("site", help="build the course site with Sphinx (lessons executed here, cached; labs; ledger)")
    p.add_argument("out", metavar="OUT", help="the folder to write (created; its old pages are replaced)")
    p.add_argument("--only", nargs="*", help="lesson number prefixes, e.g. 00 01 (labs of those lessons only)")
    p.add_argument("--no-labs", action="store_true", help="leave the student labs out")
    p.add_argument("--quiet", action="store_true", help="print only the last line (default: one line per page)")
    p.add_argument("--cell-timeout", type=float, default=120, metavar="SECONDS", help="seconds one cell may run")
    p.add_argument(
        "--repo", metavar="URL", help="the course's GitHub URL, for Open in Colab (default $TORCHCONTRACTS_REPO)"
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        help="the build cache: Sphinx sources, doctrees, executed lessons (default .site-cache/ in the course root)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="empty the build cache first: every lesson runs again (a lesson re-runs by itself when its code cells, "
        "its package folder, core/, data/, torch or a TORCHCONTRACTS_* variable changed; --fresh for anything else)",
    )
    p.set_defaults(func=_site)
    p = sub.add_parser("labs", help="build labs/ from solutions/, or check they are in step")
    p.add_argument("action", choices=["build", "check"])
    p.set_defaults(func=_labs)
    p = sub.add_parser("new-lesson", help="scaffold a lesson: its notebook, package folder and manifest row")
    scaffold.add_arguments(p).set_defaults(func=_new_lesson)
    p = sub.add_parser("course-map", help="print the README's course map from the manifest (--write: update README)")
    p.add_argument("--write", action="store_true", help="rewrite the README's course map in place")
    p.set_defaults(func=_course_map)
    p = sub.add_parser("grade", help="grade lab submissions (see `torchcontracts grade --help`)", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_grade)
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
