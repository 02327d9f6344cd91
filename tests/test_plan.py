"""`pdtune plan`: the search for a GPU budget and an SLA, KV transfer in TTFT, mixed pools, the network charge."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune import article
from pdtune.cli import main
from pdtune.gpus import load_gpu
from pdtune.frontier import frontier_matches_brute_force
from pdtune.model import load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel import predict_decode
from pdtune.plan import (
    DEFAULT_FLOORS,
    Plan,
    PlanSettings,
    Sla,
    candidate_topologies,
    ceil_to,
    picks_sentence,
    plan,
    spans_nvlink_domain,
)
from pdtune.plan.pools import _undominated
from pdtune.topology import parse_topology

#: What every plan row must carry (issue 12, "Must show").
REQUIRED = ("gpus_total", "tps_per_gpu", "tps_per_user", "ttft_ms_p50", "kv_transfer_ms")
INTEGER_COLUMNS = ("gpus_total", "gpus_prefill", "gpus_decode", "n_prefill_workers", "n_decode_workers",
                   "concurrency", "prefill_concurrency", "decode_concurrency", "replicas_in_budget")
#: What an aggregated row carries as whole numbers instead of the workers of the two pools.
AGG_INTEGER_COLUMNS = ("gpus_total", "concurrency", "agg_replicas", "server_concurrency", "replicas_in_budget")


def _settings(model: str, gpu: str, n: int, **kw: object) -> PlanSettings:
    return PlanSettings(model=model, gpu=gpu, max_gpus=n, isl=8192, osl=1024, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def dsv3() -> Plan:
    return plan(_settings("deepseek-v3", "gb200", 72), [Sla(min_tps_per_user=20)], require_sla=True)


@pytest.fixture(scope="module")
def article_plan() -> Plan:
    return plan(_settings("qwen3.8-2.4t", "gb300", 72))


@pytest.fixture(scope="module")
def mixed() -> Plan:
    return plan(_settings("qwen3-next-80b-a3b", "b200", 32, decode_gpu="h200"))


def _check_rows(p: Plan) -> None:
    table = p.table
    assert len(table) and (table["gpus_total"] <= p.settings.max_gpus).all()
    assert (p.rows["gpus_total"] <= p.settings.max_gpus).all()
    assert set(table["mode"]) == {"agg", "disagg"}
    for row in p.to_dict()["rows"]:
        for key in REQUIRED:
            assert row[key] is not None and row[key] >= 0, key
        # Issue 20: every reported row says where its latencies come from, and its tails are ordered.
        assert row["latency_model"] == "steady-state"
        assert row["ttft_ms_p99"] >= row["ttft_ms_p90"] >= row["ttft_ms_p50"] > 0
        assert row["tpot_ms_p99"] >= row["tpot_ms_p90"] >= row["tpot_ms_p50"] > 0
        assert row["tps_per_user"] == pytest.approx(1000 / row["tpot_ms_p50"])
        if row["mode"] == "agg":
            # k replicas of one server fill the budget; no KV crosses between engines.
            topo = parse_topology(row["topology"])
            assert row["agg_replicas"] == p.settings.max_gpus // topo.gpus
            assert row["gpus_total"] == row["agg_replicas"] * topo.gpus
            # a mixed plan's servers say which GPU kind they run on (servers of both kinds are in it)
            on = f" on {row['prefill_gpu']}" if p.settings.mixed else ""
            assert row["deployment"] == f"{row['agg_replicas']}x{topo.canonical}{on}"
            assert row["concurrency"] == row["agg_replicas"] * row["server_concurrency"]
            assert row["kv_transfer_ms"] == 0 and row["n_prefill_workers"] is None and row["gpus_prefill"] is None
            for key in AGG_INTEGER_COLUMNS:
                assert isinstance(row[key], int), (key, row[key])
            continue
        assert row["kv_transfer_ms"] > 0
        for key in INTEGER_COLUMNS:
            assert isinstance(row[key], int), (key, row[key])
        assert row["gpus_total"] == row["gpus_prefill"] + row["gpus_decode"]
        # TTFT = the prefill engine's TTFT + the KV transfer; the share is of the whole.
        assert row["ttft_ms_p50"] == pytest.approx(row["prefill_ttft_ms"] + row["kv_transfer_ms"])
        assert row["kv_transfer_share"] == pytest.approx(row["kv_transfer_ms"] / row["ttft_ms_p50"])


def test_deepseek_v3_on_72_gb200_every_row_has_the_columns(dsv3: Plan) -> None:
    _check_rows(dsv3)
    (pick,) = dsv3.picks
    assert pick.met and pick.sla.min_tps_per_user == 20
    row = dsv3.row(pick.row)
    assert row["tps_per_user"] >= 20 and row["on_frontier"]
    # The pick is the best row meeting the floor: no feasible row with >= 20 tokens/s per user does better.
    ok = dsv3.rows[dsv3.rows["tps_per_user"] >= 20]
    assert row["tps_per_gpu"] == pytest.approx(ok["tps_per_gpu"].max())
    assert dsv3.modeled and dsv3.counts["frontier_rows_network_charged"] == 0  # 72 GPUs: one NVL72 domain
    assert set(dsv3.table["kv_link"]) == {"nvlink", "none"}  # "none": the aggregated rows


def test_the_frontier_is_the_undominated_set_of_the_feasible_rows(dsv3: Plan) -> None:
    front = dsv3.frontier
    assert frontier_matches_brute_force(front)
    x, y = dsv3.rows["tps_per_user"].to_numpy(), dsv3.rows["tps_per_gpu"].to_numpy()
    for fx, fy in zip(front["tps_per_user"], front["tps_per_gpu"], strict=True):
        assert not ((x >= fx) & (y >= fy) & ((x > fx) | (y > fy))).any()


def test_plan_cli_json_is_what_recipe_reads(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "deepseek-v3", "--gpu", "gb200", "--max-gpus", "72", "--isl", "8192", "--osl", "1024",
                 "--min-tps-per-user", "20", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["generator"] == "pdtune plan" and data["modeled"] is True
    assert data["picks"][0]["met"] and data["rows"]
    assert data["pdtune_plan"] == 1 and data["latency_model"] == "steady-state"
    for row in data["rows"]:
        assert all(row[k] is not None for k in REQUIRED)
        assert all(isinstance(row[k], int) for k in (INTEGER_COLUMNS if row["mode"] == "disagg" else
                                                       AGG_INTEGER_COLUMNS))
        assert row["curve_concurrencies"] == sorted(row["curve_concurrencies"])
        assert row["concurrency"] in row["curve_concurrencies"]


def test_the_articles_model_frontier_ends_beside_5000_and_180(article_plan: Plan,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The article's headline numbers come from data/article/constants.csv; the plan prints its ends beside
    them. The plan searches far more layouts than the article's seven configurations (decode engines of up to
    64 GPUs), so its latency end can pass 180; within the article's own layouts it lands on it."""
    _check_rows(article_plan)
    c = article.constants()
    ends = article_plan.ends()
    top, fast = ends["throughput"]["tps_per_gpu"], ends["latency"]["tps_per_user"]
    print(f"plan ends: {top:,.0f} tokens/s per GPU, {fast:.1f} tokens/s per user; article "
          f"{c['headline_tps_per_gpu']:,.0f} and {c['headline_tps_per_user']:.0f}")
    assert 0.5 < top / c["headline_tps_per_gpu"] < 2 and 0.5 < fast / c["headline_tps_per_user"] < 2
    fifty = next(p for p in article_plan.picks if p.sla.min_tps_per_user == 50)
    assert fifty.met and article_plan.row(fifty.row)["tps_per_user"] >= 50
    assert [p.sla.min_tps_per_user for p in article_plan.picks] == list(DEFAULT_FLOORS)
    own = plan(_settings("qwen3.8-2.4t", "gb300", 72, prefill_topologies=("TEP8", "TP4DP2+EP", "TP2DP4+EP"),
                         decode_topologies=("TEP8", "TP4DP4+EP")))
    own_fast = own.ends()["latency"]["tps_per_user"]
    assert abs(own_fast / c["headline_tps_per_user"] - 1) < 0.1, own_fast
    assert main(["plan", "qwen3.8-2.4t", "--gpu", "gb300", "--max-gpus", "72", "--isl", "8192", "--osl",
                 "1024"]) == 0
    out = capsys.readouterr().out
    assert "MODELED" in out and ">= 50 tokens/s per user: row" in out
    assert f"{c['headline_tps_per_gpu']:,.0f} tokens/s per GPU and {c['headline_tps_per_user']:,.0f}" in out


def test_hybrid_rows_with_different_tp_set_one_block_size(article_plan: Plan) -> None:
    rows = article_plan.rows
    mismatch = rows["prefill_block_tokens"] != rows["decode_block_tokens"]
    assert mismatch.any()
    fixed = rows.loc[mismatch, "block_size_to_set"].astype(int)
    expected = np.maximum(rows.loc[mismatch, "prefill_block_tokens"], rows.loc[mismatch, "decode_block_tokens"])
    assert (fixed.to_numpy() == expected.to_numpy()).all()
    assert rows.loc[~mismatch, "block_size_to_set"].isna().all()


def test_mixed_pool_b200_prefill_h200_decode(mixed: Plan) -> None:
    _check_rows(mixed)
    t = mixed.table[mixed.table["mode"] == "disagg"]
    assert set(t["prefill_gpu"]) == {"b200"} and set(t["decode_gpu"]) == {"h200"}
    disagg = mixed.rows[mixed.rows["mode"] == "disagg"]
    assert set(disagg["kv_link"]) == {"scale_out"}  # GPU kinds never share NVLink
    # The aggregated baseline runs on either kind, the whole budget of it.
    assert set(mixed.rows.loc[mixed.rows["mode"] == "agg", "prefill_gpu"]) == {"b200", "h200"}
    assert {c.gpu for c in mixed.candidates if c.role == "prefill"} == {"b200"}
    assert {c.gpu for c in mixed.candidates if c.role == "decode"} == {"h200"}
    # 50 GB/s ConnectX-7 on both ends: every transfer is at least the bytes over 50 GB/s.
    for key, tr in mixed.transfers.items():
        assert tr["link"]["bandwidth_gb_s"] == 50, key


def test_groups_over_an_nvlink_domain_are_charged_and_flagged(mixed: Plan) -> None:
    """On H200 (8 GPUs per NVLink domain) a 16-GPU decode group is a candidate whose collectives the model
    charges at the NIC's 50 GB/s; every row built on it says so, and no row with a group over 8 GPUs goes
    unflagged."""
    h200, b200 = load_gpu("h200"), load_gpu("b200")
    for row in mixed.rows[mixed.rows["mode"] == "disagg"].itertuples():
        spans = spans_nvlink_domain(b200, parse_topology(row.prefill_topology)) or spans_nvlink_domain(
            h200, parse_topology(row.decode_topology))
        assert row.network_charged == spans
        if row.network_charged:
            assert "16-GPU group over 2 NVLink domains" in row.network_groups
    assert mixed.counts["rows_network_charged"] > 0
    # The charge is real: the same TEP16 decode on an H200 whose NVLink domain held 16 GPUs would be faster.
    spec = load_model("qwen3-next-80b-a3b")
    tep16 = parse_topology("TEP16")
    charged = predict_decode(spec, h200, tep16, [64], isl=8192, osl=1024)[0]
    uncharged = predict_decode(spec, replace(h200, nvlink_domain=16), tep16, [64], isl=8192, osl=1024)[0]
    assert charged.tpot_ms > uncharged.tpot_ms


def test_16_h200_never_spans_a_domain_uncharged_and_says_which_rows_do() -> None:
    p = plan(_settings("qwen3-next-80b-a3b", "h200", 16))
    _check_rows(p)
    h200 = load_gpu("h200")
    for row in p.rows[p.rows["mode"] == "disagg"].itertuples():
        spans = spans_nvlink_domain(h200, parse_topology(row.prefill_topology)) or spans_nvlink_domain(
            h200, parse_topology(row.decode_topology))
        assert row.network_charged == spans
        # Two HGX nodes: a deployment over 8 GPUs moves its KV cache over the NIC.
        assert row.kv_link == ("nvlink" if row.gpus_total <= 8 else "scale_out")
    # p.rows is the staircase; the count is over every row (tests/test_plan_staircase.py checks it exactly)
    assert p.counts["rows_network_charged"] >= int(p.rows["network_charged"].sum())
    wide = plan(_settings("deepseek-v3", "h200", 24))  # 3 nodes: TP8 prefill + TEP16 decode fits
    flagged = wide.rows[wide.rows["network_charged"]]
    assert len(flagged) and flagged["network_groups"].str.contains("NVLink domains").all()


def test_measured_sweeps_replace_the_model_and_keep_their_label(capsys: pytest.CaptureFixture[str]) -> None:
    """The committed modeled dataset read back as isolated sweeps: its files say "modeled": true, so the rows
    stay modeled, with the files named as their source. Its decode sweeps ran at ISL/OSL 1/1024 (the article's
    decode isolation, OSL 1000): their requests hold 501 tokens of context on average, the plan's 8,704, so they are
    refused, one line naming the file and the ISL to measure at."""
    root = clusters_dir() / "gb300-qwen3.8-modeled"
    p = plan(_settings("qwen3.8-2.4t", "gb300", 72), prefill_results=[str(root / "prefill")])
    _check_rows(p)
    disagg = p.table[p.table["mode"] == "disagg"]
    assert disagg["prefill_source"].str.startswith("modeled: ").all()
    assert disagg["prefill_source"].str.contains("gb300-qwen3.8-modeled").all()
    assert {c.topology for c in p.candidates if c.role == "prefill"} <= {
        parse_topology(t).canonical for t in ("TP4DP2+EP", "TP2DP4+EP", "TP4DP4+EP", "TP2DP8+EP", "DP16+EP",
                                              "TP1PP6+EP", "TP1PP8+EP", "TP8+EP", "TP16+EP")}
    argv = ["plan", "qwen3.8-2.4t", "--gpu", "gb300", "--max-gpus", "72", "--isl", "8192", "--osl", "1024",
            "--decode-results", str(root / "decode")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gb300-qwen3.8-modeled/decode" in err and ": isl:" in err
    assert "501 tokens of context on average (ISL/OSL 1/1000), the plan's 8,704" in err
    assert "measure decode at ISL 1, OSL 17408" in err


def test_decode_context_changes_tpot_as_the_issue_says() -> None:
    """Why the context check: the same DeepSeek-V3 decode layout at the same load, by pdtune's model, decodes far
    slower at ISL 8192 than at ISL 1 (issue 20 quotes 19.5 ms against 38.2 ms), and a sweep at ISL 1 with
    OSL 2 x 8192 + 1024 holds the plan's mean context, so its TPOT is the plan's within a few percent."""
    from pdtune.plan.pools import decode_context, matching_decode_osl

    spec, gpu, topo = load_model("deepseek-v3"), load_gpu("gb200"), parse_topology("TP8")
    # 128 requests: within the engine's KV room at 8192 + 1024 (beyond it the model charges preemption).
    short = predict_decode(spec, gpu, topo, [128], isl=1, osl=1024)[0].tpot_ms
    planned = predict_decode(spec, gpu, topo, [128], isl=8192, osl=1024)[0].tpot_ms
    matched = predict_decode(spec, gpu, topo, [128], isl=1, osl=matching_decode_osl(8192, 1024))[0].tpot_ms
    print(f"TP8 decode TPOT at 128 requests: ISL 1 {short:.1f} ms, ISL 8192 {planned:.1f} ms, "
          f"ISL 1 OSL 17408 {matched:.1f} ms")
    assert planned > 1.3 * short
    assert matched == pytest.approx(planned, rel=0.05)
    assert decode_context(1, 17408) == pytest.approx(decode_context(8192, 1024), abs=1)


def test_a_ttft_limit_is_met_by_the_pick() -> None:
    p = plan(_settings("qwen3-next-80b-a3b", "h200", 16), [Sla(min_tps_per_user=50, max_ttft_ms=200)])
    (pick,) = p.picks
    assert pick.met
    row = p.row(pick.row)
    assert row["ttft_ms_p50"] <= 200 and row["tps_per_user"] >= 50


def test_candidate_layouts() -> None:
    dense = [t.canonical for t in candidate_topologies(load_model("llama-3.1-70b"), 8)]
    assert dense == ["TP1", "TP2", "TP4", "TP8"]
    moe = {t.canonical for t in candidate_topologies(load_model("deepseek-v3"), 4)}
    assert moe == {"TP1", "DP2+EP", "TP2", "TEP2", "DP4+EP", "TP2DP2+EP", "TP4", "TEP4"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=30))
def test_pruned_points_are_exactly_the_beaten_ones(points: list[tuple[int, int]]) -> None:
    """A point is dropped iff another point has at least its capacity and at most its latency and is not the
    same point (of several identical points one stays)."""
    cap = np.array([float(c) for c, _ in points])
    lat = np.array([float(t) for _, t in points])
    keep = _undominated(cap, lat)
    for i in range(len(points)):
        beaten = ((cap >= cap[i]) & (lat <= lat[i]) & ((cap > cap[i]) | (lat < lat[i]))).any()
        if beaten:
            assert not keep[i]
    kept = {(cap[i], lat[i]) for i in np.flatnonzero(keep)}
    undominated = {(cap[i], lat[i]) for i in range(len(points))
                   if not ((cap >= cap[i]) & (lat <= lat[i]) & ((cap > cap[i]) | (lat < lat[i]))).any()}
    assert kept == undominated and keep.sum() == len(kept)


# ------------------------------------------------------------------------------------------ bad input

BASE = ["plan", "deepseek-v3", "--gpu", "gb200", "--isl", "8192", "--osl", "1024"]


def _bad(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_a_budget_below_the_smallest_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    # DeepSeek-V3's FP8 weights (about 671 GB) need 8 GB200s per engine, so a pair needs 16; below that only
    # aggregated serving is left, and with it turned off (or below one 8-GPU server) the budget is refused.
    _bad([*BASE, "--max-gpus", "8", "--no-aggregated"], capsys,
         "8 GPUs are fewer than the smallest disaggregated deployment", "16 GPUs")
    _bad([*BASE, "--max-gpus", "4"], capsys, "4 GPUs are fewer than the smallest disaggregated deployment",
         "no aggregated server fits 4 GPUs either")


def test_a_budget_only_one_aggregated_server_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """8 GB200s hold one DeepSeek-V3 server but no prefill/decode pair: the plan is aggregated serving only, and
    says why no disaggregated row exists (it refused the budget outright before)."""
    assert main([*BASE, "--max-gpus", "8", "--min-tps-per-user", "20", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {r["mode"] for r in plan["rows"]} == {"agg"} and all(r["gpus_total"] == 8 for r in plan["rows"])
    assert plan["picks"][0]["met"] and plan["comparisons"][0]["disagg_row"] is None
    assert plan["comparisons"][0]["sentence"].endswith("no disaggregated deployment fits 8 GPUs.")
    assert "smallest disaggregated deployment" in plan["no_disagg"]


def test_one_gpu_is_a_budget_for_a_server(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Llama-3.1-8B on one H100: one TP1 server, the only deployment there is. Every sentence of the report and the
    recipes counts one GPU in the singular."""
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100", "--max-gpus", "1", "--isl", "1024", "--osl", "1024",
                 "--recipes", str(tmp_path / "rec")]) == 0
    text = capsys.readouterr().out
    assert "at most 1 GPU," in text and "(aggregated, 1 GPU)" in text
    assert "no disaggregated deployment fits 1 GPU." in text
    written = "".join(f.read_text(encoding="utf-8") for f in (tmp_path / "rec").iterdir())
    assert written and "at most 1 GPU)" in written
    assert not re.search(r"\b1 GPUs\b", text + written)


def test_a_plan_of_aggregated_servers_only_runs_through_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-32B in BF16 on 2 H100s: one TP2 server, no pair (TP1 does not hold the weights and a request); the
    simulated evaluator reports every row of a plan with no disaggregated row."""
    assert main(["plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "2", "--isl", "1024", "--osl", "128",
                 "--min-tps-per-user", "20", "--latency-model", "simulated", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["no_disagg"] and {r["mode"] for r in plan["rows"]} == {"agg"}
    assert {r["latency_model"] for r in plan["rows"]} == {"simulated (pdtune.sim)"} and plan["picks"][0]["met"]


def test_an_unknown_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    _bad(["plan", "deepseek-v3", "--gpu", "mi300x", "--max-gpus", "72", "--isl", "8192", "--osl", "1024"],
         capsys, "unknown GPU 'mi300x'")
    _bad([*BASE, "--decode-gpu", "a100", "--max-gpus", "72"], capsys, "unknown GPU 'a100'")


def test_an_sla_nothing_meets_names_the_closest_and_writes_nothing(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "recipes"
    _bad([*BASE, "--max-gpus", "72", "--min-tps-per-user", "1000", "--recipes", str(out)], capsys,
         "no deployment within the budget meets it", "the closest is", "tokens/s per user")
    assert not out.exists()
    _bad([*BASE, "--max-gpus", "72", "--max-ttft-ms", "1"], capsys, "TTFT <= 1 ms", "the closest is")


def test_other_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _bad([*BASE, "--max-gpus", "1", "--no-aggregated"], capsys, "at least 2 GPUs")
    # with aggregated servers one GPU is a budget; DeepSeek-V3 fits no server on one GB200, and the line says so
    _bad([*BASE, "--max-gpus", "1"], capsys, "1 GPU is fewer than the smallest disaggregated deployment",
         "no aggregated server fits 1 GPU either")
    _bad([*BASE, "--max-gpus", "72", "--calibration", str(tmp_path / "cal.yaml")], capsys, "cal.yaml: file",
         "no such file")
    _bad([*BASE, "--max-gpus", "72", "--prefill-topologies", "TP3X"], capsys, "topology")
    article_plan = ["plan", "qwen3.8-2.4t", "--gpu", "gb300", "--max-gpus", "72", "--isl", "8192", "--osl", "1024"]
    decode = clusters_dir() / "gb300-qwen3.8-modeled" / "decode"
    _bad([*article_plan, "--prefill-results", str(decode)], capsys, "--prefill-results holds decode results")
    params = tmp_path / "short.yaml"
    params.write_text("model: qwen3.8-2.4t\ngpu: gb300\nconcurrencies: [1, 8]\nprefill_topologies: [TEP8]\n"
                      "decode_topologies: [TEP8]\ndisagg_configs: [1xTEP8:1xTEP8]\n"
                      "prefill_workload: {isl: 4096, osl: 2}\n", encoding="utf-8")
    assert main(["dataset", "generate", "--params", str(params), "--out", str(tmp_path / "ds")]) == 0
    capsys.readouterr()
    _bad([*article_plan, "--prefill-results", str(tmp_path / "ds" / "prefill")], capsys,
         "the prefill sweep ran ISL 4096, the plan is for ISL 8192")


def test_summaries_for_the_chapter(dsv3: Plan) -> None:
    summary = dsv3.search_summary()
    assert list(summary["role"]) == ["prefill", "decode", "aggregated"]
    assert summary["candidates"].sum() == len(dsv3.candidates) + dsv3.counts["aggregated_candidates"]
    assert summary["rejected"].sum() == len(dsv3.rejected) and summary["pruned"].sum() == len(dsv3.pruned)
    transfers = dsv3.transfer_frame()
    assert len(transfers) and (transfers["share_of_ttft_max"] < 1).all()
    assert (transfers["kv_transfer_ms"] > 0).all()


def test_every_reported_row_and_sla_check_goes_through_the_evaluation_step() -> None:
    """The structure a scheduler simulation plugs into (pdtune.plan.evaluate): an evaluator that triples every TTFT
    and takes 5 rows a call changes what the table reports and which row meets a TTFT limit; the steady-state
    ranking only orders the candidates it is asked about."""
    from pdtune.plan import Evaluator, evaluate_rows

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128)
    base = plan(s, [Sla(min_tps_per_user=30)])
    pick = base.row(base.picks[0].row)
    limit = 2 * pick["ttft_ms_p50"]  # the steady-state pick meets it; tripled, it does not
    calls: list[int] = []

    def slower(rows: object) -> object:
        calls.append(len(rows))  # type: ignore[arg-type]
        out = evaluate_rows(rows, base.tpot_p90)  # type: ignore[arg-type]
        return out.assign(ttft_ms_p50=3 * out["ttft_ms_p50"], ttft_ms_p90=3 * out["ttft_ms_p90"],
                          ttft_ms_p99=3 * out["ttft_ms_p99"], latency_model="tripled TTFT")

    p = plan(s, [Sla(min_tps_per_user=30, max_ttft_ms=limit)], evaluator=Evaluator("tripled TTFT", slower, batch=5))
    assert p.latency_model == "tripled TTFT" and set(p.table["latency_model"]) == {"tripled TTFT"}
    got = p.row(p.picks[0].row)
    assert got["ttft_ms_p50"] <= limit
    assert (got["deployment"], got["concurrency"]) != (pick["deployment"], pick["concurrency"])
    same = p.rows[(p.rows["deployment"] == got["deployment"]) & (p.rows["concurrency"] == got["concurrency"])]
    assert got["ttft_ms_p50"] == pytest.approx(3 * float(same["ttft_ms_p50"].iloc[0]))  # the evaluator's numbers
    assert max(calls[:-1]) <= 5 and len(calls) > 2  # candidates came a batch at a time


def test_an_evaluator_with_a_limit_stops_the_search_and_says_so() -> None:
    """Evaluator.limit (the simulation's SIM_CANDIDATES): an evaluator that puts every TTFT far above the ceiling
    is asked about at most ``limit`` candidates per SLA; the pick is the best of those, flagged above the ceiling,
    and its warning says how many were searched of how many meet the SLA."""
    from pdtune.plan import Evaluator, evaluate_rows
    from pdtune.plan.inputs import tpot_p90_rule

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128)
    asked: list[int] = []

    def queued(rows: object) -> object:
        asked.append(len(rows))  # type: ignore[arg-type]
        out = evaluate_rows(rows, tpot_p90_rule(1.0))  # type: ignore[arg-type]
        return out.assign(ttft_ms_p50=1e6, ttft_ms_p90=1e6, ttft_ms_p99=1e6, latency_model="queued")

    p = plan(s, [Sla(min_tps_per_user=30)], evaluator=Evaluator("queued", queued, batch=2, limit=5))
    pick = p.picks[0]
    assert pick.met and pick.above_ceiling and pick.searched == 5 and pick.candidates > 5
    assert sum(asked[:-1]) <= 5  # the search's calls (the last one evaluates the reported frontier)
    assert pick.to_dict()["search_cut_after"] == 5
    (line,) = p.warnings()
    assert f"none of the 5 best candidates evaluated (queued, which evaluates at most 5 of the {pick.candidates:,} " \
        "rows meeting the SLA) is below it" in line
    unlimited = plan(s, [Sla(min_tps_per_user=30)], evaluator=Evaluator("queued", queued, batch=2))
    assert unlimited.picks[0].searched is None and "no row meeting the SLA is below it" in unlimited.warnings()[0]


def test_the_simulation_evaluates_every_reported_row_and_sla_check() -> None:
    """--latency-model simulated (pdtune.sim, issue 23): a small plan's reported rows are simulated runs of their
    benchmark, with queueing tails the steady-state model has not (its TTFT p90 equals the median); the pick
    meets its SLA on the simulated numbers."""
    from io import StringIO

    from pdtune.plan.evaluate import SimProgress

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128,
                     prefill_topologies=("TP2",), decode_topologies=("TP2", "TP4"), latency_model="simulated")
    status = StringIO()
    progress = SimProgress(status)  # the CLI's status line on a terminal
    p = plan(s, [Sla(min_tps_per_user=30)], progress=progress)
    progress.close()
    t = p.table
    # every reported row was simulated once, and the line counted each simulated row, then cleared itself
    assert progress.rows >= len(t) and f"simulated {progress.rows} rows in " in status.getvalue()
    assert status.getvalue().endswith("\r\x1b[K")
    assert p.latency_model == "simulated (pdtune.sim)" and set(t["latency_model"]) == {p.latency_model}
    assert (t["ttft_ms_p99"] >= t["ttft_ms_p90"]).all() and (t["ttft_ms_p90"] >= t["ttft_ms_p50"]).all()
    assert (t["tpot_ms_p99"] >= t["tpot_ms_p90"]).all() and (t["tpot_ms_p90"] >= t["tpot_ms_p50"]).all()
    assert (t["ttft_ms_p90"] > 1.2 * t["ttft_ms_p50"]).any()  # queueing the steady-state model cannot show
    pick = p.row(p.picks[0].row)
    assert pick["tps_per_user"] >= 30 and pick["tps_per_user"] == pytest.approx(1000 / pick["tpot_ms_p50"])
    assert p.to_dict()["latency_note"].startswith("pdtune.sim")
    # the pick's sentence gives the simulated TTFT tail beside the median the ceiling is checked on
    assert f"TTFT p90 {ceil_to(pick['ttft_ms_p90']):,.0f} ms" in picks_sentence(p, p.picks[0])
    steady = plan(replace(s, latency_model="steady-state"), [Sla(min_tps_per_user=30)])
    assert "TTFT p90" not in picks_sentence(steady, steady.picks[0])  # its p90 is its median: nothing to add


def test_simulated_rows_run_the_engines_the_recipes_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated evaluator runs each row as its recipe launches it: pdtune.recipe's EngineRecipe.vllm_config
    passes --no-enable-prefix-caching to every engine, so every simulation runs with prefix caching off (vLLM's
    default, on, would hash every full block the recipe never hashes)."""
    import pdtune.sim as sim
    from pdtune.recipe import row_engines

    seen: list[bool | None] = []
    for name in ("simulate", "simulate_disagg"):
        real = getattr(sim, name)

        def spy(*a: object, _real=real, **kw: object) -> object:  # type: ignore[no-untyped-def]
            seen.append(kw["config"].enable_prefix_caching)  # type: ignore[union-attr]
            return _real(*a, **kw)

        monkeypatch.setattr(sim, name, spy)
    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128, grid=(8, 16),
                     prefill_topologies=("TP2",), decode_topologies=("TP2",), latency_model="simulated")
    p = plan(s, [Sla(min_tps_per_user=30)]).to_dict()
    assert seen and set(seen) == {False}
    engines = [e for row in p["rows"] for e in row_engines(p, row)]
    assert engines and all(e.vllm_config()["no-enable-prefix-caching"] is True for e in engines)


def test_a_simulated_row_runs_the_measured_run_sa_bench_starts() -> None:
    """pdtune.plan.evaluate.sim_workload: srt-slurm 0.3.0's sa-bench (srtctl/benchmarks/scripts/sa-bench/bench.sh)
    measures concurrency x NUM_PROMPTS_MULT = 10 x C prompts after a warm-up run that has ended; by hand, 8 clients
    send 80 prompts of exactly the plan's lengths, all eight at once first. The warm-up run is left out because
    nothing of it stays in the engines: the same run with it simulated gives the same statistics (to rounding: the
    measured run starts later on the clock), but for the steps counted."""
    from test_sim_run import EFF, small_engine

    from pdtune.plan.evaluate import SIM_ROUNDS, sim_workload
    from pdtune.sim import SimConfig, closed_loop, simulate

    assert SIM_ROUNDS == 10
    wl = sim_workload(8, 1024, 128)
    assert len(wl.main.requests) == 80 and all(w.name != "warmup run" for w in wl.phases)
    assert {(r.isl, r.osl) for r in wl.main.requests} == {(1024, 128)}
    assert wl.main.concurrency == 8 and wl.main.ready[:8] == (0.0,) * 8
    config = SimConfig(record_timeline=False, enable_prefix_caching=False)
    warm = closed_loop(8, 1024, 128, num_prompts=80, warmups=16, harness="sa-bench", range_ratio=1.0)
    assert any(w.name == "warmup run" for w in warm.phases)
    alone, after = (simulate(small_engine(), w, efficiency=EFF, config=config).stats() for w in (wl, warm))
    assert after.pop("steps") > alone.pop("steps")  # the warm-up run's own steps, counted by the run
    assert alone == pytest.approx(after, rel=1e-12)


def test_simulated_rows_run_in_parallel_only_when_worth_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """pdtune.plan.evaluate.sim_jobs: one process below SIM_PARALLEL_WORK or for one row; else one per row up to
    the CPUs, PDTUNE_JOBS overriding the CPU count."""
    from pdtune.plan.evaluate import SIM_PARALLEL_WORK, sim_jobs

    monkeypatch.setenv("PDTUNE_JOBS", "3")
    assert sim_jobs(4, SIM_PARALLEL_WORK - 1) == 1 and sim_jobs(1, 10 * SIM_PARALLEL_WORK) == 1
    assert sim_jobs(4, SIM_PARALLEL_WORK) == 3 and sim_jobs(2, SIM_PARALLEL_WORK) == 2
    monkeypatch.setenv("PDTUNE_JOBS", "1")
    assert sim_jobs(4, 10 * SIM_PARALLEL_WORK) == 1


@pytest.mark.slow
def test_simulated_rows_are_the_same_in_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each simulated row is a seeded, deterministic run: two worker processes report exactly what this process
    reports for the same plan."""
    import pdtune.plan.evaluate as evaluate

    # concurrencies up to 64: ten rows, half the simulated requests of the full grid's nineteen
    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128, grid=(1, 2, 4, 8, 16, 32, 64),
                     prefill_topologies=("TP2",), decode_topologies=("TP4",), latency_model="simulated")
    columns = ["deployment", "concurrency", "ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p50", "tpot_ms_p99", "tps_per_gpu"]
    serial = plan(s, [Sla(min_tps_per_user=30)]).table[columns]
    monkeypatch.setattr(evaluate, "SIM_PARALLEL_WORK", 0)
    monkeypatch.setenv("PDTUNE_JOBS", "2")
    calls: list[int] = []
    jobs = evaluate.sim_jobs
    monkeypatch.setattr(evaluate, "sim_jobs", lambda rows, work: calls.append(jobs(rows, work)) or calls[-1])
    parallel = plan(s, [Sla(min_tps_per_user=30)]).table[columns]
    assert 2 in calls  # some batch did go to two workers
    assert parallel.equals(serial)


KIMI_LIKE = Path(__file__).resolve().parent / "fixtures" / "models" / "kimi-k2-like"


@pytest.mark.slow
def test_weights_say_what_the_config_does_not(capsys: pytest.CaptureFixture[str]) -> None:
    """A Kimi-K2-like config says bfloat16: no prefill/decode pair fits 16 B200s (about 2 TB of weights per
    engine), only one aggregated server over both nodes. With its FP8 weights (--weights fp8) the plan fits one
    TEP8 per pool, and its model line says so."""
    argv = ["plan", str(KIMI_LIKE), "--gpu", "b200", "--max-gpus", "16", "--isl", "8192", "--osl", "1024",
            "--min-tps-per-user", "20"]
    assert main([*argv, "--json"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert {r["mode"] for r in bf16["rows"]} == {"agg"} and "32 GPUs" in bf16["no_disagg"]
    assert main([*argv, "--weights", "fp8", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["model"]["precision"] == "fp8+fp8-experts"
    assert plan["picks"][0]["met"] and plan["rows"][plan["picks"][0]["row"]]["gpus_total"] <= 16


def test_an_sla_search_takes_one_of_rows_that_run_alike() -> None:
    """pdtune.plan.report._ranked: two prefill-bound rows of one deployment at two decode points run the same rate
    at the same paced concurrency; only the one with the lower TPOT bound (more tokens/s per user) is a candidate,
    so a slow evaluator does not run the same benchmark twice. A row of the same deployment at another
    concurrency stays."""
    import pandas as pd

    from pdtune.plan.report import _ranked

    rows = pd.DataFrame({"deployment": ["4xA : 1xB", "4xA : 1xB", "4xA : 1xB", "2xA : 1xC"],
                         "concurrency": [2233, 2233, 2080, 900], "tps_per_gpu": [10663.0, 10663.0, 10530.0, 9000.0],
                         "tps_per_user": [20.6, 27.0, 27.3, 60.0], "gpus_total": [48, 48, 48, 24]},
                        index=[10, 11, 12, 13])
    assert _ranked(rows, np.ones(4, dtype=bool)) == [11, 12, 13]
    assert _ranked(rows, np.array([True, False, True, True])) == [10, 12, 13]


def test_a_slow_evaluator_stops_searching_a_mode_once_it_has_a_pick_and_a_runner_up() -> None:
    """pdtune.plan.report.report_table: with a batched evaluator, once a pick under the TTFT ceiling and a row of
    another layout meeting the SLA (a runner-up) are evaluated, only candidates of a mode not yet seen are
    evaluated (the best aggregated row here); the pick and the best of each mode are the full evaluation's."""
    import re

    from pdtune.plan import Evaluator, evaluate_rows

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128)
    base = plan(s, [Sla(min_tps_per_user=30)])
    calls: list[list[tuple[str, str]]] = []

    def same(rows: object) -> object:
        calls.append(list(zip(rows["mode"].astype(str), rows["deployment"].astype(str))))  # type: ignore[index]
        return evaluate_rows(rows, base.tpot_p90)  # type: ignore[arg-type]

    p = plan(s, [Sla(min_tps_per_user=30)], evaluator=Evaluator("same", same, batch=1))
    search = [c[0] for c in calls[:-1]]  # the last call evaluates the reported table
    layouts = [re.sub(r"\b\d+x", "", dep) for _, dep in search]  # the deployment without its worker counts
    second = next(i for i, lay in enumerate(layouts) if lay != layouts[0])
    assert {m for m, _ in search[:second + 1]} == {"disagg"}
    assert [m for m, _ in search[second + 1:]] == ["agg"]  # the other disaggregated candidates were skipped
    got, want = p.picks[0], base.picks[0]
    assert [p.row(r)["deployment"] for r in (got.row, got.best_agg, got.best_disagg)] == \
        [base.row(r)["deployment"] for r in (want.row, want.best_agg, want.best_disagg)]


def test_a_runner_up_above_the_ceiling_is_named_once_with_its_ttft() -> None:
    """pdtune.plan.report.picks_sentence: a runner-up with more tokens/s per GPU than the pick can only be one above
    the TTFT ceiling (the faster row): it is named once, with its TTFT, never as "-0.4% less"; a runner-up under
    the ceiling reads as before. Rows made up for the sentence."""
    from types import SimpleNamespace

    from pdtune.plan.report import Pick, picks_sentence

    rows = {
        5: {"deployment": "4xA : 1xB", "mode": "disagg", "gpus_total": 48, "concurrency": 2080,
            "tps_per_gpu": 9899.0, "tps_per_user": 27.4, "ttft_ms_p50": 728.0, "kv_transfer_share": 0.001,
            "bottleneck_words": "decode-bound"},
        4: {"deployment": "4xA : 1xC", "mode": "disagg", "gpus_total": 48, "concurrency": 2233,
            "tps_per_gpu": 9934.0, "tps_per_user": 26.0, "ttft_ms_p50": 1674.0, "kv_transfer_share": 0.0,
            "bottleneck_words": "prefill-bound"},
        3: {"deployment": "2xA : 1xD", "mode": "disagg", "gpus_total": 24, "concurrency": 900,
            "tps_per_gpu": 8910.0, "tps_per_user": 30.0, "ttft_ms_p50": 600.0, "kv_transfer_share": 0.0,
            "bottleneck_words": "decode-bound"},
    }
    view = SimpleNamespace(row=rows.__getitem__, settings=SimpleNamespace(max_gpus=72),
                           ceiling=SimpleNamespace(ms=1000.0))
    faster = Pick(Sla(min_tps_per_user=20), True, 5, None, None, 10, runner_up=4, faster_above_ceiling=4)
    text = picks_sentence(view, faster)  # type: ignore[arg-type]
    assert "less" not in text and text.count("row 4") == 1
    assert "runner-up row 4, 4xA : 1xC, would give 9,934 tokens/s per GPU at a TTFT of 1,674 ms, above the " \
        "1,000 ms ceiling" in text
    slower = Pick(Sla(min_tps_per_user=20), True, 5, None, None, 10, runner_up=3, faster_above_ceiling=4)
    text = picks_sentence(view, slower)  # type: ignore[arg-type]
    assert "runner-up row 3, 2xA : 1xD (disaggregated, 24 GPUs), 8,910 tokens/s per GPU (10.0% less)" in text
    assert "; row 4, 4xA : 1xC, would give 9,934" in text


def test_a_prefill_bound_row_queues_past_the_clients_its_decode_side_holds() -> None:
    """pdtune.frontier.xpyd's paced concurrency, checked by pdtune.sim on the benchmark a recipe runs (sa-bench,
    ten prompts per client): the prefill-bound row whose decode side runs furthest below its point (Qwen3-32B,
    16 H100, 4096/256) simulates at its paced concurrency to the paced TPOT (within 5 %) and a TTFT near its
    prefill's; at the count the point's TPOT gives, the extra clients queue at the prefill engines, and the
    median TTFT grows by at least half of (extra clients) / rate (steady state: all of it)."""
    from pdtune.gpus import load_gpu
    from pdtune.model import load_model
    from pdtune.perfmodel.defaults import gpu_defaults
    from pdtune.plan.evaluate import _sim_engine, sim_workload
    from pdtune.sim import SimConfig, simulate_disagg

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=16, isl=4096, osl=256)
    rows = plan(s, [Sla(min_tps_per_user=30)]).rows
    bound = rows[(rows["mode"].astype(str) == "disagg") & (rows["bottleneck"].astype(str) == "prefill")]
    row = bound.loc[(bound["tpot_ms_p50"] - bound["paced_tpot_ms"]).idxmax()]
    rate = row["total_tps"] / (s.isl + s.osl)
    naive = round(rate * (row["ttft_ms_p50"] + row["tpot_ms_p50"] * (s.osl - 1)) / 1000)
    assert naive > 2 * row["concurrency"]  # the case: the point's TPOT would more than double the clients
    spec, gpu, cache = load_model(s.model), load_gpu(s.gpu), {}
    engines = [_sim_engine(spec, gpu, s, role, row[f"{role}_topology"], 0, int(row[f"{role}_concurrency"]), cache)
               for role in ("prefill", "decode")]

    def run(clients: int) -> dict[str, float]:
        return simulate_disagg(*engines, int(row["n_prefill_workers"]), int(row["n_decode_workers"]),
                               sim_workload(clients, s.isl, s.osl), efficiency=gpu_defaults(s.gpu).efficiency,
                               config=SimConfig(record_timeline=False, enable_prefix_caching=False)).stats()

    paced, past = run(int(row["concurrency"])), run(naive)
    assert paced["tpot_ms_p50"] == pytest.approx(row["paced_tpot_ms"], rel=0.05)
    assert paced["ttft_ms_p50"] < 1.5 * row["ttft_ms_p50"]
    assert past["ttft_ms_p50"] > paced["ttft_ms_p50"] + 0.5 * (naive - row["concurrency"]) / rate * 1000


def test_a_prefill_bound_row_says_it_has_no_prefill_headroom() -> None:
    """pdtune.plan.aggregated.bottleneck_words: a prefill-bound row runs its prefill engines at their full rate (its
    concurrency is what the decode side holds at that rate), so its words say more clients would queue."""
    from pdtune.plan.aggregated import bottleneck_words

    words = bottleneck_words({"mode": "disagg", "bottleneck": "prefill", "n_prefill_workers": 4,
                              "n_decode_workers": 1})
    assert words.startswith("prefill-bound: the 4 prefill engines set the rate and run at it")
    assert "clients beyond the row's concurrency wait in their queue" in words
    assert bottleneck_words({"mode": "disagg", "bottleneck": "decode", "n_prefill_workers": 1,
                             "n_decode_workers": 1}).startswith("decode-bound: the 1 decode engine set the rate")


def test_the_table_marks_the_frontier_of_its_evaluated_numbers() -> None:
    """pdtune.plan.report.report_table: ``on_frontier`` is the frontier of the reported rows' evaluated numbers.
    With the steady-state evaluator it is the search's frontier; an evaluator that gives the pick more tokens/s
    per GPU than a frontier row of its tokens/s per user (as the simulation did for gpt-oss-120b on 16 B200, whose
    pick the table had starred below a row it beat) moves the marks to match. Rows scaled by hand for the test."""
    from pdtune.frontier import upper_envelope
    from pdtune.plan import Evaluator, evaluate_rows

    s = PlanSettings(model="qwen3-32b", gpu="h100", max_gpus=8, isl=1024, osl=128)
    base = plan(s, [Sla(min_tps_per_user=30)])
    table = base.table
    assert set(table.index[table["on_frontier"]]) == set(upper_envelope(table).index)
    pick = base.row(base.picks[0].row)
    steady_front = table[table["on_frontier"]]
    # Frontier rows at fewer tokens/s per user than the pick, and the most tokens/s per GPU among them.
    lower = steady_front[steady_front["tps_per_user"] < pick["tps_per_user"]]
    assert len(lower)
    target = float(lower["tps_per_gpu"].max())

    def boosted(rows: object) -> object:
        out = evaluate_rows(rows, base.tpot_p90)  # type: ignore[arg-type]
        hit = (out["deployment"] == pick["deployment"]) & (out["concurrency"] == pick["concurrency"])
        out.loc[hit, "tps_per_gpu"] = target * 1.5  # the pick now beats every lower frontier row
        return out

    p = plan(s, [Sla(min_tps_per_user=30)], evaluator=Evaluator("boosted", boosted))
    t = p.table
    row = t[(t["deployment"] == pick["deployment"]) & (t["concurrency"] == pick["concurrency"])].iloc[0]
    assert row["on_frontier"]
    beaten = t[(t["tps_per_user"] <= row["tps_per_user"]) & (t["tps_per_gpu"] < row["tps_per_gpu"])]
    assert len(beaten) and not beaten["on_frontier"].any()
