"""Every number of the article's tables 1-3 is printed in the rendered chapters 1-4.

The chapters print each table beside pdtune's recomputation (``pdtune.article``); this checks the rendered
HTML, so a table dropped from a chapter, or printed with its published columns missing, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from pdtune.paths import article_dir

TABLES = ("table1_activation_peak.csv", "table2_cuda_graphs.csv", "table3_memory_per_engine.csv")
PAGES = tuple(p.stem for p in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("0[1-4]_*.md")))
SKIP = {"run"}  # run numbers label rows; they are not results


def _page_numbers(page: Path) -> set[str]:
    html = re.sub(r"<script.*?</script>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"<[^>]+>", " ", html)
    return set(re.findall(r"-?\d[\d,]*(?:\.\d+)?", text))


def _spellings(value: float) -> set[str]:
    """How a table cell may be printed: the article's two decimals, one decimal, or a whole number."""
    out = {f"{value:.2f}", f"{value:.1f}", f"{value:g}"}
    if float(value).is_integer():
        out |= {str(int(value)), f"{int(value):,}"}
    return out


def missing_numbers(pages: list[Path]) -> dict[str, list[float]]:
    printed: set[str] = set()
    for page in pages:
        printed |= _page_numbers(page)
    missing: dict[str, list[float]] = {}
    for name in TABLES:
        table = pd.read_csv(article_dir() / name)
        for column in table.columns:
            if column in SKIP or table[column].dtype.kind not in "if":
                continue
            for value in table[column]:
                if not _spellings(float(value)) & printed:
                    missing.setdefault(f"{name}:{column}", []).append(float(value))
    return missing


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_every_table_number_is_printed(built_book: Path) -> None:
    pages = [built_book / "notebooks" / f"{p}.html" for p in PAGES]
    assert missing_numbers(pages) == {}


def test_the_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("<p>83.00 and 112.0</p><script>var x = 0.57;</script>", encoding="utf-8")
    missing = missing_numbers([page])
    assert "table1_activation_peak.csv:activation_peak_gib" in missing  # 0.57 only inside a script
    assert 83.0 not in missing.get("table3_memory_per_engine.csv:published_kv_cache_gib", [])
