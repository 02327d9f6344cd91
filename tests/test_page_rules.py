"""Every rule a chapter page shows as its own short function equals the package's, over many inputs.

A page writes a core rule as a few lines of plain Python (``notebooks/README.md``, "A chapter is a lesson"),
so a reader sees the formula as code; the chapter's numbers still come from ``pdtune``. Here each page
function (read back by :mod:`pagecode`, run alone) is called beside the package on the same inputs drawn by
hypothesis, and the two must agree exactly. The package side goes through the public path the chapters use
(``plan_state`` on a model built from a config, a ``Waterfall``, ``capture_sizes`` ...), so the page cannot
drift from vLLM's arithmetic as ``pdtune`` follows it.

To add a rule: define it in the page, add a :class:`PageRule` to :data:`RULES` with the package's way of
computing the same thing and a strategy for its arguments. A page function not listed here fails
:func:`test_every_page_function_is_held_to_the_package`; a lesson page without one fails
:func:`test_every_lesson_page_shows_a_rule` unless it is in :data:`RULES_PENDING`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagecode import defined_names, page_functions, pages


@dataclass(frozen=True)
class PageRule:
    page: str  # notebooks/<page>.md
    name: str  # the function the page defines
    package: Callable[..., Any]  # the same quantity, computed by pdtune
    inputs: st.SearchStrategy[dict[str, Any]]  # keyword arguments for both

    @property
    def id(self) -> str:
        return f"{self.page}:{self.name}"


RULES: list[PageRule] = []

#: Functions a page defines that are not rules (an explorer's callback, say), with why.
NOT_RULES: dict[tuple[str, str], str] = {
    ("05_prefill", "reload"): "the live explorer's callback: it calls the package, it states no rule",
}

#: Lesson pages that show no rule of their own yet, each with who is writing it. A page listed here must
#: still have none (else take it off the list).
RULES_PENDING: dict[str, str] = {
    "01_state": "bookcore (issue 21)",
    "02_memory": "bookcore (issue 21)",
    "03_graphs": "bookcore (issue 21)",
    "04_concurrency": "bookcore (issue 21)",
    "05_prefill": "bookiso (issue 21)",
    "06_decode": "bookiso (issue 21)",
    "07_frontier": "bookiso (issue 21)",
    "08_trust": "reworked after issue 21",
    "09_plan": "reworked after issue 21",
}


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_the_page_function_equals_the_package(rule: PageRule) -> None:
    shown = page_functions(rule.page)[rule.name]

    @settings(max_examples=150, deadline=None)
    @given(rule.inputs)
    def agree(kwargs: dict[str, Any]) -> None:
        assert shown(**kwargs) == rule.package(**kwargs), kwargs

    agree()


def test_every_page_function_is_held_to_the_package() -> None:
    listed = {(r.page, r.name) for r in RULES} | set(NOT_RULES)
    unlisted = [f"{page}:{name}" for page in pages() for name in defined_names(page) if (page, name) not in listed]
    assert unlisted == [], f"page functions no test compares with the package: {unlisted}"


def test_every_lesson_page_shows_a_rule() -> None:
    with_rules = {r.page for r in RULES}
    missing = [p for p in pages() if p not in with_rules and p.split("_")[0] not in RULES_PENDING_CHAPTERS()
               and p not in RULES_PENDING]
    assert missing == [], f"lesson pages without a page rule: {missing}"
    done = sorted(p for p in RULES_PENDING if p in with_rules)
    assert done == [], f"these pages show a rule now, take them off RULES_PENDING: {done}"


def RULES_PENDING_CHAPTERS() -> set[str]:  # noqa: N802 - reads as the constant it derives
    """Chapter numbers of pending pages: a pending chapter's section pages are pending too."""
    return {p.split("_")[0] for p in RULES_PENDING}
