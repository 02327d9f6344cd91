"""Shared fixtures for the book tests: the chapter list from ``_toc.yml``, the vendored assets, and two
Jupyter Book builds made once per session (the real book and a three-page mini-book used to test the
renderer and the browser check). Both builds go to the session's temporary folder, never to ``_build/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

import warm_kernel
from chapter_runs import Runs, once
from pdtune.article import ARTICLE_VLLM
from pdtune.scenario import Scenario
from pdtune.site.bookbuild import resolve_entry, toc_entries
from pdtune.site.render import STATIC_BUILD_ENV
from pdtune.site.vendor import VENDOR_DIR, write_vendor

# No per-example deadline for any property: a busy machine (the suite shares two cores with other work) must not
# turn a correct property into a failure; how fast things are is benchmarks/'s business.
settings.register_profile("pdtune", deadline=None)
settings.load_profile("pdtune")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHAPTER_DIR = "notebooks/"


@pytest.fixture(scope="session", autouse=True)
def warm_kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every Jupyter kernel this session starts (papermill, the book build, the workbook, nbclient) is forked
    from one warm server per worker (:mod:`warm_kernel`): a chapter no longer pays for Python, ipykernel,
    pandas, Altair and pdtune to start. Its folder goes first on ``JUPYTER_PATH``, inherited by every child."""
    folder = tmp_path_factory.mktemp("warm-kernels")
    server = warm_kernel.install(folder)
    if server is None:  # the tests stay correct with real kernels, only slower: say so, do not fail
        warnings.warn("the warm kernel server did not start; this session starts real Jupyter kernels")
        yield folder
        return
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JUPYTER_PATH", str(folder), prepend=os.pathsep)
        env.setenv(warm_kernel.ENV_FOLDER, str(folder))
        try:
            yield folder
        finally:
            server.stdin.close()  # the server kills what it still runs and leaves
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()


def article_scenario() -> Scenario:
    """What the book's chapters default to: the article's setup (:class:`Scenario`'s defaults, the one place it
    is written) served by the vLLM the article ran."""
    return replace(Scenario(), vllm=ARTICLE_VLLM)


def toc_chapters() -> list[tuple[str, Path | None]]:
    """(toc entry, source file or None while nobody has written it) for every chapter notebook."""
    return [(e, resolve_entry(ROOT, e)) for e in toc_entries(ROOT / "_toc.yml") if e.startswith(CHAPTER_DIR)]


def book_env() -> dict[str, str]:
    """Environment of a book build: static-build flag on, and kernels from this venv."""
    env = dict(os.environ)
    env[STATIC_BUILD_ENV] = "1"
    env["JUPYTER_PREFER_ENV_PATH"] = "1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def build_book(source: Path, output: Path) -> Path:
    """Build as ``make book`` does (parallel execution, then ``jupyter-book build -W -n --keep-going --all``);
    return the HTML folder, or fail with the log."""
    output.mkdir(parents=True, exist_ok=True)
    config = output / "_config.executed.yml"
    execute = [str(sys.executable), "-m", "pdtune.site.bookexec", str(source)]
    execute += ["--cache", str(output / "_build" / ".jupyter_cache"), "--config-out", str(config)]
    build = [str(BIN / "jupyter-book"), "build", str(source), "--config", str(config)]
    build += ["--path-output", str(output), "-W", "-n", "--keep-going", "--all"]
    for step in (execute, build):
        done = subprocess.run(step, cwd=source, env=book_env(), capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            log = (done.stdout + done.stderr)[-6000:]
            pytest.fail(f"{' '.join(step[:3])} on {source} failed (exit {done.returncode}):\n{log}", pytrace=False)
    # Every notebook must come from the cache the execute step filled; re-executing would mean the cache
    # keys differ and the parallel step buys nothing.
    again = [line for line in (done.stdout + done.stderr).splitlines() if "Executing notebook" in line]
    assert not again, f"the build executed notebooks again: {again}"
    html = output / "_build" / "html"
    assert (html / "index.html").is_file(), f"no index.html in {html}"
    return html


@pytest.fixture(scope="session")
def vendor_assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The vega bundle and MathJax under book/assets/vendor (written unless already current, by one worker)."""
    once(tmp_path_factory, "vendor", lambda _folder: write_vendor(VENDOR_DIR))
    return VENDOR_DIR


@pytest.fixture(scope="session")
def built_book(vendor_assets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real book, built once per session (by whichever worker needs it first); skipped while a chapter
    listed in _toc.yml is unwritten. Its execute step is the article's run of every chapter
    (:mod:`chapter_runs`)."""
    missing = [e for e in toc_entries(ROOT / "_toc.yml") if resolve_entry(ROOT, e) is None]
    if missing:
        pytest.skip(f"_toc.yml lists files that do not exist yet: {', '.join(missing)}")
    out = once(tmp_path_factory, "book", lambda folder: build_book(ROOT, folder))
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Every chapter's run for a parameter set, by name (``runs["deepseek-v3-gb200"]``), made once per session."""
    return Runs(request, tmp_path_factory)


# --- the mini-book --------------------------------------------------------------------------------------

_JUPYTEXT_HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""

MINI_PAGES: dict[str, str] = {
    "index.md": """\
        (mini-index)=
        # Mini-book

        A fixture book with one chart page and one math page: {doc}`charts` and {doc}`math`.
        """,
    "charts.md": """\
        (mini-charts)=
        # Charts

        ```{code-cell} ipython3
        :tags: [parameters]

        points: int = 4  # how many points to draw
        ```

        ```{code-cell} ipython3
        import altair as alt
        import pandas as pd

        from pdtune.charts import live_explorer, modeled_title, ratio_title, show, tooltips

        data = pd.DataFrame(
            {"concurrency": range(1, points + 1), "tps_per_gpu": [100, 180, 240, 260][:points]}
        )
        title = modeled_title("Throughput rises with concurrency", how="fixture")
        line = alt.Chart(data, title=title).mark_line(point=True).encode(
            x=alt.X("concurrency:Q"),
            y=alt.Y("tps_per_gpu:Q", title=ratio_title("total tokens/s", "all GPUs")),
            tooltip=tooltips("concurrency:Q", "tps_per_gpu:Q", columns=data.columns),
        )
        show(line, "fixture-line")
        ```

        A chart left as the last expression of a cell goes through the same offline renderer:

        ```{code-cell} ipython3
        line.mark_bar()
        ```

        An Altair parameter bound to a slider keeps working in the static page:

        ```{code-cell} ipython3
        cutoff = alt.param(name="cutoff", value=2,
                           bind=alt.binding_range(min=1, max=points, step=1))
        slider = alt.Chart(data).mark_bar().encode(
            x="concurrency:O",
            y="tps_per_gpu:Q",
            opacity=alt.condition(alt.datum.concurrency <= cutoff, alt.value(1.0),
                                  alt.value(0.3)),
        ).add_params(cutoff)
        show(slider, "fixture-slider")
        ```

        ```{code-cell} ipython3
        live_explorer(lambda n: n * 2, name="doubler", n=(1, 10))
        ```
        """,
    "math.md": """\
        (mini-math)=
        # Math

        Inline math $a^2 + b^2$ and a labelled equation:

        $$
        \\text{blocks} = \\left\\lceil \\frac{\\text{tokens}}{\\text{block size}} \\right\\rceil
        $$ (mini-blocks)

        Equation {eq}`mini-blocks` is the one PagedAttention {cite}`kwon2023pagedattention` is built on.

        Plain text keeps a command whole: pdtune state qwen3.8-2.4t --max-model-len 9216, and an SLA
        of >= 20 tokens/s per user stays a comparison.

        ```{exercise-start}
        :label: mini-ex1
        ```

        How many 16-token blocks does a 100-token request need?

        ```{exercise-end}
        ```

        ```{solution-start} mini-ex1
        :class: dropdown
        ```

        $\\lceil 100 / 16 \\rceil = 7$.

        ```{solution-end}
        ```

        ```{bibliography}
        :filter: docname in docnames
        ```
        """,
}

MINI_TOC = {"format": "jb-book", "root": "index", "chapters": [{"file": "charts"}, {"file": "math"}]}


def write_mini_book(root: Path) -> Path:
    """A three-page book that uses the real _config.yml, the real assets and the real bibliography."""
    root.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = "pdtune mini-book (test fixture)"
    (root / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    (root / "_toc.yml").write_text(yaml.safe_dump(MINI_TOC, sort_keys=False), encoding="utf-8")
    for name, text in MINI_PAGES.items():
        # Pages with code cells are notebooks: jupytext header first, as in notebooks/README.md.
        header = _JUPYTEXT_HEADER if "{code-cell}" in text else ""
        (root / name).write_text(header + textwrap.dedent(text), encoding="utf-8")
    (root / "book").mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "book" / "references.bib", root / "book" / "references.bib")
    (root / "book" / "assets").symlink_to(ROOT / "book" / "assets", target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def mini_book(vendor_assets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mini-book's built HTML folder."""
    base = tmp_path_factory.mktemp("mini-book")
    return build_book(write_mini_book(base / "src"), base / "out")


#: The pytest-xdist groups that take longest, longest first. ``make test`` runs with ``--no-loadscope-reorder``,
#: so groups start in collection order: these first, each on one worker, and the many short modules fill the
#: other worker around them (xdist's own order, most tests first, would start these last and leave one worker
#: alone with them at the end).
HEAVY_GROUPS = ("book", "run-llama-3.1-70b-h200", "run-qwen3-235b-h200", "run-qwen3-next-80b-h200",
                "run-deepseek-v3-gb200", "lab", "workbook-signals", "run-nemotron-nano")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        mark = item.get_closest_marker("xdist_group")
        name = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None
        return HEAVY_GROUPS.index(name) if name in HEAVY_GROUPS else len(HEAVY_GROUPS)

    items.sort(key=rank)  # stable: the order within a group and among the rest stays


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, which tags each grouped test's id
def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run when ``--dist loadgroup`` would not keep a group on one worker: pytest-xdist groups tests by
    an ``@group`` suffix it writes into node ids, and a pytest that stores ids elsewhere (9.2) loses it silently,
    so every shared setup (the book, a workbook run, a bad-input group) would run on both workers."""
    if not session.config.getoption("loadgroup", default=False):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist did not tag {len(lost)} grouped tests with their group "
                                f"(e.g. {lost[0]}): pin pytest and pytest-xdist as requirements.txt does")
