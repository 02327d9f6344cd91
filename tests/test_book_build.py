"""The book's machinery: the table of contents and its pre-build check, the configuration, the vendored
JavaScript, and the built HTML (the mini-book always; the real book once every chapter exists).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup

from conftest import BIN, ROOT, book_env, toc_chapters, write_mini_book
from pdtune.errors import InputError
from pdtune.site import bookbuild, bookexec, vendor

EXPECTED_TOC = [
    "book/index.md",
    "book/workflow.md",
    "book/course.md",
    "notebooks/01_state.md",
    "notebooks/01_state_hybrid.md",
    "notebooks/01_state_vllm.md",
    "notebooks/02_memory.md",
    "notebooks/02_memory_weights.md",
    "notebooks/02_memory_reserve.md",
    "notebooks/03_graphs.md",
    "notebooks/03_graphs_estimate.md",
    "notebooks/04_concurrency.md",
    "notebooks/04_concurrency_layouts.md",
    "notebooks/05_prefill.md",
    "notebooks/06_decode.md",
    "notebooks/06_decode_experts.md",
    "notebooks/07_frontier.md",
    "notebooks/07_frontier_rate.md",
    "notebooks/07_frontier_measured.md",
    "notebooks/08_trust.md",
    "notebooks/08_trust_regimes.md",
    "notebooks/08_trust_calibration.md",
    "notebooks/08_trust_scheduler.md",
    "notebooks/09_plan.md",
    "notebooks/09_plan_transfer.md",
    "notebooks/09_plan_launch.md",
    "book/glossary.md",
    "book/references.md",
    "book/reproduce.md",
    "book/checklist.md",
]

# Attributes through which a page makes the browser fetch something.
_FETCHING = {"script": "src", "img": "src", "iframe": "src", "source": "src", "audio": "src", "video": "src",
             "embed": "src", "object": "data"}
_FETCHING_LINK_RELS = {
    "stylesheet", "preload", "modulepreload", "prefetch", "preconnect", "dns-prefetch", "icon", "manifest"
}
_REMOTE = re.compile(r"^(https?:)?//", re.IGNORECASE)
_CSS_REMOTE = re.compile(r"(url\(\s*['\"]?|@import\s+['\"])(https?:)?//", re.IGNORECASE)


def remote_assets(html_root: Path) -> list[str]:
    """Every script, stylesheet, font or image a built page (or a stylesheet in _static) loads from afar."""
    found = []
    for page in sorted(html_root.rglob("*.html")):
        rel = page.relative_to(html_root).as_posix()
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for tag, attr in _FETCHING.items():
            remote = [el for el in soup.find_all(tag) if _REMOTE.match(el.get(attr, ""))]
            found += [f"{rel}: <{tag} {attr}={el[attr]}>" for el in remote]
        for el in soup.find_all("link"):
            if _FETCHING_LINK_RELS & set(el.get("rel", [])) and _REMOTE.match(el.get("href", "")):
                found.append(f"{rel}: <link rel={' '.join(el['rel'])} href={el['href']}>")
        for el in soup.find_all("style"):
            if _CSS_REMOTE.search(el.get_text()):
                found.append(f"{rel}: <style> imports from the network")
    for css in sorted(html_root.rglob("*.css")):
        if _CSS_REMOTE.search(css.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{css.relative_to(html_root).as_posix()}: url()/@import from the network")
    return found


# --- table of contents and its check (fast) -------------------------------------------------------------


def test_toc_lists_the_book_in_reading_order() -> None:
    assert bookbuild.toc_entries(ROOT / "_toc.yml") == EXPECTED_TOC


def test_toc_entries_follow_nested_sections(tmp_path: Path) -> None:
    toc = {"format": "jb-book", "root": "intro",
           "parts": [{"chapters": [{"file": "a", "sections": [{"file": "a1"}, {"url": "https://x"}]}]}]}
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump(toc), encoding="utf-8")
    assert bookbuild.toc_entries(tmp_path / "_toc.yml") == ["intro", "a", "a1"]


def test_toc_check_names_each_missing_file(tmp_path: Path) -> None:
    toc = {"format": "jb-book", "root": "intro", "chapters": [{"file": "ch1.md"}, {"file": "ch2"}]}
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump(toc), encoding="utf-8")
    (tmp_path / "intro.ipynb").write_text("{}", encoding="utf-8")
    with pytest.raises(InputError) as err:
        bookbuild.check_toc(tmp_path)
    assert err.value.field == "file"
    assert "ch1.md" in err.value.message and "ch2 (.md/.ipynb/.rst)" in err.value.message
    assert "intro" not in err.value.message
    (tmp_path / "ch1.md").write_text("# 1\n", encoding="utf-8")
    (tmp_path / "ch2.md").write_text("# 2\n", encoding="utf-8")
    assert bookbuild.check_toc(tmp_path) == 3


def test_toc_check_command_fails_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\n", encoding="utf-8")
    assert bookbuild.main(["check-toc", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "intro (.md/.ipynb/.rst)" in err


def test_unreadable_toc_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "_toc.yml").write_text("root: [unclosed\n", encoding="utf-8")
    with pytest.raises(InputError):
        bookbuild.toc_entries(tmp_path / "_toc.yml")


# --- parallel execution step (fast parts) -----------------------------------------------------------------


def test_only_notebooks_are_executed() -> None:
    notebooks = [p.relative_to(ROOT).as_posix() for p in bookexec.toc_notebooks(ROOT)]
    written = [e for e, source in toc_chapters() if source is not None]
    assert notebooks == written  # the prose pages in book/ are plain MyST, not notebooks


def test_cached_config_changes_only_the_execution_mode(tmp_path: Path) -> None:
    dest = bookexec.write_cached_config(ROOT, tmp_path / "cache", tmp_path / "cfg.yml")
    derived = yaml.safe_load(dest.read_text(encoding="utf-8"))
    original = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert derived.pop("execute") == {
        **original.pop("execute"), "execute_notebooks": "cache", "cache": str((tmp_path / "cache").resolve())
    }
    assert derived == original


# --- configuration (fast) -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def test_config_serves_mathjax_and_vega_from_the_vendor_folder(config: dict) -> None:
    sphinx = config["sphinx"]["config"]
    assert sphinx["mathjax_path"] == vendor.MATHJAX_ENTRY
    assert sphinx["pdtune_vega_bundle"] == vendor.VEGA_BUNDLE
    assert "book/assets/vendor" in sphinx["html_static_path"]
    assert sphinx["nb_ipywidgets_js"] == {}
    assert not (ROOT / "_static").exists()  # Jupyter Book would inject every script found there


def test_config_loads_nothing_from_the_internet(config: dict) -> None:
    extensions = config["sphinx"]["config"]["extensions"]
    assert "sphinx_thebe" not in extensions and "pdtune.site.bookbuild" in extensions
    launch = config["launch_buttons"]
    assert not any(launch.get(k) for k in ("binderhub_url", "jupyterhub_url", "thebe", "colab_url"))
    assert "http" not in json.dumps(config["sphinx"]["config"])


def test_the_published_book_is_the_make_book_build() -> None:
    """GitHub Pages deploys what `make book` writes, nothing else (.github/workflows/book.yml)."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text(encoding="utf-8"))
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    runs = [step.get("run", "") for step in build["steps"]]
    assert any(run.startswith("make book") for run in runs)
    upload = next(step for step in build["steps"] if "upload-pages-artifact" in step.get("uses", ""))
    assert upload["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and any("deploy-pages" in step.get("uses", "") for step in deploy["steps"])
    assert workflow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}


def test_bibliography_has_no_latex_markup_the_page_would_show() -> None:
    """pybtex prints LaTeX commands (\\texttt, \\emph) as they are: the References page would show them raw."""
    text = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("%"))
    assert re.findall(r"\\[a-zA-Z]+", body) == []


def test_config_always_executes_and_keeps_guides_out_of_the_book(config: dict) -> None:
    assert config["execute"]["execute_notebooks"] == "force"
    assert "**/README.md" in config["exclude_patterns"] and "README.md" in config["exclude_patterns"]
    assert config["only_build_toc_files"] is True


# --- vendored JavaScript -----------------------------------------------------------------------------------


@pytest.mark.xdist_group("book")  # one worker writes and reads book/assets/vendor
def test_vega_bundle_is_a_classic_script_defining_vega_embed(vendor_assets: Path) -> None:
    text = (vendor_assets / vendor.VEGA_BUNDLE).read_text(encoding="utf-8")
    body = text[text.index("*/") + 2 :].strip()
    assert body.startswith('(function () {\n"use strict";') and body.endswith("})();")
    assert "window.vegaEmbed=" in body and "window.vegaLite=" in body
    assert not re.search(r"^\s*(import|export)\s", body, re.MULTILINE)


@pytest.mark.xdist_group("book")  # one worker writes and reads book/assets/vendor
def test_mathjax_is_copied_without_its_cdn_redirect(vendor_assets: Path) -> None:
    mathjax = vendor_assets / vendor.MATHJAX_DIR
    assert (mathjax / "tex-chtml.js").is_file()
    assert any((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert not (mathjax / "latest.js").exists()


@pytest.mark.xdist_group("book")  # one worker writes and reads book/assets/vendor
def test_vendor_step_is_a_no_op_when_current(vendor_assets: Path, tmp_path: Path) -> None:
    assert vendor.is_current(vendor_assets)
    assert vendor.write_vendor(vendor_assets) is False
    copy = tmp_path / "vendor"
    shutil.copytree(vendor_assets, copy)
    (copy / vendor.VEGA_BUNDLE).unlink()
    assert not vendor.is_current(copy)


# --- the mini-book (slow, one build per session) ----------------------------------------------------------

def _soup(page: Path) -> BeautifulSoup:
    return BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_mini_book_inlines_specs_under_stable_ids(mini_book: Path) -> None:
    soup = _soup(mini_book / "charts.html")
    ids = [div["id"] for div in soup.select("div.pdtune-chart")]
    assert ids[0] == "pdtune-fixture-line" and ids[2] == "pdtune-fixture-slider"
    assert re.fullmatch(r"pdtune-auto-[0-9a-f]{10}", ids[1])
    spec = json.loads(soup.find("script", id="pdtune-fixture-line-spec").string)
    assert spec["title"]["subtitle"] == ["Modeled — fixture; not a measurement"]
    assert spec["$schema"].endswith(".json") and "vega-lite" in spec["$schema"]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_mini_book_loads_the_bundle_only_on_chart_pages(mini_book: Path) -> None:
    def bundle_tags(page: str) -> list:
        scripts = _soup(mini_book / page).find_all("script", src=True)
        return [s for s in scripts if vendor.VEGA_BUNDLE in s["src"]]

    assert len(bundle_tags("charts.html")) == 1 and bundle_tags("math.html") == []
    assert (mini_book / "_static" / vendor.VEGA_BUNDLE).is_file()
    assert (mini_book / "_static" / vendor.MATHJAX_ENTRY).is_file()


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_mini_book_shows_a_note_instead_of_a_widget(mini_book: Path) -> None:
    soup = _soup(mini_book / "charts.html")
    assert soup.select_one("p.pdtune-live-note") is not None
    assert soup.find("script", type="application/vnd.jupyter.widget-view+json") is None


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_mini_book_folds_solutions_and_numbers_equations(mini_book: Path) -> None:
    soup = _soup(mini_book / "math.html")
    assert soup.select_one(".solution.dropdown") is not None
    assert soup.select_one("#equation-mini-blocks") is not None


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_remote_asset_scan_passes_the_mini_book_and_catches_a_cdn(mini_book: Path, tmp_path: Path) -> None:
    assert remote_assets(mini_book) == []
    broken = tmp_path / "html"
    shutil.copytree(mini_book, broken)
    page = broken / "index.html"
    cdn = '<link rel="stylesheet" href="https://cdn.example.invalid/x.css"></head>'
    page.write_text(page.read_text(encoding="utf-8").replace("</head>", cdn), encoding="utf-8")
    expected = "index.html: <link rel=stylesheet href=https://cdn.example.invalid/x.css>"
    assert remote_assets(broken) == [expected]


@pytest.mark.slow
@pytest.mark.xdist_group("book")
@pytest.mark.parametrize("breakage", ["missing chapter", "missing assets"])
def test_a_bare_jupyter_book_build_stops_early_and_says_why(breakage: str, tmp_path: Path) -> None:
    source = write_mini_book(tmp_path / "src")
    if breakage == "missing chapter":
        toc = yaml.safe_load((source / "_toc.yml").read_text(encoding="utf-8"))
        toc["chapters"].append({"file": "ghost.md"})
        (source / "_toc.yml").write_text(yaml.safe_dump(toc), encoding="utf-8")
        expected = "_toc.yml: file: listed but missing: ghost.md"
    else:
        (source / "book" / "assets").unlink()  # the fixture's link to the real assets
        shutil.copytree(ROOT / "book" / "assets" / "static", source / "book" / "assets" / "static")
        (source / "book" / "assets" / "vendor").mkdir()
        expected = "vega/pdtune-vega.js is in none of book/assets/static, book/assets/vendor; "
    cmd = [str(BIN / "jupyter-book"), "build", str(source), "--path-output", str(tmp_path / "out")]
    cmd += ["-W", "-n"]
    done = subprocess.run(cmd, cwd=source, env=book_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert expected in done.stdout + done.stderr
    assert not list((tmp_path / "out").rglob("*.html"))  # stopped before writing a page


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_execute_step_fails_naming_the_notebook_that_raised(tmp_path: Path) -> None:
    source = write_mini_book(tmp_path / "src")
    page = source / "charts.md"
    page.write_text(page.read_text(encoding="utf-8").replace(
        'show(line, "fixture-line")', 'raise ValueError("fixture failure")'
    ), encoding="utf-8")
    cmd = [sys.executable, "-m", "pdtune.site.bookexec", str(source), "--cache", str(tmp_path / "cache")]
    cmd += ["--config-out", str(tmp_path / "cfg.yml")]
    done = subprocess.run(cmd, env=book_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "bookexec: failed charts.md" in done.stderr and "fixture failure" in done.stderr
    assert not (tmp_path / "cfg.yml").exists()


# --- the real book (slow; skipped while a listed chapter is unwritten) -------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_book_has_an_index_and_one_page_per_chapter(built_book: Path) -> None:
    assert (built_book / "index.html").is_file()
    for entry, _ in toc_chapters():
        page = built_book / f"{entry.removesuffix('.md')}.html"
        assert page.is_file(), f"no page for {entry}"
        assert _soup(page).select_one("h1") is not None
    assert not (built_book / "notebooks" / "README.html").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_book_loads_no_script_or_stylesheet_from_the_internet(built_book: Path) -> None:
    assert remote_assets(built_book) == []


#: What an author writes for other authors, never for a reader: MyST roles shown as text, the chapter
#: layer's glue machinery, notes about how numbers reach the page.
AUTHORING_NOTES = ("{term}", "{cite}", "{glue", "{ref}", "{eq}", "glue_numbers", "glued from", "Link to an entry",
                   "Chapters cite these", "pdtune.chapters.display")


@pytest.mark.slow
@pytest.mark.xdist_group("book")
def test_reader_pages_carry_no_authoring_notes(built_book: Path) -> None:
    """The prose of every page (code cells aside, which show the package's calls on purpose)."""
    from bs4 import BeautifulSoup

    found = []
    for page in sorted(built_book.rglob("*.html")):
        if {"_static", "_sources"} & set(page.parts):
            continue
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        article = soup.select_one("article.bd-article")
        if article is None:
            continue
        for code in article.select(".cell_input, .cell_output pre, div.highlight"):
            code.decompose()
        text = article.get_text(" ")
        found += [f"{page.relative_to(built_book)}: {note!r}" for note in AUTHORING_NOTES if note in text]
    assert found == []
