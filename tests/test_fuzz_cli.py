"""The bad-input campaign of issue 14 as a test: every hand-written hostile input of ``tests/badinputs.py``, for
every subcommand, ends in exit status 2 with one line on stderr naming the file and the field, no traceback,
nothing created or changed, in bounded time and memory.

Cases run in child processes, one per cause (``--dist loadgroup`` keeps a cause on one worker), each under an
address-space limit and a per-case deadline, so a regression that hangs or eats memory fails its own case
instead of the test run. The workbook's signals (cause 12) are in ``test_workbook_signals.py``.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import tempfile
from pathlib import Path

import pytest

from badinputs import Case, build, describe, problems, release_immutable, run_group
from pdtune.cli import build_parser

ROOT = Path(tempfile.mkdtemp(prefix="pdtune-badinputs-"))
CASES = build(ROOT / "corpus")
_OUTCOMES: dict[str, dict] = {}


@atexit.register
def _remove_corpus() -> None:
    release_immutable(ROOT / "corpus")
    shutil.rmtree(ROOT, ignore_errors=True)


def outcome(case: Case) -> dict:
    if case.id not in _OUTCOMES:
        _OUTCOMES.update(run_group([c for c in CASES if c.group == case.group], ROOT / "corpus"))
    return _OUTCOMES[case.id]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.xdist_group(c.group)) for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case: Case) -> None:
    found = problems(case, outcome(case))
    assert not found, "; ".join(found) + "\n" + describe(case, outcome(case))


def subcommands() -> set[str]:
    """Every command ``pdtune --help`` lists, with the actions of the nested ones (``dataset generate``)."""
    names: set[str] = set()

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                    if nested:
                        walk(sub, f"{prefix}{name} ")
                    else:
                        names.add(f"{prefix}{name}")

    walk(build_parser(), "")
    return names


def command_of(case: Case) -> str:
    return " ".join(case.argv[:2]) if case.argv[0] == "dataset" else case.argv[0]


def test_every_subcommand_and_every_cause_is_covered() -> None:
    covered = {command_of(c) for c in CASES}
    assert subcommands() <= covered, f"subcommands without a bad input: {sorted(subcommands() - covered)}"
    causes = {c.cause for c in CASES}
    assert set(range(1, 15)) - {12} <= causes, "cause 12 (signals) is test_workbook_signals.py's"
    assert {2202, 2203} <= causes, "issue 22's causes 2 and 3: plan files recipe reads"
    assert len(CASES) >= 400
