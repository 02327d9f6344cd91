"""`pdtune plan` joined with the measured work: calibration files per pool, the per-GPU defaults, the TPOT p90
rule, the prefill knee, and the new user's 16-H200 story (issues 12 and 15)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pdtune.cli import main
from pdtune.gpus import load_gpu
from pdtune.paths import clusters_dir
from pdtune.perfmodel import DEFAULT_EFFICIENCY, Efficiency
from pdtune.perfmodel.calibrate import Calibration
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.plan import Plan, PlanSettings, Sla, ceil_to, plan, spans_nvlink_domain, tpot_p90_rule
from pdtune.topology import parse_topology

#: A small search (two layouts per role) keeps each plan to a second.
SMALL = dict(prefill_topologies=("TP2", "TP4"), decode_topologies=("TP2", "TEP4"))


def _settings(model: str = "qwen3-next-80b-a3b", gpu: str = "h200", n: int = 16, **kw: object) -> PlanSettings:
    return PlanSettings(model=model, gpu=gpu, max_gpus=n, isl=8192, osl=1024, **{**SMALL, **kw})  # type: ignore


def _write(tmp_path: Path, name: str, model: str, gpu: str, eff: Efficiency) -> str:
    path = tmp_path / name
    path.write_text(Calibration(model, gpu, eff).to_yaml(), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def default_plan() -> Plan:
    return plan(_settings())


# ------------------------------------------------------------------------------------------ calibration


def test_without_a_file_each_pool_uses_its_gpus_defaults(default_plan: Plan) -> None:
    """Like `pdtune predict`: data/perfmodel/defaults.csv's factors for H200, named in the plan."""
    h200 = gpu_defaults("h200")
    for role in ("prefill", "decode"):
        assert default_plan.factors[role].efficiency == h200.efficiency
        assert default_plan.factors[role].source == f"h200 defaults ({h200.source})"
    assert default_plan.to_dict()["factors"]["decode"]["factors"] == h200.efficiency.to_dict()


def test_a_calibration_moves_the_rows_the_way_its_factors_say(default_plan: Plan, tmp_path: Path) -> None:
    """Half the achieved compute and HBM bandwidth: every sweep is slower, so both frontier ends drop; more of
    both: both rise. Half the link factor: every KV transfer takes longer (bytes / (bandwidth x link))."""
    base = gpu_defaults("h200").efficiency
    slow = replace(base, compute=base.compute / 2, hbm=base.hbm / 2, expert_compute=base.experts / 2,
                   expert_hbm=base.experts_hbm / 2)
    fast = replace(base, compute=min(1.0, base.compute * 1.3), hbm=min(1.0, base.hbm * 1.2),
                   expert_compute=min(1.0, base.experts * 1.3), expert_hbm=min(1.0, base.experts_hbm * 1.2))
    ends = default_plan.ends()
    for eff, sign in ((slow, -1), (fast, 1)):
        p = plan(_settings(calibration=(_write(tmp_path, "cal.yaml", "qwen3-next-80b-a3b", "h200", eff),)))
        assert p.factors["decode"].efficiency == eff and p.factors["prefill"].source.startswith("calibration ")
        got = p.ends()
        for end, key in (("throughput", "tps_per_gpu"), ("latency", "tps_per_user")):
            assert np.sign(got[end][key] - ends[end][key]) == sign, (end, key, got[end][key], ends[end][key])
    half_link = replace(base, link=base.link / 2)
    p = plan(_settings(calibration=(_write(tmp_path, "link.yaml", "qwen3-next-80b-a3b", "h200", half_link),)))
    for key, t in p.transfers.items():
        before = default_plan.transfers[key]
        assert t["efficiency"] == pytest.approx(before["efficiency"] / 2)
        assert t["ms"] > before["ms"]


def test_a_mixed_pool_takes_one_file_per_gpu_and_the_transfer_the_lower_link(tmp_path: Path) -> None:
    b200, h200 = gpu_defaults("b200").efficiency, gpu_defaults("h200").efficiency
    files = (_write(tmp_path, "b.yaml", "qwen3-next-80b-a3b", "b200", replace(b200, link=0.8)),
             _write(tmp_path, "h.yaml", "qwen3-next-80b-a3b", "h200", replace(h200, link=0.3)))
    p = plan(_settings(gpu="b200", decode_gpu="h200", n=32, calibration=files))
    assert p.factors["prefill"].source == f"calibration {files[0]}"
    assert p.factors["decode"].source == f"calibration {files[1]}"
    assert {t["efficiency"] for t in p.transfers.values()} == {0.3}


def _bad(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err.split(": error: ", 1)[1]


PLAN = ["plan", "qwen3-next-80b-a3b", "--gpu", "h200", "--max-gpus", "16", "--isl", "8192", "--osl", "1024",
        "--prefill-topologies", "TP2", "--decode-topologies", "TP2"]
DATASET = ["dataset", "generate", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--prefill-topologies", "TP2",
           "--decode-topologies", "TP2", "--disagg", "1xTP2:1xTP2", "--concurrency", "1,8"]


def test_a_calibration_of_another_model_or_gpu_is_one_line_naming_file_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One reader (perfmodel.calibrate.load_calibration): `plan` and `dataset generate` print the same line."""
    other_model = _write(tmp_path, "m.yaml", "deepseek-v3", "h200", DEFAULT_EFFICIENCY)
    other_gpu = _write(tmp_path, "g.yaml", "qwen3-next-80b-a3b", "gb200", DEFAULT_EFFICIENCY)
    out = str(tmp_path / "ds")
    for path, field, text in ((other_model, "model", "calibrated for deepseek-v3, not qwen3-next-80b-a3b"),
                              (other_gpu, "gpu", "calibrated for gb200, not h200")):
        from_plan = _bad([*PLAN, "--calibration", path], capsys, f"{path}: {field}: {text}")
        from_dataset = _bad([*DATASET, "--calibration", path, "--out", out], capsys, f"{path}: {field}: {text}")
        assert from_plan == from_dataset
        assert not Path(out).exists()
    # A mixed pool names both kinds; two files for one kind are refused too.
    _bad(["plan", "qwen3-next-80b-a3b", "--gpu", "b200", "--decode-gpu", "h200", "--max-gpus", "32", "--isl",
          "8192", "--osl", "1024", "--calibration", other_gpu], capsys, f"{other_gpu}: gpu: calibrated for gb200, "
         "not b200 or h200")
    same = _write(tmp_path, "h.yaml", "qwen3-next-80b-a3b", "h200", DEFAULT_EFFICIENCY)
    _bad([*PLAN, "--calibration", same, same], capsys, f"{same}: gpu: a second calibration for h200")


def test_plan_dataset_and_predict_read_a_file_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model given as its config.json is the folder's model for every command, and the factors used are
    the file's, whoever reads it."""
    eff = replace(gpu_defaults("h200").efficiency, compute=0.5)
    cal = _write(tmp_path, "cal.yaml", "qwen3-next-80b-a3b", "h200", eff)
    config = str(Path(__file__).resolve().parents[1] / "data" / "models" / "qwen3-next-80b-a3b" / "config.json")
    assert main([*PLAN[:1], config, *PLAN[2:], "--calibration", cal, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["factors"]["decode"]["factors"]
    out = tmp_path / "ds"
    assert main([DATASET[0], DATASET[1], "--model", config, *DATASET[4:], "--calibration", cal, "--out",
                 str(out)]) == 0
    capsys.readouterr()
    written = json.loads((out / "pdtune-dataset.json").read_text(encoding="utf-8"))["efficiency"]
    assert main(["predict", config, "--gpu", "h200", "--topology", "TP2", "--mode", "decode", "--calibration", cal,
                 "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["efficiency"]
    assert planned == written == predicted == eff.to_dict()


# ------------------------------------------------------------------------------------------ TPOT p90


def test_the_p90_factor_is_the_measured_p99_over_median_of_inferencex() -> None:
    """By hand from the bundled CSV: its (ms)-headed columns hold seconds; the ratio per point, then the median
    of the nine (1.18; every ratio lies between 1.09 and 1.35)."""
    csv = clusters_dir() / "inferencex-gb200-dsr1" / "InferenceX_DeepSeek-R1-0528_interactivity_gb200.csv"
    df = pd.read_csv(csv, comment="#")
    ratios = (df["P99 TPOT (ms)"] / df["Median TPOT (ms)"]).to_numpy()
    assert len(ratios) == 9 and 1.09 < ratios.min() and ratios.max() < 1.35
    rule = tpot_p90_rule()
    assert rule.factor == pytest.approx(float(np.median(ratios))) and rule.points == 9
    assert rule.factor == pytest.approx(1.18, abs=0.005)
    assert "median p99/median TPOT of 9 measured InferenceX" in rule.basis
    assert tpot_p90_rule(1.5).factor == 1.5


def test_a_tpot_p90_limit_is_checked_against_the_stated_bound_not_the_median(
        default_plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:
    rows = default_plan.rows
    factor = default_plan.tpot_p90.factor
    assert (rows["tpot_ms_p99"] == rows["tpot_ms_p90"]).all()  # a p99 bound: p99 >= p90 >= p50
    assert (rows["tpot_ms_p90"] == rows["tpot_ms_p50"] * factor).all()
    assert rows["tpot_p90_basis"].eq(f"modeled TPOT x {factor:.2f}").all()
    # A limit that some rows meet only at the median: they must not be picked.
    limit = float(np.quantile(rows["tpot_ms_p50"], 0.3))
    between = rows[(rows["tpot_ms_p50"] <= limit) & (rows["tpot_ms_p90"] > limit)]
    assert len(between)
    p = plan(_settings(), [Sla(max_tpot_ms_p90=limit)], require_sla=True)
    row = p.row(p.picks[0].row)
    assert row["tpot_ms_p50"] * factor <= limit
    ok = p.rows[p.rows["tpot_ms_p90"] <= limit]
    assert row["tps_per_gpu"] == pytest.approx(ok["tps_per_gpu"].max())
    argv = ["plan", "qwen3-next-80b-a3b", "--gpu", "h200", "--max-gpus", "16", "--isl", "8192", "--osl", "1024",
            "--prefill-topologies", "TP2,TP4", "--decode-topologies", "TP2,TEP4", "--max-tpot-ms-p90", f"{limit}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"TPOT p90 (for the p90 limit): modeled TPOT x {factor:.2f}: the median p99/median TPOT" in out
    assert f"TPOT p90 {ceil_to(row['tpot_ms_p90'], 1):.1f} ms (modeled TPOT x {factor:.2f})" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tpot_p90"]["factor"] == factor and data["rows"][0]["tpot_p90_basis"]
    assert main([*argv[:-2], "--max-tpot-ms-p90", "1"]) == 2
    assert "p90" in capsys.readouterr().err  # the closest row's p90 and its basis are named


def test_a_measured_decode_sweep_brings_its_own_p99(tmp_path: Path) -> None:
    """A decode-only sweep (test fixture written here: the committed modeled TP4DP4+EP sweep with its "modeled"
    marks removed, a p99 TPOT 1.3 x its median, and its workload restated as ISL 1 / OSL 17,408, the decode
    sweep whose mean context is the plan's) is measured: its rows' p90 is that p99."""
    src = clusters_dir() / "gb300-qwen3.8-modeled" / "decode" / "outputs" / "2009"
    dst = tmp_path / "decode" / "outputs" / "2009"
    for f in src.rglob("*.json"):
        record = json.loads(f.read_text(encoding="utf-8"))
        record.pop("modeled", None)
        record.pop("modeled_note", None)
        if "median_tpot_ms" in record:
            record["p99_tpot_ms"] = 1.3 * record["median_tpot_ms"]
        for key, value in (("isl", 1), ("osl", 17408)):
            if key in record or key == "osl":
                record[key] = value
        if isinstance(record.get("benchmark"), dict):
            record["benchmark"] = {**record["benchmark"], "isl": 1, "osl": 17408}
        target = dst / str(f.relative_to(src)).replace("osl_1000", "osl_17408")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record), encoding="utf-8")
    p = plan(PlanSettings(model="qwen3.8-2.4t", gpu="gb300", max_gpus=72, isl=8192, osl=1024,
                          prefill_topologies=("TP2DP4+EP",)), decode_results=[str(tmp_path / "decode")])
    rows = p.rows[p.rows["mode"] == "disagg"]
    assert rows["decode_source"].str.startswith("measured").all()
    assert (rows["tpot_ms_p90"] == rows["tpot_ms_p99"]).all()
    assert rows["tpot_ms_p90"].to_numpy() == pytest.approx(1.3 * rows["tpot_ms_p50"].to_numpy())
    assert rows["tpot_p90_basis"].str.startswith("measured p99").all()


# ------------------------------------------------------------------------------------------ the search


def test_prefill_points_past_the_knee_never_reach_the_frontier(default_plan: Plan) -> None:
    """With a fixed front-end cost in TTFT, C / TTFT keeps creeping up past saturation; the engine's own
    throughput does not. No frontier row may sit on a prefill queue (TTFT many times the unloaded one)."""
    front = default_plan.frontier
    front = front[front["mode"] == "disagg"]
    assert (front["ttft_ms_p50"] < 10 * front["ttft_ms_p50"].min()).all(), front["ttft_ms_p50"].max()


def test_the_new_users_16_h200_plan_says_where_groups_leave_a_node(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 12's new user: Qwen3-235B-A22B on two 8-GPU HGX H200 nodes, >= 30 tokens/s per user. The pick is
    no TP/EP group over both nodes unless the row says so; the KV transfer between nodes is charged over the
    NIC; the factors are H200's own."""
    argv = ["plan", "qwen3-235b-a22b", "--gpu", "h200", "--max-gpus", "16", "--isl", "8192", "--osl", "1024",
            "--min-tps-per-user", "30", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    h200 = load_gpu("h200")
    pick = data["rows"][data["picks"][0]["row"]]
    assert data["picks"][0]["met"] and pick["tps_per_user"] >= 30
    for r in (r for r in data["rows"] if r["mode"] == "disagg"):
        spans = any(spans_nvlink_domain(h200, parse_topology(r[k])) for k in ("prefill_topology", "decode_topology"))
        assert r["network_charged"] == spans and (not spans or r["network_groups"])
        assert r["kv_link"] == ("nvlink" if r["gpus_total"] <= 8 else "scale_out")
    assert data["factors"]["decode"]["source"].startswith("h200 defaults")
