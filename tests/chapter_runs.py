"""Every chapter executed once per parameter set, shared by every test that reads what a run printed or glued.

A chapter execution costs seconds to a minute of CPU; the tests that check what chapters say (their glued
numbers, their printed lines, their pages) used to execute the same chapters for the same parameters again and
again. Here each parameter set runs once per test session, whichever pytest-xdist worker asks first (the
others wait for it, :func:`once`):

* ``article``: the book's own build (``built_book``), read from the jupyter-cache its execute step fills, so
  the chapters the book shows are the ones tested;
* every parameter set of ``data/params/``: ``pdtune workbook`` (its executed notebooks, ``summary.json``, and
  for :data:`HTML_SETS` its HTML book);
* :data:`CHAPTER_CASES`: chapters 1-4 executed with papermill for a model no parameter set covers.

:class:`ChapterRun` is what a test gets: the scenario, each chapter's executed notebook, what it glued, how
long it took, its page.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "data" / "params"
NOTEBOOKS = ROOT / "notebooks"
FIXTURE_PARAMS = ROOT / "tests" / "fixtures" / "params"
#: The parameters file of each workbook run: the bundled sets, and two written from data/params/README.md
#: alone for issue 21 (GLM-4.7 on H200: no MTP layer, no results; a Kimi-K2-like MLA model whose config says
#: bf16 while its weights are FP8, ``weights: fp8``, on B200).
PARAM_FILES: dict[str, Path] = {
    **{p.stem: p for p in sorted(PARAMS.glob("*.yaml")) if p.stem != "article"},
    "glm-4.7-h200": FIXTURE_PARAMS / "glm-4.7-h200.yaml",
    "kimi-k2-fp8-b200": FIXTURE_PARAMS / "kimi-k2-fp8-b200.yaml",
}
#: Parameter sets whose workbook run also builds the HTML book (models without results and without an MTP
#: layer; the article's book is the real one).
HTML_SETS = ("llama-3.1-70b-h200", "glm-4.7-h200", "kimi-k2-fp8-b200")
#: Chapters 1-4 for a model no parameter set covers (a Mamba2 hybrid on an 80 GB GPU): papermill, as the
#: workbook runs them.
CHAPTER_CASES: dict[str, dict[str, Any]] = {
    "nemotron-nano": {"model": "nemotron-nano-9b-v2", "gpu_memory_gib": 79.19, "num_speculative_tokens": 0},
}
#: Every page of chapters 1-4, section pages included.
CASE_CHAPTERS = tuple(p.stem for p in sorted(NOTEBOOKS.glob("0[1-4]_*.md")))


def group(name: str) -> str:
    """The pytest-xdist group of the tests that read run ``name``: one worker runs them, after one execution
    (the article's tests join the book's group, whose build is that run)."""
    return "book" if name == "article" else f"run-{name}"


def literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def glued_values(notebook: Any) -> dict[str, Any]:
    """Every value an executed page glued, as Python reads it back (a Markdown-glued sentence as its text)."""
    values: dict[str, Any] = {}
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook")
            if meta:
                prefix = meta.get("mime_prefix", "")
                markdown = output["data"].get(prefix + "text/markdown")
                if markdown is not None:  # a sentence glued as Markdown (glue_markdown)
                    values[meta["name"]] = markdown if isinstance(markdown, str) else "".join(markdown)
                    continue
                text = output["data"].get(prefix + "text/plain", "")
                values[meta["name"]] = literal(text if isinstance(text, str) else "".join(text))
    return values


@dataclass
class ChapterRun:
    """One parameter set's chapters, executed: notebooks by chapter name (``01_state``), seconds each."""

    name: str
    scenario: Any
    notebooks: dict[str, Any]
    seconds: dict[str, float]
    out: Path | None = None  # the workbook's output folder (summary.json, html/); None for the book
    html: Path | None = None  # the built pages' folder
    glued: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for notebook in self.notebooks.values():
            self.glued.update(glued_values(notebook))

    def page(self, chapter: str) -> Any:
        from bs4 import BeautifulSoup

        assert self.html is not None, f"{self.name} has no HTML"
        return BeautifulSoup((self.html / "notebooks" / f"{chapter}.html").read_text(encoding="utf-8"),
                             "html.parser")

    @property
    def summary(self) -> dict[str, Any]:
        assert self.out is not None, f"{self.name} is not a workbook run"
        return json.loads((self.out / "summary.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ once per session


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this session sees (the workers' temporary folders share a parent)."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def once(factory: pytest.TempPathFactory, key: str, make: Callable[[Path], None]) -> Path:
    """``make(folder)`` once per session for ``key``, whichever worker comes first; a failure is remembered and
    reported to every test that needs it (it is not retried)."""
    root = shared_root(factory)
    folder, done, failed = root / key, root / f"{key}.done", root / f"{key}.failed"
    with _locked(root / f"{key}.lock"):
        if not done.exists() and not failed.exists():
            try:
                make(folder)
            except BaseException as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}"[:20000], encoding="utf-8")
                raise
            done.write_text("", encoding="utf-8")
    if failed.exists():
        pytest.fail(f"{key} failed in this session: {failed.read_text(encoding='utf-8')}", pytrace=False)
    return folder


# ------------------------------------------------------------------------------------------ the runs


def book_run(html: Path) -> ChapterRun:
    """The article's chapters as the book build executed them (its jupyter-cache)."""
    from jupyter_cache import get_cache

    from pdtune.workbook import load_parameters

    cache = get_cache(str(html.parent / ".jupyter_cache"))
    notebooks, seconds = {}, {}
    for record in cache.list_cache_records():
        name = Path(record.uri).stem
        notebooks[name] = _with_prose(Path(record.uri), cache.get_cache_bundle(record.pk).nb)
        seconds[name] = float(record.data["execution_seconds"])
    return ChapterRun("article", load_parameters(PARAMS / "article.yaml").resolved, notebooks, seconds,
                      html=html)


def _with_prose(source: Path, cached: Any) -> Any:
    """The executed chapter whole: jupyter-cache keeps the code cells only, so the page's Markdown cells come
    from its source, each code cell taking the outputs of its cached twin (in order)."""
    import jupytext

    if any(c.cell_type == "markdown" for c in cached.cells) or not source.is_file():
        return cached
    notebook = jupytext.read(source)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    ran = [c for c in cached.cells if c.cell_type == "code"]
    assert len(code) == len(ran), f"{source.name}: {len(ran)} cached code cells for {len(code)} in the page"
    for cell, twin in zip(code, ran, strict=True):
        cell.outputs, cell.execution_count = twin.outputs, twin.get("execution_count")
    notebook.metadata.update(cached.metadata)
    return notebook


def workbook_run(name: str, out: Path) -> ChapterRun:
    import nbformat

    from pdtune.workbook import book_chapters, load_parameters

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    chapters = [c.name for c in book_chapters(ROOT)]
    return ChapterRun(
        name, load_parameters(PARAM_FILES[name]).resolved,
        {c: nbformat.read(out / f"{c}.ipynb", as_version=4) for c in chapters},
        {c["name"]: c["seconds"] for c in summary["chapters"]},
        out=out, html=out / "html" if name in HTML_SETS else None)


def run_workbook(name: str, out: Path) -> None:
    from pdtune.cli import main

    argv = ["workbook", str(PARAM_FILES[name]), "--out", str(out), "--quiet"]
    status = main(argv + (["--html"] if name in HTML_SETS else []))
    assert status == 0, f"the workbook for {name} failed (exit {status})"


def execute_chapters(case: str, folder: Path) -> None:
    """Chapters 1-4 for ``case`` with papermill, each with the values its parameters cell declares."""
    import jupytext
    import nbformat
    import papermill

    from pdtune.site.render import STATIC_BUILD_ENV

    # The environment of a book build: charts reference the bundle, kernels come from this venv.
    os.environ[STATIC_BUILD_ENV] = "1"
    os.environ["JUPYTER_PREFER_ENV_PATH"] = "1"
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    folder.mkdir(parents=True)
    for chapter in CASE_CHAPTERS:
        source = jupytext.read(NOTEBOOKS / f"{chapter}.md")
        cell = next(c for c in source.cells if "parameters" in c.get("metadata", {}).get("tags", []))
        declared = {line.split(":", 1)[0].strip() for line in cell.source.splitlines() if ":" in line}
        values = {k: v for k, v in CHAPTER_CASES[case].items() if k in declared}
        if "model" not in declared:
            continue  # a page that works a fixed dense model on the scenario's GPU: the workbook runs it
        nbformat.write(source, folder / f"{chapter}.in.ipynb")
        papermill.execute_notebook(str(folder / f"{chapter}.in.ipynb"), str(folder / f"{chapter}.ipynb"),
                                   parameters=values, kernel_name="python3", cwd=str(NOTEBOOKS),
                                   progress_bar=False, log_output=False)


def case_run(case: str, folder: Path) -> ChapterRun:
    from dataclasses import replace

    import nbformat

    from conftest import article_scenario

    notebooks = {c: nbformat.read(folder / f"{c}.ipynb", as_version=4) for c in CASE_CHAPTERS
                 if (folder / f"{c}.ipynb").is_file()}
    seconds = {c: float(nb.metadata["papermill"]["duration"]) for c, nb in notebooks.items()}
    # what the chapters ran with: their defaults (the article's scenario) but for the case's values
    return ChapterRun(case, replace(article_scenario(), **CHAPTER_CASES[case]), notebooks, seconds)


class Runs:
    """The session's chapter runs by name, each made on first use (see the module's docstring)."""

    def __init__(self, request: pytest.FixtureRequest, factory: pytest.TempPathFactory) -> None:
        self._request, self._factory = request, factory
        self._runs: dict[str, ChapterRun] = {}

    def __getitem__(self, name: str) -> ChapterRun:
        if name not in self._runs:
            if name == "article":
                self._runs[name] = book_run(self._request.getfixturevalue("built_book"))
            elif name in CHAPTER_CASES:
                self._runs[name] = case_run(name, once(self._factory, f"case-{name}",
                                                       lambda f: execute_chapters(name, f)))
            else:
                self._runs[name] = workbook_run(name, once(self._factory, f"workbook-{name}",
                                                           lambda f: run_workbook(name, f / "OUT")) / "OUT")
        return self._runs[name]
