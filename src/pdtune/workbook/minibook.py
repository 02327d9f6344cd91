"""The mini-book: the executed chapters built as a small Jupyter Book, with the summary as its first page.

The book is the real one with its chapters swapped for the executed notebooks: the same ``_config.yml``
(execution off), the same prose pages and table of contents, the same offline assets, plus a summary page
first; chapters that are missing are left out of the table of contents. The build runs with ``-W -n``;
its warnings are counted and, unless the build was clean, its log is kept beside the book.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pdtune.guarded import read_yaml
from pdtune.io import write_text
from pdtune.paths import REPO_ROOT
from pdtune.site.bookbuild import TOC_NAME, resolve_entry, toc_entries
from pdtune.site.bookexec import kernel_env
from pdtune.workbook.chapter import CHAPTER_DIR, Chapter, ChapterResult
from pdtune.workbook.summary import to_markdown


HTML_DIR = "html"


HTML_LOG = "html-build.log"


#: The page the HTML book opens the workbook with (its label, and its file in the book source).
SUMMARY_PAGE = "workbook-summary"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


_SPHINX_WARNING = re.compile(r"^(?:.*?: )?WARNING: ", re.MULTILINE)  # Sphinx's "file:line: WARNING: ..."


@dataclass(frozen=True)
class HtmlBuild:
    """The mini-book: where its index is, and how clean the Sphinx run was (``-W -n``)."""

    built: bool
    warnings: int
    log: str | None  # file name of the build log inside the output folder (kept unless the build was clean)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"built": self.built, "index": f"{HTML_DIR}/index.html" if self.built else None,
                "warnings": self.warnings, "log": self.log, "message": self.message}


def build_html(folder: Path, chapters: Sequence[Chapter], results: Sequence[ChapterResult],
               summary: dict[str, Any], book_root: Path = REPO_ROOT) -> HtmlBuild:
    """Build the executed notebooks in ``folder`` as a Jupyter Book into ``folder/html``.

    The book is the real one with its chapters swapped for the executed notebooks: the same ``_config.yml``
    (execution off), the same prose pages and table of contents, the same offline assets, plus a summary
    page first. Chapters that are missing are left out of the table of contents.
    """
    from pdtune.site.vendor import VENDOR_DIR, write_vendor

    config = read_yaml(book_root / "_config.yml", "_config.yml") or {}
    static_paths = [str(p) for p in config.get("sphinx", {}).get("config", {}).get("html_static_path", [])]
    if any(Path(p).resolve() == VENDOR_DIR.resolve() for p in (book_root / s for s in static_paths)):
        write_vendor(VENDOR_DIR)  # the vega bundle and MathJax, if this checkout has not written them yet
    src = folder / ".html-src"
    build = folder / ".html-build"
    try:
        _assemble_book(src, config, static_paths, chapters, results, summary, folder, book_root)
        done = _jupyter_book(src, build)
        index = build / "_build" / "html" / "index.html"
        output = _ANSI.sub("", done.stdout + "\n" + done.stderr)
        warnings = len(_SPHINX_WARNING.findall(output))
        built = index.is_file()
        log_name = None
        if not built or warnings or done.returncode != 0:
            log_name = HTML_LOG
            # plain text, with paths as they are in the book rather than in a folder that is gone
            write_text(folder / HTML_LOG, output.replace(f"{src}{os.sep}", ""))
        if built:
            os.replace(build / "_build" / "html", folder / HTML_DIR)
        message = "" if built else (done.stderr.strip().splitlines() or ["jupyter-book build failed"])[-1]
        return HtmlBuild(built=built, warnings=warnings, log=log_name, message=message)
    finally:
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)


def _assemble_book(src: Path, config: dict[str, Any], static_paths: list[str], chapters: Sequence[Chapter],
                   results: Sequence[ChapterResult], summary: dict[str, Any], folder: Path,
                   book_root: Path) -> None:
    src.mkdir()
    chapter_entries = {c.entry: c for c in chapters}
    by_number = {r.number: r for r in results}
    # Prose pages, with their folders (figures, the bibliography); the static assets are linked, not copied.
    static_abs = {(book_root / s).resolve() for s in static_paths}
    copied: set[Path] = set()
    for entry in toc_entries(book_root / TOC_NAME):
        if entry in chapter_entries:
            continue
        path = resolve_entry(book_root, entry)
        if path is None:
            continue
        top = Path(entry).parts[0]
        if len(Path(entry).parts) > 1 and (book_root / top).is_dir():
            if top not in copied:
                _copy_tree(book_root / top, src / top, static_abs)
                copied.add(top)
        else:
            shutil.copy2(path, src / path.relative_to(book_root))
    for bib in config.get("bibtex_bibfiles", []) or []:
        target = src / bib
        if not target.exists() and (book_root / bib).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(book_root / bib, target)
    for static in static_paths:
        link = src / static
        if (book_root / static).exists() and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to((book_root / static).resolve(), target_is_directory=True)
    # The executed chapters, where the toc expects them.
    for chapter in chapters:
        result = by_number[chapter.number]
        if result.notebook:
            target = src / chapter.folder / chapter.notebook
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text(target, _fold_parameters(folder / result.notebook))
    write_text(src / f"{SUMMARY_PAGE}.md",
               f"({SUMMARY_PAGE})=\n" + to_markdown(
                   summary, [r.to_dict() for r in results],
                   link=lambda name: f"{{doc}}`{name} </{CHAPTER_DIR}/{Path(name).stem}>`"))
    toc = read_yaml(book_root / TOC_NAME, TOC_NAME)
    present = {c.entry: f"{c.folder}/{c.name}" for c in chapters if by_number[c.number].notebook}
    toc = _rewrite_toc(toc, present, set(chapter_entries))
    _insert_summary(toc)
    write_text(src / TOC_NAME, yaml.safe_dump(toc, sort_keys=False))
    config = json.loads(json.dumps(config))  # a deep copy
    config["title"] = f"{summary['title']} (pdtune workbook)"
    config.setdefault("execute", {})["execute_notebooks"] = "off"
    config["only_build_toc_files"] = True
    write_text(src / "_config.yml", yaml.safe_dump(config, sort_keys=False))


#: Cells whose input the mini-book folds: the chapter's defaults and the values papermill injected. The summary
#: and each page's "Not from your parameters file" box say what they hold; shown whole they take a screen a page.
FOLDED_TAGS = ("parameters", "injected-parameters")


def _fold_parameters(notebook: Path) -> str:
    """The executed notebook's JSON with its parameters cells folded (Jupyter Book's ``hide-input``)."""
    data = json.loads(notebook.read_text(encoding="utf-8"))
    for cell in data.get("cells", []):
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if any(t in tags for t in FOLDED_TAGS) and "hide-input" not in tags:
            tags.append("hide-input")
    return json.dumps(data, ensure_ascii=False)


def _copy_tree(source: Path, target: Path, skip: set[Path]) -> None:
    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if (Path(folder) / n).resolve() in skip or n in ("_build", "__pycache__")]

    shutil.copytree(source, target, ignore=ignore, symlinks=True)


def _rewrite_toc(node: Any, present: dict[str, str], chapters: set[str]) -> Any:
    """The toc with chapter entries pointing at executed notebooks, missing chapters left out."""
    if isinstance(node, list):
        out = []
        for item in node:
            if isinstance(item, dict) and item.get("file") in chapters and item["file"] not in present:
                continue
            out.append(_rewrite_toc(item, present, chapters))
        return out
    if isinstance(node, dict):
        out = {k: _rewrite_toc(v, present, chapters) for k, v in node.items()}
        if isinstance(node.get("file"), str) and node["file"] in present:
            out["file"] = present[node["file"]]
        return out
    return node


def _insert_summary(toc: dict[str, Any]) -> None:
    """The summary page opens the book; the book's own front page becomes its first chapter."""
    front = {"file": toc["root"]}
    toc["root"] = SUMMARY_PAGE
    parts = toc.get("parts")
    if isinstance(parts, list) and parts:
        parts[0].setdefault("chapters", []).insert(0, front)
    else:
        toc.setdefault("chapters", []).insert(0, front)


def _jupyter_book(src: Path, build: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "jupyter-book"
    command = [str(script)] if script.is_file() else [shutil.which("jupyter-book") or "jupyter-book"]
    command += ["build", str(src), "--path-output", str(build), "-W", "-n", "--keep-going", "--all"]
    env = dict(os.environ, **kernel_env())
    try:
        return subprocess.run(command, cwd=src, env=env, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(command, 1, "", f"jupyter-book build could not run: {exc}")
