"""Every number the built book shows, page by page, to compare two builds (a restructure must not change one).

    python benchmarks/compare_book_numbers.py extract _build/html before.json
    python benchmarks/compare_book_numbers.py compare before.json _build/html     # or two JSON files

For each HTML page under the build (``_static/`` left out) it keeps two ordered lists of numeric tokens:
``text``, the page's visible text (scripts and styles stripped), and ``charts``, the numbers inside each
chart's inlined Vega-Lite spec (``<script type="application/json" id="pdtune-…-spec">``), so the data a
chart draws is compared too (dataset names, which are hashes, are skipped). ``compare`` prints "N numbers on M pages, identical" or the first differences
of every page that differs, and exits 1 when anything differs.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

# Integers, decimals, thousands separators, exponents, a leading minus: the tokens as the page prints them.
NUMBER = re.compile(r"(?<![\w.])[-−]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Altair names an inline dataset by a hash of its rows (``data-4b6f…``): not a number the page shows, and
# it changes with any text in the rows (a provenance string), so it is left out.
DATASET_NAME = re.compile(r"data-[0-9a-f]{32}")


class _PageText(HTMLParser):
    """Visible text and chart specs of one page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.specs: list[str] = []
        self._skip = 0  # depth inside <script>/<style>
        self._spec: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style"}:
            self._skip += 1
            values = dict(attrs)
            if tag == "script" and (values.get("id") or "").endswith("-spec"):
                self._spec = []

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style"} and self._skip:
            self._skip -= 1
            if self._spec is not None:
                self.specs.append("".join(self._spec))
                self._spec = None

    def handle_data(self, data: str) -> None:
        if self._spec is not None:
            self._spec.append(data)
        elif not self._skip:
            self.text.append(data)


def _spec_numbers(spec_text: str) -> list[str]:
    out: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, bool) or node is None:
            return
        if isinstance(node, (int, float)):
            out.append(repr(node))
        elif isinstance(node, str):
            if not DATASET_NAME.fullmatch(node):
                out.extend(NUMBER.findall(node))
        elif isinstance(node, dict):
            for key in sorted(node):
                if key == "datasets" and isinstance(node[key], dict):
                    # keyed by their hashes: compare them in an order that does not depend on the names
                    for numbers in sorted(_spec_numbers(json.dumps(d)) for d in node[key].values()):
                        out.extend(numbers)
                else:
                    walk(node[key])
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(spec_text))
    return out


def extract(build: Path) -> dict[str, dict[str, list[str]]]:
    pages: dict[str, dict[str, list[str]]] = {}
    for path in sorted(build.rglob("*.html")):
        rel = path.relative_to(build).as_posix()
        if rel.startswith("_static/"):
            continue
        parser = _PageText()
        parser.feed(path.read_text(encoding="utf-8"))
        charts = [n for spec in parser.specs for n in _spec_numbers(spec)]
        pages[rel] = {"text": NUMBER.findall(" ".join(parser.text)), "charts": charts}
    return pages


def _load(source: Path) -> dict[str, dict[str, list[str]]]:
    pages = json.loads(source.read_text()) if source.is_file() else extract(source)
    if not pages:  # a wrong path would otherwise compare as "0 numbers, identical"
        print(f"compare_book_numbers: {source}: no HTML page there (a built book's _build/html?)", file=sys.stderr)
        raise SystemExit(2)
    return pages


def compare(before: dict, after: dict) -> list[str]:
    problems: list[str] = []
    for page in sorted(set(before) | set(after)):
        if page not in after or page not in before:
            problems.append(f"{page}: only in {'before' if page in before else 'after'}")
            continue
        for part in ("text", "charts"):
            a, b = before[page][part], after[page][part]
            if a == b:
                continue
            diff = [
                f"  {op} before[{i1}:{i2}]={a[i1:i2][:8]} after[{j1}:{j2}]={b[j1:j2][:8]}"
                for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
                if op != "equal"
            ]
            problems.append(f"{page} ({part}): {len(a)} vs {len(b)} numbers\n" + "\n".join(diff[:10]))
    return problems


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "extract":
        pages = extract(Path(argv[1]))
        Path(argv[2]).write_text(json.dumps(pages, indent=1) + "\n")
        total = sum(len(p["text"]) + len(p["charts"]) for p in pages.values())
        print(f"{total} numbers on {len(pages)} pages -> {argv[2]}")
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        before, after = _load(Path(argv[1])), _load(Path(argv[2]))
        problems = compare(before, after)
        text = sum(len(p["text"]) for p in before.values())
        charts = sum(len(p["charts"]) for p in before.values())
        if problems:
            print("\n".join(problems))
            print(f"{len(problems)} differences")
            return 1
        print(
            f"{text + charts} numbers on {len(before)} pages, identical "
            f"({text} in the text, {charts} in chart data)"
        )
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
