"""The workbook's plan: its ``plan:`` section, the draft model, DCP and calibration parameters.

A parameters file with a ``plan:`` section gets ``OUT/plan/plan.json`` (what ``pdtune plan --json`` prints, read
back by ``pdtune recipe``'s reader), the recipes of every pick when ``recipes: true``, and a summary naming the
picks and the recipe files. ``speculative_model`` and ``decode_context_parallel_size`` reach the KV room the
way ``pdtune state`` counts them; ``calibration`` gives the plan its factors. Bad values are refused in
``tests/badinputs.py`` (the campaign, cause 13).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from pdtune.cli import main
from pdtune.plan import load_plan
from pdtune.recipe import accepted_flags
from pdtune.workbook import load_parameters
from pdtune.workbook.planning import scenario_plan
from pdtune.workbook.summary import key_numbers

from test_workbook import chapter, write_book, write_params

FAST_PLAN = {"max_gpus": 16, "min_tps_per_user": [20, 50], "recipes": True}


def _book(root: Path) -> Path:
    return write_book(root, {"notebooks/01_x.md": chapter("X", "isl: int = 8192  # input tokens", "print(isl)")})


def test_workbook_writes_the_plan_and_the_summary_names_picks_and_recipes(tmp_path: Path) -> None:
    params = write_params(tmp_path / "params", plan=FAST_PLAN)
    out = tmp_path / "out"
    assert main(["workbook", str(params), "--out", str(out), "--book", str(_book(tmp_path / "book")),
                 "--quiet"]) == 0
    data = load_plan(out / "plan" / "plan.json")  # the file pdtune recipe reads, checked key by key
    assert data["modeled"] is True and data["settings"]["max_gpus"] == 16
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))["plan"]
    assert summary["file"] == "plan/plan.json" and summary["modeled"] is True
    rows = {r["row"]: r for r in data["rows"]}
    assert [p["sla"] for p in summary["picks"]] == [">= 20 tokens/s per user", ">= 50 tokens/s per user"]
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert "## Plan" in markdown and "modeled" in markdown
    for pick, written in zip(summary["picks"], data["picks"], strict=True):
        assert pick["met"] and written["row"] == pick["row"]
        assert rows[pick["row"]]["deployment"] == pick["deployment"] and pick["tps_per_user"] >= written["sla"][
            "min_tps_per_user"]
        assert pick["recipes"] and all((out / f).is_file() for f in pick["recipes"])
        assert f"**{pick['deployment']}**" in markdown
        for f in pick["recipes"]:
            assert f"`{f}`" in markdown
    deploy = [f for f in summary["recipes"] if Path(f).name.startswith("deploy-row")]
    assert deploy and set(summary["recipes"]) == set(data["recipes"])
    recipe = yaml.safe_load((out / deploy[0]).read_text(encoding="utf-8"))
    flags = accepted_flags()
    for role in ("prefill", "decode"):
        assert all(f"--{k}" in flags for k in recipe["backend"]["vllm_config"][role])


def test_a_budget_only_an_aggregated_server_fits_plans_it(tmp_path: Path) -> None:
    """Llama-3.1-70B in BF16 on 4 H100s: one TP4 server fits, no prefill/decode pair (8 GPUs at least). The
    workbook plans aggregated serving, writes its recipe, and its summary says why no pair is there and gives
    no KV-transfer share for an aggregated pick."""
    params = write_params(tmp_path / "params", model="llama-3.1-70b", gpu="h100", num_speculative_tokens=0,
                          prefill_topologies=["TP4"], decode_topologies=["TP4"],
                          plan={"max_gpus": 4, "min_tps_per_user": [20], "recipes": True})
    out = tmp_path / "out"
    assert main(["workbook", str(params), "--out", str(out), "--book", str(_book(tmp_path / "book")),
                 "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))["plan"]
    [pick] = summary["picks"]
    assert pick["met"] and pick["mode"] == "agg" and pick["deployment"] == "1xTP4"
    recipe = yaml.safe_load((out / next(f for f in pick["recipes"] if f.endswith(".yaml"))).read_text())
    assert recipe["resources"]["agg_workers"] == 1 and recipe["resources"]["gpus_per_agg"] == 4
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert "0 rate-matched disaggregated deployments (4 GPUs are fewer than the smallest" in markdown
    assert "KV transfer)" not in markdown and "no disaggregated deployment fits 4 GPUs" in markdown
    # whole tokens/s per GPU as the comparison sentence gives them, tokens/s per user to one decimal (a whole
    # 25.0 printed "25" beside "62.2")
    line = next(ln for ln in markdown.splitlines() if ln.startswith("- SLA >= 20"))
    assert re.search(r"concurrency \d+: [\d,]+ tok/s per GPU, [\d,]+\.\d tok/s per user, TTFT [\d,]+ ms;", line), line


def test_the_workbook_plan_is_pdtune_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same question on the command line gives the same picks."""
    params = load_parameters(write_params(tmp_path / "params", plan=FAST_PLAN))
    result = scenario_plan(params.resolved, params.source)  # searched in a child process
    s = params.resolved
    argv = ["plan", s.model, "--gpu", s.gpu, "--max-gpus", "16", "--isl", str(s.isl), "--osl", str(s.osl),
            "--min-tps-per-user", "20,50", "--gpu-memory-utilization", str(s.gpu_memory_utilization),
            "--mtp", str(s.num_speculative_tokens), "--acceptance", str(s.mtp_acceptance), "--json"]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    mine = result.data
    assert [p["row"] for p in cli["picks"]] == [p["row"] for p in mine["picks"]]
    assert [r["deployment"] for r in cli["rows"]] == [r["deployment"] for r in mine["rows"]]


def test_a_budget_nothing_fits_is_refused_before_anything_runs(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    params = write_params(tmp_path / "params", model="qwen3-235b-a22b", num_speculative_tokens=0,
                          prefill_topologies=["TP8"], decode_topologies=["TP8"], plan={"max_gpus": 2})
    out = tmp_path / "out"
    assert main(["workbook", str(params), "--out", str(out), "--book", str(_book(tmp_path / "book")),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(params) in err[0] and ": plan.max_gpus:" in err[0]
    assert "smallest disaggregated deployment" in err[0]
    assert not out.exists()


def test_a_draft_model_and_dcp_reach_the_kv_room_as_pdtune_state_counts_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = dict(model="llama-3.1-8b", prefill_topologies=["TP2"], decode_topologies=["TP2", "TP4"],
                num_speculative_tokens=3, plan={"max_gpus": 8})
    plain = key_numbers(load_parameters(write_params(tmp_path / "a", **{**base, "num_speculative_tokens": 0}))
                        .resolved)
    drafted = load_parameters(write_params(tmp_path / "b", **base, speculative_model="eagle3-llama3-8b",
                                           decode_context_parallel_size=2))
    numbers = key_numbers(drafted.resolved)
    rows = [r for r in numbers.engines if r["mtp"]]
    assert rows and all("draft eagle3" in r["note"] for r in rows)
    for row in numbers.engines:
        words = shlex.split(row["command"])
        assert "--decode-context-parallel-size" in words
        if row["mtp"]:
            assert "--speculative-model" in words
        assert main([*words[1:], "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["max_concurrency"] == pytest.approx(row["requests_per_engine"])
    # DCP 2 shards the full-attention tokens: the same TP holds more requests than without it
    tp2 = {r["topology"]: r for r in plain.engines if not r["mtp"]}["TP2"]
    assert {r["topology"]: r for r in numbers.engines if not r["mtp"]}["TP2"]["requests_per_engine"] > \
        tp2["requests_per_engine"]
    extras = scenario_plan(drafted.resolved, drafted.source).data["state_extras"]
    assert extras is not None and extras["speculative_model"] == "eagle3-llama3-8b"
    assert extras["decode_context_parallel_size"] == 2


CALIBRATION = """\
pdtune_calibration: 1
model: qwen3-next-80b-a3b
gpu: h200
factors:
  compute: 0.5
  hbm: 0.7
  link: 0.3
fitted_on:
  rows: 12
"""


def test_a_calibration_file_gives_the_plan_its_factors(tmp_path: Path) -> None:
    folder = tmp_path / "params"
    folder.mkdir()
    (folder / "cal.yaml").write_text(CALIBRATION, encoding="utf-8")
    params = load_parameters(write_params(folder, plan=FAST_PLAN, calibration="cal.yaml"))
    factors = scenario_plan(params.resolved, params.source).data["factors"]
    assert all(f["source"] == f"calibration {folder / 'cal.yaml'}" for f in factors.values())
    assert factors["decode"]["factors"]["compute"] == pytest.approx(0.5)
    default = load_parameters(write_params(tmp_path / "d", plan=FAST_PLAN))
    assert scenario_plan(default.resolved, "d").data["factors"]["decode"]["factors"]["compute"] != 0.5
