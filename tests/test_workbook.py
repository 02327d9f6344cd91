"""``pdtune workbook``: the parameters file is checked before anything runs, chapters run with papermill into
a folder that appears whole, and a failing chapter is reported without stopping the others.

Everything here runs against small stand-in books written under ``tmp_path`` (a ``_toc.yml`` and a few
jupytext chapters), so it does not depend on the real chapters; ``test_workbook_chapters.py`` runs those.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from pathlib import Path

import pytest
import yaml

from pdtune import article, versions
from pdtune.cli import main
from pdtune.dataset import generated_files
from pdtune.paths import REPO_ROOT
from pdtune.scenario import Scenario
from pdtune.workbook import (
    Chapter,
    ChapterResult,
    book_chapters,
    chapter_parameters,
    load_parameters,
    read_chapter,
    read_parameters_cell,
)
from pdtune.workbook.summary import key_numbers
from test_book_build import remote_assets

PARAMS_DIR = REPO_ROOT / "data" / "params"
BUNDLED = sorted(PARAMS_DIR.glob("*.yaml"))

HEADER = """\
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


# ------------------------------------------------------------------------------------- fixtures


def write_point(folder: Path, concurrency: int, tpot_ms: float, total_tps: float, **deployment: object) -> None:
    """One ``vllm bench serve --save-result`` file, with the deployment keys ``--metadata`` would add."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "backend": "vllm", "model_id": "m", "tokenizer_id": "m", "num_prompts": 10 * concurrency, "burstiness": 1.0,
        # the duration the token totals and the throughputs imply (pdtune checks output tok/s = tokens / duration)
        "max_concurrency": concurrency, "duration": 10 * concurrency * 9216 / total_tps, "completed": 10 * concurrency,
        "failed": 0, "total_input_tokens": 10 * concurrency * 8192, "total_output_tokens": 10 * concurrency * 1024,
        "output_throughput": total_tps / 9, "total_token_throughput": total_tps,
        "median_ttft_ms": 500.0, "p99_ttft_ms": 900.0, "mean_tpot_ms": tpot_ms, "median_tpot_ms": tpot_ms,
        "p99_tpot_ms": tpot_ms * 1.5, "median_itl_ms": tpot_ms, **deployment,
    }
    (folder / f"concurrency_{concurrency}.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    """A tiny measured cluster: two prefill topologies, one decode topology, two xPyD deployments."""
    root = tmp_path / "cluster"
    # TP4DP2+EP wins at low concurrency, TP2DP4+EP once it rises (the article's finding)
    for topology, coefficient, exponent in (("TP4DP2+EP", 1300.0, 0.5), ("TP2DP4+EP", 1000.0, 0.6)):
        folder = root / "prefill" / topology
        for c in (1, 8, 64):
            write_point(folder, c, 10.0, coefficient * c**exponent, topology=topology, mode="prefill")
        (folder / "pdtune-gpus.yaml").write_text("total: 8\n", encoding="utf-8")
    decode = root / "decode" / "TEP8"
    for c in (1, 64, 512):
        write_point(decode, c, 5.0 + c / 50, 200.0 * c ** 0.7, topology="TEP8", mode="decode")
    (decode / "pdtune-gpus.yaml").write_text("total: 8\n", encoding="utf-8")
    for n_prefill, acc in ((1, 0.96), (2, 0.97)):
        folder = root / "disagg" / f"{n_prefill}p1d"
        for c, tpot in ((4, 6.0), (64, 12.0), (512, 40.0)):
            write_point(folder, c, tpot, n_prefill * 300.0 * c ** 0.6, prefill_topology="TP2DP4+EP",
                        decode_topology="TEP8", n_prefill_workers=n_prefill, n_decode_workers=1, mode="disagg",
                        accuracy=acc)
        (folder / "pdtune-gpus.yaml").write_text(f"prefill: {8 * n_prefill}\ndecode: 8\n", encoding="utf-8")
    return root


def write_params(folder: Path, results_root: Path | None = None, **overrides: object) -> Path:
    """A parameters file for Qwen3-Next on H200; result paths relative to the file, as users write them."""
    folder.mkdir(parents=True, exist_ok=True)
    values: dict[str, object] = {
        "title": "stand-in",
        "model": "qwen3-next-80b-a3b",
        "gpu": "h200",
        "gpu_memory_utilization": 0.9,
        "isl": 8192,
        "osl": 1024,
        "vllm": "0.33",
        "prefill_topologies": ["TP4DP2+EP", "TP2DP4+EP"],
        "decode_topologies": ["TEP8", "TP4"],
        "prefill_results": [], "decode_results": [], "disagg_results": [],
    }
    if results_root is not None:
        for kind in ("prefill", "decode", "disagg"):
            values[f"{kind}_results"] = [os.path.relpath(results_root / kind, folder)]
    values.update(overrides)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path


def chapter(title: str, parameters: str, *cells: str) -> str:
    """A jupytext MyST chapter: a title, a parameters cell, then one section per code cell."""
    text = HEADER + f"# {title}\n\n```{{code-cell}} ipython3\n:tags: [parameters]\n\n{parameters.strip()}\n```\n"
    for i, code in enumerate(cells, start=1):
        text += f"\n## Step {i}\n\nThe next cell does step {i}.\n\n```{{code-cell}} ipython3\n{code.strip()}\n```\n"
    return text


def write_book(root: Path, chapters: dict[str, str | None], *, html: bool = False) -> Path:
    """A stand-in book: ``chapters`` maps ``notebooks/NN_x.md`` to its text (None: listed, not written)."""
    (root / "notebooks").mkdir(parents=True, exist_ok=True)
    (root / "intro.md").write_text("(intro)=\n# Stand-in book\n\nA fixture.\n", encoding="utf-8")
    toc = {"format": "jb-book", "root": "intro", "chapters": [{"file": name} for name in chapters]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
    for name, text in chapters.items():
        if text is not None:
            (root / name).write_text(text, encoding="utf-8")
    if html:
        (root / "_config.yml").write_text((REPO_ROOT / "_config.yml").read_text(encoding="utf-8"), encoding="utf-8")
        (root / "book").mkdir(exist_ok=True)
        (root / "book" / "references.bib").write_text(
            (REPO_ROOT / "book" / "references.bib").read_text(encoding="utf-8"), encoding="utf-8")
        (root / "book" / "assets").symlink_to(REPO_ROOT / "book" / "assets", target_is_directory=True)
    return root


def marker_chapter(marker: Path) -> str:
    """A chapter that leaves a file behind when it runs: proof that it did, or did not, run."""
    return chapter("Marker", 'isl: int = 8192  # input tokens', f"from pathlib import Path\nPath({str(marker)!r}).touch()")


def run_cli(*argv: str) -> int:
    return main(["workbook", *argv, "--quiet"])


# ------------------------------------------------------------------------------------- the bundled files


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_parameter_files_name_only_scenario_fields(path: Path) -> None:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    scenario = Scenario.from_mapping(raw, source=str(path))
    assert scenario.title, f"{path.name}: give the scenario a title for the summary"
    if path.stem in MINIMAL:
        # a short file on purpose: the workbook lists what it fills in (pdtune.scenario.fill_defaults)
        assert len(load_parameters(path).resolved.defaults_used) >= 10
        return
    assert set(raw) == set(Scenario.field_names()), f"{path.name}: write every key out, so the file documents it"


#: Bundled parameter files that leave most keys out on purpose, to show what the workbook fills in.
MINIMAL = {"llama-3.1-70b-h200"}


def test_the_parameter_sets_exist() -> None:
    assert {p.stem for p in BUNDLED} == {"article", "qwen3-next-80b-h200", "deepseek-v3-gb200", "qwen3-235b-h200",
                                         "llama-3.1-70b-h200"}


def test_article_parameters_are_the_defaults_but_for_the_vllm_they_pass_explicitly() -> None:
    """A file that leaves a key out gets the article's setup, except the vLLM line: pdtune's default, the
    current one. The article's own set (and so the book) passes the article's 0.26.1."""
    raw = yaml.safe_load((PARAMS_DIR / "article.yaml").read_text(encoding="utf-8"))
    written = Scenario.from_mapping(raw)
    default = Scenario()
    assert written.vllm == article.ARTICLE_VLLM and default.vllm == versions.DEFAULT_VLLM == versions.CURRENT
    for name in Scenario.field_names():
        if name.endswith("_results") or name == "vllm_logs":
            mine = [written.resolve(p, base=PARAMS_DIR).resolve() for p in getattr(written, name)]
            theirs = [default.resolve(p).resolve() for p in getattr(default, name)]
            assert mine == theirs, name
        elif name not in ("title", "vllm"):
            assert getattr(written, name) == getattr(default, name), name


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_parameter_files_load_once_their_data_exists(path: Path) -> None:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    scenario = Scenario.from_mapping(raw)
    missing = [p for kind in ("prefill", "decode", "disagg") for p in getattr(scenario, f"{kind}_results")
               if not scenario.resolve(p, base=PARAMS_DIR).exists()]
    if missing:
        pytest.skip(f"{path.name}: results not generated yet: {', '.join(missing)}")
    params = load_parameters(path)
    numbers = key_numbers(params.resolved)
    assert numbers.state.bytes > 0 and numbers.engines


H200_DATASET = REPO_ROOT / "data" / "clusters" / "h200-qwen3-next-modeled"


def test_h200_dataset_is_what_its_script_generates(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("h200_generate", H200_DATASET / "generate.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    fresh = script.generate(tmp_path / "h200")
    committed = generated_files(H200_DATASET)
    assert generated_files(fresh) == committed and len(committed) > 100
    stale = [str(rel) for rel in committed if (fresh / rel).read_bytes() != (H200_DATASET / rel).read_bytes()]
    assert stale == [], f"regenerate with data/clusters/h200-qwen3-next-modeled/generate.py: {stale[:3]}"
    records = [json.loads((H200_DATASET / rel).read_text(encoding="utf-8")) for rel in committed]
    results = [r for r in records if "max_concurrency" in r]
    assert results and all(r["modeled"] is True and "accuracy" not in r for r in results)
    assert (H200_DATASET / "README.md").read_text(encoding="utf-8").count("MODELED") >= 1


# ------------------------------------------------------------------------------------- bad parameters


@pytest.fixture()
def marker_book(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    return write_book(tmp_path / "book", {"notebooks/01_marker.md": marker_chapter(marker)}), marker


BAD_CASES = [
    # (overrides of the parameters file, the key the message must blame, words it must contain)
    ({"prefill_results": ["no/such/folder"]}, "prefill_results", "no such file or folder"),
    ({"vllm_logs": ["missing.log"]}, "vllm_logs", "no such file or folder"),
    ({"isl_tokens": 8192}, "isl_tokens", "unknown parameter"),
    ({"isl": "8192"}, "isl", "whole number"),
    ({"gpu_memory_utilization": "high"}, "gpu_memory_utilization", "number"),
    ({"decode_topologies": "TEP8", "prefill_topologies": 4}, "prefill_topologies", "string"),
    ({"vllm": 0.33}, "vllm", 'quote it in YAML: vllm: "0.33"'),
    ({"gpu": "h300"}, "gpu", "unknown GPU"),
    ({"model": "no-such-model"}, "model", "bundled model"),
    ({"decode_topologies": ["TPX"]}, "decode_topologies", "cannot read"),
    ({"gpus": "prefill=8"}, "gpus", "both prefill and decode"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "(0, 1]"),
]


@pytest.mark.parametrize(("overrides", "key", "words"), BAD_CASES, ids=[c[1] + "-" + c[2][:12] for c in BAD_CASES])
def test_bad_parameters_fail_before_any_chapter_runs(
    tmp_path: Path, marker_book: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
    overrides: dict[str, object], key: str, words: str,
) -> None:
    book, marker = marker_book
    params = write_params(tmp_path / "params", **overrides)
    out = tmp_path / "runs" / "out"
    assert run_cli(str(params), "--out", str(out), "--book", str(book)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(params) in err and f": {key}:" in err and words in err, err
    assert not out.exists() and not (tmp_path / "runs").exists(), "nothing may be created on bad input"
    assert not marker.exists(), "a chapter ran before the parameters were checked"


def test_results_pdtune_cannot_read_fail_before_any_chapter_runs(
    tmp_path: Path, marker_book: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    book, marker = marker_book
    folder = tmp_path / "cluster" / "decode"
    write_point(folder, 8, 10.0, 1000.0)  # no GPU count anywhere: per-GPU throughput cannot be computed
    params = write_params(tmp_path / "params", decode_results=["../cluster/decode"])
    out = tmp_path / "out"
    assert run_cli(str(params), "--out", str(out), "--book", str(book)) == 2
    err = capsys.readouterr().err
    assert "concurrency_8.json: gpus:" in err
    assert not out.exists() and not marker.exists()


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"),
    ("- model\n- gpu\n", "'key: value' lines"),
    ("model: a\nmodel: b\n", "given twice"),
    ("model: [unclosed\n", "not valid YAML"),
])
def test_malformed_parameter_files_are_one_line_errors(
    tmp_path: Path, marker_book: tuple[Path, Path], capsys: pytest.CaptureFixture[str], text: str, words: str,
) -> None:
    book, marker = marker_book
    params = tmp_path / "p.yaml"
    params.write_text(text, encoding="utf-8")
    assert run_cli(str(params), "--out", str(tmp_path / "out"), "--book", str(book)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "p.yaml" in err, err
    assert not (tmp_path / "out").exists() and not marker.exists()


def test_missing_parameters_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out")) == 2
    assert "nope.yaml: -: no such parameters file" in capsys.readouterr().err


def test_existing_output_is_refused_without_force(
    tmp_path: Path, marker_book: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    book, marker = marker_book
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    params = write_params(tmp_path / "params")
    assert run_cli(str(params), "--out", str(out), "--book", str(book)) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    # --force replaces earlier workbook output only, never a folder of someone's files
    assert run_cli(str(params), "--out", str(out), "--book", str(book), "--force") == 2
    assert "not a workbook output" in capsys.readouterr().err
    assert (out / "keep.txt").read_text(encoding="utf-8") == "mine" and not marker.exists()


def test_force_never_replaces_a_folder_holding_the_inputs(
    tmp_path: Path, marker_book: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    book, marker = marker_book
    params = write_params(tmp_path / "params")
    (tmp_path / "summary.json").write_text("{}", encoding="utf-8")  # looks like an earlier output
    assert run_cli(str(params), "--out", str(tmp_path), "--book", str(book), "--force") == 2
    assert "an input of this run" in capsys.readouterr().err
    assert params.is_file() and not marker.exists()


# ------------------------------------------------------------------------------------- parameters and chapters


def test_gpu_memory_follows_the_gpu_unless_given(tmp_path: Path) -> None:
    derived = load_parameters(write_params(tmp_path / "a"))
    assert derived.resolved.gpu_memory_gib == pytest.approx(139.81)
    assert any(line.startswith("gpu_memory_gib = 139.81: what torch reports for one h200")
               for line in derived.resolved.defaults_used)
    given = load_parameters(write_params(tmp_path / "b", gpu_memory_gib=140.0))
    assert given.resolved.gpu_memory_gib == 140.0
    assert not any(line.startswith("gpu_memory_gib") for line in given.resolved.defaults_used)


def test_paths_resolve_against_the_parameters_file(tmp_path: Path, results: Path) -> None:
    model_dir = tmp_path / "params" / "my-model"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(
        (REPO_ROOT / "data" / "models" / "qwen3-next-80b-a3b" / "config.json").read_text(encoding="utf-8"),
        encoding="utf-8")
    params = load_parameters(write_params(tmp_path / "params", results, model="my-model"))
    values = params.values()
    assert values["model"] == str(model_dir.resolve())
    assert values["prefill_results"] == [str((results / "prefill").resolve())]
    assert params.scenario.prefill_results != params.resolved.prefill_results  # as written vs absolute
    bundled = load_parameters(write_params(tmp_path / "other"))
    assert bundled.values()["model"] == "qwen3-next-80b-a3b"  # a bundled name stays a name


def test_only_the_chapters_own_parameters_are_injected(tmp_path: Path) -> None:
    path = tmp_path / "c.md"
    path.write_text(chapter("C", 'isl: int = 1  # input tokens\npoints: int = 4  # not a scenario field\n'
                                 'gpus: str = ""  # "8" or "prefill=8,decode=16"'), encoding="utf-8")
    cell = read_parameters_cell(read_chapter(path))
    assert cell is not None and cell.names == ("isl", "points", "gpus")
    assert {name: p.inferred_type_name for name, p in cell.listed.items()} == {"isl": "int", "points": "int"}
    assert cell.unlisted == ("gpus",)  # papermill skips a line with a second "=", even in its comment
    values = Scenario(isl=123, gpus="prefill=8,decode=16").to_dict()
    assert chapter_parameters(cell.names, values) == {"isl": 123, "gpus": "prefill=8,decode=16"}


def test_chapters_come_from_the_toc_in_reading_order() -> None:
    """Every page the toc lists under notebooks/, section pages included (a long chapter's later pages), in
    reading order: the workbook runs each one."""
    chapters = book_chapters(REPO_ROOT)
    names = [c.name for c in chapters]
    firsts = ["01_state", "02_memory", "03_graphs", "04_concurrency", "05_prefill", "06_decode", "07_frontier",
              "08_trust", "09_plan"]
    assert [n for n in names if n in firsts] == firsts
    assert [n[:2] for n in names] == sorted(n[:2] for n in names)  # a chapter's pages together, in order
    assert names[:3] == ["01_state", "01_state_hybrid", "01_state_vllm"]
    assert [c.number for c in chapters] == list(range(1, len(chapters) + 1))
    assert all(c.source is None or c.source.is_file() for c in chapters)


def test_a_failure_names_the_cell_line_and_section() -> None:
    result = ChapterResult(3, "03_graphs", "notebooks/03_graphs.md", "failed", cell=12, line=142,
                           section="Graph counts", error="ZeroDivisionError: division by zero")
    assert result.describe() == ('FAILED at cell 12 (line 142 of notebooks/03_graphs.md, under "Graph counts"): '
                                 "ZeroDivisionError: division by zero")
    assert result.to_dict()["failed_at"].startswith("cell 12")
    assert Chapter(5, "notebooks/05_prefill", None).notebook == "05_prefill.ipynb"


# ------------------------------------------------------------------------------------- the key numbers


def test_summary_state_and_kv_equal_pdtune_state(tmp_path: Path, results: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    params = load_parameters(write_params(tmp_path / "params", results))
    numbers = key_numbers(params.resolved)
    state_args = shlex.split(numbers.state.command)[1:]
    assert main([*state_args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_per_request"] == numbers.state.bytes
    checked = 0
    for row in numbers.engines:
        if row.get("command") is None:
            continue
        assert main([*shlex.split(row["command"])[1:], "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["max_concurrency"] == pytest.approx(row["requests_per_engine"], rel=1e-12)
        assert out["kv_cache_gib"] == pytest.approx(row["kv_cache_gib"], rel=1e-12)
        checked += 1
    assert checked == 4  # TEP8 and TP4, each with and without MTP
    article = key_numbers(Scenario(prefill_results=(), decode_results=(), disagg_results=()))
    assert article.state.bytes == 759 * 2**20
    assert numbers.state.bytes != article.state.bytes
    assert numbers.reference_engine is not None and article.reference_engine is not None
    assert numbers.reference_engine["kv_cache_gib"] != article.reference_engine["kv_cache_gib"]


def test_summary_best_topologies_frontier_and_sla(tmp_path: Path, results: Path) -> None:
    params = load_parameters(write_params(tmp_path / "params", results, min_tps_per_user=50.0,
                                          accuracy_threshold=0.965))
    summary = key_numbers(params.resolved).to_dict()
    prefill = summary["prefill"]
    assert [w["deployment"] for w in prefill["winners"]] == ["TP4DP2+EP", "TP2DP4+EP"]
    assert prefill["modeled"] is False and prefill["workload"] == "8192/1024"
    assert summary["decode"]["winners"] == [{"deployment": "TEP8", "from_concurrency": 1, "to_concurrency": 512}]
    front = summary["frontier"]
    assert [e["deployment"] for e in front["accuracy_gate"]["excluded"]] == ["1xTP2DP4+EP : 1xTEP8"]
    assert front["throughput_end"]["concurrency"] == 512 and front["latency_end"]["concurrency"] == 4
    assert front["throughput_end"]["tps_per_gpu"] >= front["latency_end"]["tps_per_gpu"]
    sla = front["sla"]
    assert sla["met"] and sla["tps_per_user"] >= 50 and sla["deployment"] == "2xTP2DP4+EP : 1xTEP8"


# ------------------------------------------------------------------------------------- running chapters

ALPHA = chapter(
    "Alpha",
    'model: str = "qwen3.8-2.4t"  # the model\nisl: int = 8192  # input tokens\n'
    "decode_results: list[str] = []  # decode result folders\npoints: int = 3  # not a scenario field",
    "import os, json\nprint(json.dumps({'model': model, 'isl': isl, 'decode_results': decode_results, "
    "'points': points, 'cwd': os.getcwd()}))",
)
BETA = chapter("Beta", "osl: int = 1024  # output tokens", "half = osl // 2", "ratio = osl / 0", "print('never')")
GAMMA = chapter("Gamma", "isl: int = 8192  # input tokens", "print(isl * 2)")


def _outputs(notebook: Path) -> str:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return "".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                   for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
def test_a_failing_chapter_leaves_the_others_and_a_clear_report(
    tmp_path: Path, results: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    book = write_book(tmp_path / "book", {"notebooks/01_alpha.md": ALPHA, "notebooks/02_beta.md": BETA,
                                          "notebooks/03_gamma.md": GAMMA, "notebooks/04_later.md": None})
    params = write_params(tmp_path / "params", results, isl=4096)
    out = tmp_path / "out"
    assert run_cli(str(params), "--out", str(out), "--book", str(book)) == 1
    captured = capsys.readouterr()
    # the failure names the chapter, the cell, its line in the source and the error, on stderr and in the report
    line = next(i for i, text in enumerate(BETA.splitlines(), start=1) if text == "ratio = osl / 0")
    expected = f"02_beta FAILED at cell 6 (line {line} of notebooks/02_beta.md, under \"Step 2\"): ZeroDivisionError"
    assert expected in captured.err and expected.split(" ", 1)[1] in captured.out
    assert "04_later missing: notebooks/04_later.md is listed in _toc.yml" in captured.err
    # the other chapters ran and their notebooks are there; so is the failed one, error included
    assert sorted(p.name for p in out.iterdir()) == ["01_alpha.ipynb", "02_beta.ipynb", "03_gamma.ipynb", "plan",
                                                    "summary.json", "summary.md"]
    alpha = json.loads(_outputs(out / "01_alpha.ipynb"))
    assert alpha == {"model": "qwen3-next-80b-a3b", "isl": 4096, "points": 3, "cwd": str(book / "notebooks"),
                     "decode_results": [str((results / "decode").resolve())]}
    assert "8192" in _outputs(out / "03_gamma.ipynb")  # gamma declares isl: it got 4096 * 2
    beta = json.loads((out / "02_beta.ipynb").read_text(encoding="utf-8"))
    assert any(o.get("ename") == "ZeroDivisionError" for c in beta["cells"] for o in c.get("outputs", []))
    assert beta["metadata"]["papermill"]["input_path"] == "notebooks/02_beta.md"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [c["status"] for c in summary["chapters"]] == ["ok", "failed", "ok", "missing"]
    assert summary["chapters"][1]["line"] == line and summary["status"] == "failed"
    assert "**failed** at cell 6" in (out / "summary.md").read_text(encoding="utf-8")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
def test_chapters_sharing_a_kernel_start_as_in_a_fresh_one(tmp_path: Path) -> None:
    """One worker runs both chapters in one kernel (pdtune.workbook.running._worker_kernel): the second sees
    nothing the first defined, counts its cells from 1, and inlines the vega bundle in its first chart again, so
    each executed notebook stands alone."""
    draw = ("import altair as alt\nimport pandas as pd\nfrom pdtune.charts import show\n"
            "show(alt.Chart(pd.DataFrame({'x': [1, 2]})).mark_point().encode(x='x'), 'shared-kernel')")
    first = chapter("First", "isl: int = 8192  # input tokens", "leaked = 'from the first chapter'", draw)
    second = chapter("Second", "isl: int = 8192  # input tokens",
                     "print('leaked' in globals(), 'first' in repr(globals().get('leaked')))", draw)
    book = write_book(tmp_path / "book", {"notebooks/01_first.md": first, "notebooks/02_second.md": second})
    out = tmp_path / "out"
    assert run_cli(str(write_params(tmp_path / "params")), "--out", str(out), "--book", str(book),
                   "--jobs", "1") == 0
    pages = {}
    for name in ("01_first", "02_second"):
        nb = json.loads((out / f"{name}.ipynb").read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert code[0]["execution_count"] == 1, name
        html = "".join("".join(o.get("data", {}).get("text/html", "")) for c in code for o in c.get("outputs", []))
        assert "Vega-Lite" in html and 'id="pdtune-shared-kernel"' in html, name  # bundle and the id unsuffixed
        pages[name] = _outputs(out / f"{name}.ipynb")
    assert "False False" in pages["02_second"]


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
def test_a_cell_that_hangs_times_out_and_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = chapter("Slow", "isl: int = 8192  # input tokens", "import time\ntime.sleep(60)", "print('after')")
    book = write_book(tmp_path / "book", {"notebooks/01_slow.md": slow, "notebooks/02_gamma.md": GAMMA})
    out = tmp_path / "out"
    assert run_cli(str(write_params(tmp_path / "params")), "--out", str(out), "--book", str(book),
                   "--timeout", "3") == 1
    err = capsys.readouterr().err
    line = next(i for i, text in enumerate(slow.splitlines(), start=1) if text == "import time")
    assert f"01_slow FAILED at cell 4 (line {line} of notebooks/01_slow.md, under \"Step 1\"): " in err, err
    assert "CellTimeoutError" in err
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [c["status"] for c in summary["chapters"]] == ["failed", "ok"]
    assert (out / "01_slow.ipynb").is_file()  # what ran before the timeout is kept


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
def test_html_book_and_force_replaces_an_earlier_run(
    tmp_path: Path, results: Path, vendor_assets: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    book = write_book(tmp_path / "book", {"notebooks/01_alpha.md": ALPHA, "notebooks/02_gamma.md": GAMMA}, html=True)
    params = write_params(tmp_path / "params", results)
    out = tmp_path / "out"
    assert run_cli(str(params), "--out", str(out), "--book", str(book)) == 0
    first = (out / "summary.json").stat().st_mtime_ns
    assert run_cli(str(params), "--out", str(out), "--book", str(book), "--html", "--force") == 0
    report = capsys.readouterr().out
    assert "html: html/index.html" in report and "warning" not in report
    assert (out / "summary.json").stat().st_mtime_ns != first
    html = out / "html"
    pages = {p.relative_to(html).as_posix() for p in html.rglob("*.html")}
    assert {"index.html", "workbook-summary.html", "intro.html", "notebooks/01_alpha.html",
            "notebooks/02_gamma.html"} <= pages
    assert 'url=workbook-summary.html' in (html / "index.html").read_text(encoding="utf-8")
    summary_page = (html / "workbook-summary.html").read_text(encoding="utf-8")
    assert "Workbook summary: stand-in" in summary_page and "notebooks/01_alpha.html" in summary_page
    assert remote_assets(html) == []  # offline: the book's own check of every page and stylesheet
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["html"] == {"built": True, "index": "html/index.html", "warnings": 0, "log": None, "message": ""}
    assert not (out / ".html-src").exists() and not (out / ".html-build").exists()


def test_papermill_sees_types_and_defaults_of_a_stand_in(tmp_path: Path) -> None:
    """The convention the workbook relies on: a typed cell is what ``papermill --help-notebook`` lists."""
    path = tmp_path / "a.md"
    path.write_text(ALPHA, encoding="utf-8")
    cell = read_parameters_cell(read_chapter(path))
    assert cell is not None
    assert cell.listed["decode_results"].inferred_type_name == "list[str]"
    assert cell.listed["decode_results"].default == "[]" and cell.listed["model"].help == "the model"

