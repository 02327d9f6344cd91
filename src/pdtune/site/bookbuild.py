"""The book build's guard rails: every ``_toc.yml`` file exists, the offline assets are in place, and
only pages with charts load the vega bundle.

Two entry points:

* ``python -m pdtune.site.bookbuild check-toc [BOOK_ROOT]`` — the pre-build check ``make book`` runs
  before executing anything, so a missing chapter fails in a second, naming the file;
* a Sphinx extension (``_config.yml`` lists ``pdtune.site.bookbuild`` in its ``extensions``) that
  repeats both checks for a bare ``jupyter-book build``, refuses a CDN ``mathjax_path``, and marks the
  kernel environment as a static build so explorers print their note instead of a dead widget.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pdtune.errors import InputError
from pdtune.guarded import read_yaml
from pdtune.paths import REPO_ROOT
from pdtune.site.render import CHART_CLASS, STATIC_BUILD_ENV
from pdtune.site.vendor import VEGA_BUNDLE

TOC_NAME = "_toc.yml"
SOURCE_SUFFIXES = (".md", ".ipynb", ".rst")
_CONTAINER_KEYS = ("parts", "chapters", "sections")


def toc_entries(toc_path: Path) -> list[str]:
    """Every ``root``/``file`` entry of a jupyter-book ``_toc.yml``, in reading order, as written."""
    try:
        data = read_yaml(toc_path)
    except InputError as exc:  # one line: where, and what (the guarded reader cuts the parser's message)
        raise InputError(exc.source, exc.field if exc.field.startswith("line") else "-",
                         f"cannot read the table of contents: {exc.message}") from None
    if not isinstance(data, dict) or not isinstance(data.get("root"), str):
        raise InputError(toc_path, "root", "a jupyter-book _toc.yml needs a 'root' file")
    entries = [data["root"]]

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if isinstance(node.get("file"), str):
                entries.append(node["file"])
            for key in _CONTAINER_KEYS:
                walk(node.get(key))

    for key in _CONTAINER_KEYS:
        walk(data.get(key))
    return entries


def resolve_entry(book_root: Path, entry: str) -> Path | None:
    """The source file a toc entry names (entries usually omit the suffix), or None if there is none."""
    base = Path(book_root) / entry
    if base.suffix in SOURCE_SUFFIXES and base.is_file():
        return base
    for suffix in SOURCE_SUFFIXES:
        candidate = base.with_name(base.name + suffix)
        if candidate.is_file():
            return candidate
    return None


def missing_entries(book_root: Path, toc_path: Path | None = None) -> list[str]:
    """Toc entries with no source file, e.g. a chapter someone has not written yet."""
    toc = Path(toc_path) if toc_path else Path(book_root) / TOC_NAME
    return [e for e in toc_entries(toc) if resolve_entry(Path(book_root), e) is None]


def check_toc(book_root: Path, toc_path: Path | None = None) -> int:
    """Raise :class:`InputError` naming every missing file; return how many files the toc lists."""
    toc = Path(toc_path) if toc_path else Path(book_root) / TOC_NAME
    entries = toc_entries(toc)
    missing = missing_entries(book_root, toc)
    if missing:
        names = ", ".join(
            m if Path(m).suffix in SOURCE_SUFFIXES else f"{m} (.md/.ipynb/.rst)" for m in missing
        )
        raise InputError(toc, "file", f"listed but missing: {names}")
    return len(entries)


# --- Sphinx extension -------------------------------------------------------------------------------


def _on_config_inited(app: Any, config: Any) -> None:
    from sphinx.errors import ConfigError

    toc_path = Path(app.confdir) / getattr(config, "external_toc_path", TOC_NAME)
    try:
        check_toc(Path(app.srcdir), toc_path)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    mathjax_path = str(getattr(config, "mathjax_path", ""))
    if "://" in mathjax_path or mathjax_path.startswith("//"):
        raise ConfigError(
            f"mathjax_path is {mathjax_path!r}; the book is offline, point it at the vendored copy"
        )


def _on_builder_inited(app: Any) -> None:
    from sphinx.errors import ConfigError

    if getattr(app.builder, "format", None) != "html":
        return
    static_dirs = [Path(app.confdir) / d for d in app.config.html_static_path]
    # Extensions append their own absolute static folders; the book's are the relative ones.
    ours = [str(d) for d in app.config.html_static_path if not Path(d).is_absolute()]
    for needed in (app.config.pdtune_vega_bundle, app.config.mathjax_path):
        if not any((d / needed).is_file() for d in static_dirs):
            raise ConfigError(
                f"{needed} is in none of {', '.join(ours)}; "
                "run `make assets` (python -m pdtune.site.vendor)"
            )


def _on_html_page_context(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    # ~900 kB of JavaScript: only pages that carry a chart pay for it.
    if f'class="{CHART_CLASS}"' in context.get("body", ""):
        app.add_js_file(app.config.pdtune_vega_bundle, loading_method="defer")


def setup(app: Any) -> dict[str, Any]:
    # Kernels started by this build inherit the variable; `make book` sets it too.
    os.environ.setdefault(STATIC_BUILD_ENV, "1")
    app.add_config_value("pdtune_vega_bundle", VEGA_BUNDLE, "html")
    app.connect("config-inited", _on_config_inited, priority=100)
    app.connect("builder-inited", _on_builder_inited)
    app.connect("html-page-context", _on_html_page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


# --- command line -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdtune.site.bookbuild")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-toc", help="fail, naming the file, if _toc.yml lists a missing file")
    check.add_argument("book_root", nargs="?", type=Path, default=REPO_ROOT)
    args = parser.parse_args(argv)
    try:
        count = check_toc(args.book_root)
    except InputError as exc:
        print(f"check-toc: error: {exc}", file=sys.stderr)
        return 2
    print(f"check-toc: {TOC_NAME} lists {count} files, all present", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
