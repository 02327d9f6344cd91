"""The one bad-input harness as a test: every hand-written hostile input of ``tests/badinputs.py`` (the campaigns
of issues 14 and 22, and the broken fixture files under ``tests/fixtures/*/bad``), for every subcommand, ends in
exit status 2 with one line on stderr, ``pdtune COMMAND: error: ``, naming the file and the field, nothing on
stdout, no traceback, nothing created or changed, in bounded time and memory.

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

from badinputs import FIXTURES, Case, build, command_of, describe, problems, release_immutable, run_group
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


# slow: the corpus runs in about sixty child processes (over half of `make test-fast` if it ran there)
@pytest.mark.slow
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


def test_every_subcommand_and_every_cause_is_covered() -> None:
    covered = {command_of(c) for c in CASES}
    assert subcommands() <= covered, f"subcommands without a bad input: {sorted(subcommands() - covered)}"
    causes = {c.cause for c in CASES}
    assert set(range(1, 15)) - {12} <= causes, "cause 12 (signals) is test_workbook_signals.py's"
    assert {2202, 2203} <= causes, "issue 22's causes 2 and 3: plan files recipe reads"
    # issue 22: outputs whole or absent (the signals themselves: test_folder_swap.py)
    assert {2204, 2211} <= causes
    assert len(CASES) >= 400
    # every broken fixture file has its case (they were a harness of their own)
    assert len([c for c in CASES if c.id.startswith("fixture-")]) >= 20
    assert len(list((FIXTURES / "results" / "bad").iterdir())) >= 20


def test_the_harness_sees_what_a_case_creates_or_changes(tmp_path: Path) -> None:
    """``snapshot``/``changes``, which judge "nothing created or changed": a new file, a rewritten one, a new
    folder; a FIFO is listed without being opened, a link to a folder is not followed."""
    import os

    from badinputs import changes, snapshot

    (tmp_path / "a").mkdir()
    kept = tmp_path / "a" / "kept.json"
    kept.write_text("{}")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    before = snapshot(tmp_path)
    assert str(tmp_path / "pipe") in before and str(tmp_path / "link" / "kept.json") not in before
    assert changes(before, snapshot(tmp_path)) == []
    kept.write_text('{"x": 1}')
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / "new").write_text("")
    assert changes(before, snapshot(tmp_path)) == [str(tmp_path / "a" / "b"), str(tmp_path / "a" / "b" / "new"),
                                                   str(kept)]
