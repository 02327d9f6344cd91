"""``pdtune workbook``: every chapter re-executed for the model and cluster of one parameters file."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pdtune.commands._common import shared_flag, whole_flag
from pdtune.paths import REPO_ROOT, params_dir
from pdtune.workbook import (
    CELL_TIMEOUT,
    HTML_DIR,
    SUMMARY_MD,
    WorkbookResult,
    load_parameters,
    run_workbook,
)

EXIT_CHAPTER_FAILED = 1

EPILOG = f"""\
The parameters file is YAML; its keys are the chapters' parameter names (model, gpu, gpu_memory_gib,
gpu_memory_utilization, isl, osl, prefill_topologies, decode_topologies, prefill_results, decode_results,
disagg_results, vllm, accuracy_threshold, ...). Paths are relative to the file. Examples, and every key
with its type, are in {params_dir()}; the book's page "Reproduce on your cluster" walks through one.

Everything is checked before a chapter runs: an unknown key, a wrong type or a missing file exits 2 and
creates nothing. A chapter that fails does not stop the others; the run then exits {EXIT_CHAPTER_FAILED} and
names the chapter and the cell. DIR appears only when the run is over (written beside it, then renamed).
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "workbook",
        help="re-run every chapter for the model and cluster of a parameters file",
        description=(
            "Executes each chapter of the book with papermill, injecting the parameters of PARAMS.yaml, and "
            "writes the executed notebooks, summary.json and summary.md (and with --html a small HTML book) "
            "into DIR."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("params", metavar="PARAMS.yaml", help="the parameters file")
    shared_flag(p, "--out", required=True,
                help="output folder (must not exist, unless --force)")
    p.add_argument("--html", action="store_true",
                   help=f"also build the executed notebooks as a book in DIR/{HTML_DIR}")
    p.add_argument("--force", action="store_true", help="replace DIR if it holds an earlier workbook output")
    p.add_argument("--jobs", type=whole_flag(256, "chapters at once"), default=min(2, os.cpu_count() or 1), metavar="N",
                   help="chapters run at once (default: 2, or 1 on one core)")
    p.add_argument("--timeout", type=whole_flag(7 * 86400, "seconds (a week)"), default=CELL_TIMEOUT, metavar="S",
                   help=f"seconds one cell may run before its chapter fails (default {CELL_TIMEOUT})")
    p.add_argument("--book", type=Path, default=REPO_ROOT, metavar="ROOT",
                   help="the book whose _toc.yml lists the chapters (default: this repository)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars or progress lines, only the final report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params = load_parameters(args.params)
    result = run_workbook(
        params, args.out, book_root=args.book, html=args.html, force=args.force, jobs=args.jobs,
        cell_timeout=args.timeout,
        progress=not args.quiet and sys.stderr.isatty(),
        log=None if args.quiet else (lambda line: print(f"pdtune workbook: {line}", file=sys.stderr)),
    )
    print(report(result))
    if not result.ok:
        problems = [f"{c.name} {c.describe()}" for c in result.failures]
        if result.html is not None and not result.html.built:
            problems.append(f"HTML book not built: {result.html.message}")
        print(f"pdtune workbook: error: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_CHAPTER_FAILED
    return 0


def report(result: WorkbookResult) -> str:
    """What ran, how long it took, where the files are."""
    width = max(len(c.name) for c in result.chapters)
    lines = [f"{result.out}/"]
    for c in result.chapters:
        where = f"  {c.notebook}" if c.notebook and c.status == "ok" else ""
        lines.append(f"  {c.number} {c.name:<{width}}  {c.describe()}{where}")
        lines += [f"      note: {n}" for n in c.notes]
    lines.append(f"  summary: {SUMMARY_MD}, summary.json")
    if result.html is not None:
        if result.html.built:
            warnings = result.html.warnings
            extra = f", {warnings} warning(s), see {result.html.log}" if warnings else ""
            lines.append(f"  html: {HTML_DIR}/index.html{extra}")
        else:
            lines.append(f"  html: not built ({result.html.message}); see {result.html.log}")
    return "\n".join(lines)
