"""Every page says how long it takes, and the course plan fits its 3 hours.

A page's time line sits right under its title (``notebooks/README.md``): ``*Time: 20 min reading, 15 min
exercises.*`` (a prose page may give reading time alone). ``book/course.md`` is a plan for a 3-hour session:
its table's minutes add up to 180, and every section or exercise it names exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIME = re.compile(r"^# .+\n\n\*Time: (\d+) min reading(?:, (\d+) min exercises)?[.;]", re.M)
TEACHING_PAGES = ("workflow", "course", "checklist", "reproduce")


def chapter_pages() -> list[Path]:
    return sorted(p for p in (ROOT / "notebooks").glob("*.md") if p.name != "README.md")


@pytest.mark.parametrize("page", chapter_pages() + [ROOT / "book" / f"{p}.md" for p in TEACHING_PAGES],
                         ids=lambda p: p.stem)
def test_every_page_states_its_time_under_its_title(page: Path) -> None:
    found = TIME.search(page.read_text(encoding="utf-8"))
    assert found, f"{page.name}: no '*Time: N min reading, M min exercises.*' line under the title"
    reading = int(found.group(1))
    assert 0 < reading <= 30, f"{page.name}: {reading} min of reading is more than one sitting"


def course_rows() -> list[tuple[int, str]]:
    text = (ROOT / "book" / "course.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", text, re.M)
    return [(int(minutes), block.strip()) for minutes, block in rows]


def test_the_course_takes_three_hours() -> None:
    rows = course_rows()
    assert len(rows) >= 10
    assert sum(minutes for minutes, _ in rows) == 180
    assert "Total: 180 minutes" in (ROOT / "book" / "course.md").read_text(encoding="utf-8")


def test_every_section_and_exercise_the_course_names_exists() -> None:
    text = (ROOT / "book" / "course.md").read_text(encoding="utf-8")
    labels = set()
    for page in chapter_pages() + sorted((ROOT / "book").glob("*.md")):
        source = page.read_text(encoding="utf-8")
        labels |= set(re.findall(r"^\(([\w-]+)\)=$", source, re.M))
        labels |= set(re.findall(r"^:label: ([\w-]+)$", source, re.M))
    named = re.findall(r"\{ref\}`([\w-]+)`", text)
    assert named and [n for n in named if n not in labels] == []
