"""What a parameters file does not say, and what it says wrong, before any chapter runs.

* Topologies are checked against the model when the file is read (vLLM 0.33's rules, pdtune.scenario.
  layout_problem): ``TP3DP2`` for a 16-head model, ``+EP`` for a dense one, and MTP for a model without an MTP
  layer each stop ``pdtune workbook`` with one line naming the file and the key, exit status 2, and no OUT.
* Left-out values are filled in where a rule exists and listed with where they come from
  (pdtune.scenario.fill_defaults), never inherited silently.
* One default vLLM line, ``versions.DEFAULT_VLLM``, for every command and the workbook; the article's set
  and the book's chapters pass the article's 0.26.1.
* ``pdtune memory --model M --topology T --gpu G`` is the workbook's waterfall of that GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import article_scenario
from pdtune import article, versions
from pdtune.cli import build_parser, main
from pdtune.scenario import Scenario, fill_defaults, layout_problem
from pdtune.model import load_model
from pdtune.workbook import load_parameters, read_chapter, read_parameters_cell
from pdtune.workbook import book_chapters
from pdtune.workbook.summary import key_numbers
from pdtune.paths import REPO_ROOT


def _write(folder: Path, **values: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


@pytest.mark.parametrize(("values", "field", "words"), [
    ({"model": "qwen3-next-80b-a3b", "gpu": "h200", "decode_topologies": ["TEP8", "TP3DP2"]},
     "decode_topologies", "TP3DP2: TP3 cannot run qwen3-next-80b-a3b: 16 heads do not divide over TP=3"),
    ({"model": "llama-3.1-70b", "gpu": "h200", "prefill_topologies": ["TP4DP2+EP"], "decode_topologies": ["TP8"],
      "num_speculative_tokens": 0}, "prefill_topologies", "+EP needs experts"),
    ({"model": "qwen3-235b-a22b", "gpu": "h200", "num_speculative_tokens": 3, "decode_topologies": ["TEP8"],
      "prefill_topologies": ["TP8"]}, "num_speculative_tokens", "has no MTP layer"),
    ({"model": "qwen3-235b-a22b", "decode_topologies": ["DP256+EP"], "prefill_topologies": ["TP8"]},
     "decode_topologies", "256 expert-parallel ranks for 128 experts"),
])
def test_a_layout_the_model_cannot_run_fails_before_any_chapter(
    values: dict, field: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    params = _write(tmp_path / "in", **values)
    out = tmp_path / "OUT"
    assert main(["workbook", str(params), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{params}: {field}: " in err and words in err, err
    assert not out.exists()


def test_layout_problem_follows_vllms_rules() -> None:
    qwen_next = load_model("qwen3-next-80b-a3b")  # 16 attention heads, 2 KV heads, 512 experts
    common = dict(max_model_len=9216, kv_cache_dtype="fp8", vllm="0.33")
    assert layout_problem(qwen_next, "TP4DP2+EP", **common) == ""
    assert layout_problem(qwen_next, "TEP16", **common) == ""  # KV heads are replicated, not split
    assert "do not divide" in layout_problem(qwen_next, "TP3DP2", **common)
    assert "do not divide" in layout_problem(qwen_next, "TP32", **common)
    assert layout_problem(qwen_next, "TQ4", **common)  # not a topology name: the parser says why


def test_what_a_minimal_file_leaves_out_is_derived_or_named() -> None:
    params = load_parameters(REPO_ROOT / "data" / "params" / "llama-3.1-70b-h200.yaml")
    s = params.resolved
    lines = {line.split(" = ")[0]: line for line in s.defaults_used}
    # derived for this model and GPU
    assert s.num_speculative_tokens == 0 and "no MTP layer" in lines["num_speculative_tokens"]
    assert s.gpu_memory_gib == pytest.approx(139.81) and "h200" in lines["gpu_memory_gib"]
    assert s.prefill_results == s.decode_results == s.disagg_results == ()
    assert "so the chapters start from none" in lines["prefill_results"]
    # the words the summary and each chapter count "carried over" by are on the article's values only (the
    # results lists once said "none is carried over", and the summary counted 3 more than there were)
    article = {"isl", "osl", "kv_cache_dtype", "non_torch_gib", "activation_peak_gib", "cudagraph_estimate_gib",
               "max_num_seqs", "accuracy_threshold"}
    assert {name for name, line in lines.items() if "carried over" in line} == article
    # carried over from the article, and said so
    for name in ("non_torch_gib", "activation_peak_gib", "cudagraph_estimate_gib", "isl", "osl", "kv_cache_dtype"):
        assert "carried over" in lines[name], name
    assert lines["non_torch_gib"].startswith("non_torch_gib = 2.9: the article's GB300 start-up measurement")
    assert lines["vllm"].startswith(f"vllm = {versions.DEFAULT_VLLM}: pdtune's default")
    # what the file gives is not listed
    for given in ("model", "gpu", "gpu_memory_utilization", "decode_topologies", "prefill_topologies", "title"):
        assert given not in lines
    # a dense model takes the article's layouts without +EP when it leaves them out
    dense = fill_defaults(Scenario(model="llama-3.1-70b"), {"model"})
    assert all("+EP" not in t for t in dense.prefill_topologies + dense.decode_topologies)
    assert "TEP8" not in dense.decode_topologies and "TP8" in dense.decode_topologies
    # the article's own set leaves nothing out
    assert load_parameters(REPO_ROOT / "data" / "params" / "article.yaml").resolved.defaults_used == ()


def test_a_parameters_file_may_not_write_the_computed_list(tmp_path: Path) -> None:
    from pdtune.errors import InputError

    with pytest.raises(InputError, match="defaults_used: written by the workbook"):
        load_parameters(_write(tmp_path, model="llama-3.1-70b", defaults_used=["x = 1: made up"]))


def _vllm_default(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return next(a.default for a in sub.choices[command]._actions if "--vllm" in a.option_strings)


def test_one_default_vllm_for_every_command_and_the_workbook() -> None:
    assert versions.DEFAULT_VLLM == versions.CURRENT
    for command in ("state", "memory", "predict"):
        assert _vllm_default(command) == versions.DEFAULT_VLLM, command
    assert Scenario().vllm == versions.DEFAULT_VLLM
    # the article's parameter set, and so the book, pass the article's vLLM explicitly
    assert article_scenario().vllm == article.ARTICLE_VLLM == "0.26.1"
    for chapter in book_chapters(REPO_ROOT):
        cell = read_parameters_cell(read_chapter(chapter.source))
        if "vllm" in cell.listed:
            assert cell.listed["vllm"].default == '"0.26.1"', chapter.name


def test_memory_with_a_model_and_a_topology_is_the_workbooks_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``pdtune memory --model --topology --gpu`` gives the KV cache the workbook's summary gives for that
    layout (same weights per GPU from the config, same overhead defaults)."""
    params = load_parameters(_write(tmp_path, model="qwen3-next-80b-a3b", gpu="h200",
                                    decode_topologies=["TP4DP2+EP"], prefill_topologies=["TP4"]))
    row = next(r for r in key_numbers(params.resolved).engines if not r["mtp"])
    assert main(["memory", "--model", "qwen3-next-80b-a3b", "--topology", "TP4DP2+EP", "--gpu", "h200",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_cache_gib"] == pytest.approx(row["kv_cache_gib"], abs=1e-9)
    assert out["weights_gib"] == pytest.approx(row["weights_gib"], abs=1e-9)
    assert out["requests_per_engine"] == pytest.approx(row["requests_per_engine"])
    assert set(out["assumed"]) == {"--non-torch-gib", "--activation-gib", "--graphs-gib", "--gpu-memory-utilization"}
    # the overheads are no longer 0 by default: 70.93 GiB of KV for the workbook's 57.90 was the bug
    assert out["non_torch_gib"] == pytest.approx(2.90)


def test_memory_with_a_topology_the_model_cannot_run_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "--model", "qwen3-next-80b-a3b", "--topology", "TP3DP2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "16 heads do not divide over TP=3" in err
