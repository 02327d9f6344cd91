"""The frames chapters 1-4 print (``pdtune.chapters``) and the capacity rule (``pdtune.capacity``): by hand
against the article, and as properties."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune import article
from pdtune.capacity import capacity_by_version, scenario_waterfall, topology_capacity
from pdtune.chapters import concurrency as ch4, display, graphs as ch3, memory as ch2, state as ch1
from pdtune.errors import InputError
from pdtune.memory import Accounting, cudagraph_plan, default_max_num_batched_tokens
from pdtune.model import bundled_models, load_model
from pdtune.state import plan_state
from pdtune.units import GiB, KiB, MiB, from_gib

ROOT = Path(__file__).resolve().parents[1]
LEN = article.ISL + article.OSL  # 9216
QWEN = load_model(article.MODEL)
FIXTURE_LOG = ROOT / "tests" / "fixtures" / "logs" / "v0.26_tp2_qwen3-32b.log"
FIXTURE_MODEL = ROOT / "tests" / "fixtures" / "logs" / "models" / "qwen3-32b"


# --- chapter 1: per-request state ----------------------------------------------------------------------


def test_article_breakdown_by_hand() -> None:
    """759 MiB = attention KV + empty tail + GDN conv + GDN SSM + page padding, every part by hand."""
    parts = ch1.state_breakdown(article.article_plan()).set_index("part")["bytes"]
    assert parts["attention KV"] == 23 * 9216 * 2048  # 414 MiB
    assert parts["attention: empty tail of the last block"] == 23 * (5 * 2112 - 9216) * 2048  # 1344 tokens
    assert parts["conv state"] == 69 * 122_880
    assert parts["SSM state"] == 69 * 4 * MiB
    assert parts["recurrent page padding"] == 69 * 8192
    assert parts.sum() == 795_869_184 == 759 * MiB
    assert "padding layer slots" not in parts and "MTP draft layer KV" not in parts


def test_mtp_breakdown_counts_states_draft_layer_and_padding_slots() -> None:
    plan = plan_state(QWEN, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1", num_speculative_tokens=3)
    parts = ch1.state_breakdown(plan).set_index("part")
    # four states per GDN layer, conv window 3 + 3 rows
    assert parts.loc["SSM state", "bytes"] == 69 * 4 * 4 * MiB
    assert parts.loc["conv state", "bytes"] == 69 * 4 * 245_760
    # the MTP layer's attention: 5 blocks of 2176 tokens x 2 KiB; 3 GDN groups of 24 slots, one empty each
    assert parts.loc["MTP draft layer KV", "bytes"] == 5 * 2176 * 2048
    assert parts.loc["padding layer slots", "layers"] == 3
    assert parts["bytes"].sum() == plan.bytes_per_request


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(bundled_models()),
    tp=st.sampled_from([1, 2, 4, 8]),
    k=st.integers(0, 3),
    vllm=st.sampled_from(["0.11", "0.20", "0.26.1", "0.33"]),
    prefix_caching=st.booleans(),
    tokens=st.integers(1, 40_000),
)
def test_breakdown_always_sums_to_bytes_per_request(
    model: str, tp: int, k: int, vllm: str, prefix_caching: bool, tokens: int
) -> None:
    try:
        plan = plan_state(load_model(model), max_model_len=tokens, tp=tp, vllm=vllm, num_speculative_tokens=k,
                          prefix_caching=prefix_caching)
    except InputError:
        return  # a TP that does not divide the heads: vLLM refuses it too
    parts = ch1.state_breakdown(plan)
    assert parts["bytes"].sum() == plan.bytes_per_request
    assert (parts["bytes"] > 0).all()
    assert set(parts["part"]) <= set(ch1.STATE_PARTS)
    assert 0.0 <= ch1.recurrent_share(plan) < 1.0


def test_version_plans_grow_with_mtp_and_prefix_caching() -> None:
    plans = ch1.version_plans(QWEN, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1",
                                 num_speculative_tokens=3)
    mib = [p.bytes_per_request / MiB for p in plans.values()]
    assert mib == [759.0, 759.0, 1734.0, 2040.0, 2346.0]
    assert list(plans)[-1].startswith("vLLM 0.33")
    no_mtp = ch1.version_plans(QWEN, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.33",
                                  num_speculative_tokens=0)
    assert len(no_mtp) == 3  # 0.11, 0.33 plain, 0.33 with prefix caching


def test_tp_plans_skip_sizes_that_do_not_divide() -> None:
    plans = ch1.tp_plans(load_model("qwen3-next-80b-a3b"), tps=[1, 3, 4], max_model_len=LEN)
    assert list(plans) == ["TP1", "TP4"]


def test_pd_block_sizes_of_the_article() -> None:
    kw = dict(max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1")
    pairs = ch1.pd_block_sizes(QWEN, ["TP4DP2+EP", "TP8+EP"], ["TEP8", "TP4DP4+EP"], **kw).set_index(
        ["prefill", "decode"])
    assert bool(pairs.loc[("TP4DP2+EP", "TP4DP4+EP"), "match"])
    row = pairs.loc[("TP4DP2+EP", "TEP8")]
    blocks = (row["prefill_block_tokens"], row["decode_block_tokens"], row["block_size_to_set"])
    assert blocks == (2112, 1056, 2112)
    fix = ch1.pd_block_fix(QWEN, ["TP4DP2+EP"], ["TEP8"], **kw)
    assert len(fix) == 1 and fix["side"].iloc[0] == "decode"
    # TP8 rank: 276 pages of 540,672 B become 184 pages of 1,081,344 B: +1/3
    assert fix["extra_pct"].iloc[0] == pytest.approx(100 / 3)
    grid = ch1.pd_block_matrix(QWEN, ["TP4DP2+EP"], ["TEP8", "TP4DP4+EP"], **kw)
    assert grid.loc["TP4DP2+EP (TP4)", "TEP8 (TP8)"] == "2112 vs 1056: set 2112"
    assert grid.loc["TP4DP2+EP (TP4)", "TP4DP4+EP (TP4)"] == "2112 (same)"


def test_pd_block_fix_is_empty_when_every_pair_agrees() -> None:
    fix = ch1.pd_block_fix(load_model("deepseek-v3"), ["TP8"], ["TP4DP4+EP"], max_model_len=LEN)
    assert fix.empty and "extra_pct" in fix.columns


def test_weights_by_topology_matches_weights_recomputed() -> None:
    ours = ch2.weights_by_topology(QWEN, ["TEP8", "TP4DP4+EP", "TP1PP6+EP"], mtp=True).set_index("topology")
    published = article.weights_recomputed().set_index(["topology", "mtp"])
    assert ours.loc["TEP8", "weights_gib"] == pytest.approx(published.loc[("TP8", True), "weights_gib"])
    assert ours.loc["TP4DP4+EP", "weights_gib"] == pytest.approx(published.loc[("TP4DP4", True), "weights_gib"])
    assert "TP1PP6+EP" not in ours.index  # pipeline stages are not modeled


def test_reference_topology() -> None:
    assert article.reference_topology(["TEP8", "tp4dp4+ep"]) == "tp4dp4+ep"
    assert article.reference_topology(["TEP8", "TEP16"]) == "TEP8"
    with pytest.raises(InputError):
        article.reference_topology([])


# --- chapter 2: memory -----------------------------------------------------------------------------------


def test_capacity_readings() -> None:
    r = ch2.capacity_readings().set_index("reading")
    gb, gib = r.iloc[0], r.iloc[1]
    assert gb["capacity_gib"] == pytest.approx(259.84, abs=0.005)
    assert gb["left_gib"] < gb["torch_total_gib"]  # impossible: GB cannot be the unit
    assert gib["left_gib"] == pytest.approx(276.72)
    assert gib["left_minus_torch_total_gib"] == pytest.approx(0.10)


def test_article_waterfall_reads_279_as_gib() -> None:
    for run in range(1, 9):
        w = article.article_waterfall(run)
        steps = w.steps()
        assert all(s.bytes >= 0 for s in steps)
        assert steps[0].key == "driver" and steps[0].bytes == from_gib(279) - from_gib(276.62)
        assert w.kv_cache() == article.waterfall_of(article.table(3).iloc[run - 1]).kv_cache()
    with pytest.raises(InputError):
        article.article_waterfall(9)


def test_prose_budget() -> None:
    p = ch2.prose_budget()
    requested, before = p.iloc[2], p.iloc[-1]
    assert requested["value"] == pytest.approx(254.4904, abs=1e-4)
    assert round(requested["value"], 1) == requested["published"]
    assert before["value"] == pytest.approx(248.4604, abs=1e-4)
    assert round(before["value"]) == before["published"]
    assert (p["value"].round(2) == p["published"]).sum() == 5  # the inputs, and 254 "about"


def test_waterfall_frame_rows() -> None:
    modeled = scenario_waterfall(
        QWEN, topology="TP4DP4+EP", gpu_memory_gib=276.62, gpu_memory_utilization=0.92, non_torch_gib=2.90,
        activation_peak_gib=1.83, cudagraph_estimate_gib=8.29, mtp=False, vllm="0.26.1")
    ws = {"article": article.article_waterfall(7), "modeled": modeled}
    frame = ch2.waterfall_frame(ws, accounting=Accounting.ARTICLE_PROSE)
    art = frame[frame["scenario"] == "article"]
    assert list(art["key"]) == ["box", "driver", "unexplained", "total", "reserve", "cuda_context", "non_torch",
                                "weights", "activation_peak", "cudagraph_estimate", "kv_cache"]
    assert art["delta_gib"].iloc[1] + art["delta_gib"].iloc[2] == pytest.approx(279 - 276.62)
    # what the rows leave, without the prose's second subtraction, is vLLM's KV cache
    left = art["start_gib"].iloc[0] - art[art["key"] != "cuda_context"]["delta_gib"].sum()
    assert left == pytest.approx(ws["article"].kv_cache() / GiB)
    mod = frame[frame["scenario"] == "modeled"]
    assert "cuda_context" not in set(mod["key"]) and "box" not in set(mod["key"])  # nothing to show
    assert mod["start_gib"].iloc[0] == pytest.approx(276.62)
    assert (frame["provenance"].str.len() > 0).all()


def test_modeled_waterfall_differs_from_run_7_by_the_weights_residual() -> None:
    modeled = scenario_waterfall(
        QWEN, topology="TP4DP4+EP", gpu_memory_gib=276.62, gpu_memory_utilization=0.92, non_torch_gib=2.90,
        activation_peak_gib=1.83, cudagraph_estimate_gib=8.29, mtp=False, vllm="0.26.1")
    residual = article.weights_recomputed().set_index(["topology", "mtp"]).loc[("TP4DP4", False), "residual_gib"]
    gap = (modeled.kv_cache() - article.article_waterfall(7).kv_cache()) / GiB
    assert gap == pytest.approx(residual, abs=0.01)


@given(u=st.floats(0.5, 0.99))
def test_utilization_what_if_moves_kv_one_for_one(u: float) -> None:
    w = {"run 7": article.article_waterfall(7)}
    per = article.article_plan().bytes_per_request
    f = ch2.utilization_what_if(w, [0.92, u], {"run 7": per}, names={"run 7": "article"})
    kv = f[("article", "KV cache (GiB)")]
    assert kv.iloc[1] - kv.iloc[0] == pytest.approx((u - 0.92) * 276.62, abs=1e-6)
    assert f[("article", "requests")].iloc[1] == pytest.approx(kv.iloc[1] * 2**30 / per)


def test_reserve_check() -> None:
    r = ch2.reserve_check().set_index("run")
    assert r.loc[6, "graph_overrun_gib"] == pytest.approx(2.34)
    assert r.loc[6, "max_utilization"] == pytest.approx((276.62 - 3.13 - 2.34) / 276.62)
    assert r.loc[5, "graph_overrun_gib"] == 0.0
    assert (r["reserve_left_gib"] > 0).all()


# --- chapter 3: graphs -----------------------------------------------------------------------------------


def test_table1_rule_holds() -> None:
    t1 = ch3.table1_checked()
    assert t1["rule_holds"].all()
    assert default_max_num_batched_tokens(272, 3) == 1104


def test_graph_counts() -> None:
    g = ch3.graph_counts([80, 272], 3).set_index(["max_num_seqs", "num_speculative_tokens"])
    assert g.loc[(80, 3), "graphs_full_decode_only"] == 37
    assert g.loc[(272, 3), "graphs_full_decode_only"] == 85
    assert g.loc[(272, 0), "graphs_full_decode_only"] == cudagraph_plan(272).count
    assert (g["graphs_full_and_piecewise"] >= g["graphs_full_decode_only"]).all()
    assert len(ch3.graph_counts([20], 0)) == 1  # K = 0 is not listed twice


def test_table2_bounds_and_cost() -> None:
    t2 = ch3.table2_bounds().set_index("run")
    assert t2.loc[4, "max_increment_mib"] == pytest.approx(7.93 * 1024 / 84, rel=1e-6)
    assert list(t2.index[~t2["estimate_covers_actual"]]) == [3, 6]
    cost = ch3.graph_estimate_cost().set_index("run")
    assert cost.loc[4, "requests_article"] == pytest.approx(1.89 * 1024 / 759)
    assert cost.loc[4, "requests_vllm_rank"] == pytest.approx(1.89 * 1024 / 267.75)


# --- chapter 4: concurrency ------------------------------------------------------------------------------


def test_capacity_by_version_for_run_7() -> None:
    kv = article.article_waterfall(7).kv_cache()
    c = capacity_by_version(QWEN, kv, ["0.20", "0.21"], tp=4, max_model_len=LEN, kv_cache_dtype="fp8")
    c = c.set_index("vllm")
    assert (c["num_blocks"] == 5783).all()
    assert c.loc["0.20", "kv_cache_tokens"] == 5783 // 4 * 2112
    assert c.loc["0.21", "kv_cache_tokens"] == int(5783 / 8 * 9216)


def test_requests_comparison_pairs_every_run() -> None:
    r = ch4.requests_comparison()
    assert len(r) == 16 and set(r.groupby("run").size()) == {2}
    art = r[r["measure"].str.startswith("article")]
    assert list(art["requests"]) == list(article.table(3)["published_requests_per_engine"])


def test_topology_capacity_is_consistent() -> None:
    kw = dict(gpu_memory_gib=276.62, gpu_memory_utilization=0.92, non_torch_gib=2.90, activation_peak_gib=1.83,
              cudagraph_estimate_gib=8.29, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1",
              num_speculative_tokens=3)
    cap = topology_capacity(QWEN, ["TP4DP4+EP", "TEP8", "TP3"], **kw)
    assert len(cap) == 6
    bad = cap[cap["topology"] == "TP3"]
    assert (bad["note"] != "").all() and bad["requests_per_gpu"].isna().all()
    row = cap[(cap["topology"] == "TP4DP4+EP") & ~cap["mtp"]].iloc[0]
    plan = plan_state(QWEN, tp=4, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.26.1")
    by_hand = plan.capacity(from_gib(row["kv_cache_gib"])).max_concurrency
    assert row["requests_per_engine"] == pytest.approx(by_hand, rel=1e-4)
    assert row["requests_per_gpu"] == pytest.approx(row["requests_per_engine"] * 4 / 16)
    # the article's comparison: per GPU, TP4DP4 holds more than TP8 with MTP
    mtp = cap[cap["mtp"]].set_index("topology")
    assert mtp.loc["TP4DP4+EP", "requests_per_gpu"] > 2 * mtp.loc["TEP8", "requests_per_gpu"]


def test_topology_capacity_reports_weights_that_do_not_fit() -> None:
    cap = topology_capacity(
        QWEN, ["TP2DP4+EP"], gpu_memory_gib=80.0, gpu_memory_utilization=0.9, non_torch_gib=1.0,
        activation_peak_gib=1.0, cudagraph_estimate_gib=1.0, max_model_len=LEN, kv_cache_dtype="fp8",
        vllm="0.26.1", num_speculative_tokens=0)
    assert cap["note"].iloc[0] == "weights do not fit" and cap["kv_cache_gib"].iloc[0] < 0


def test_log_helpers() -> None:
    empty = ch4.log_checks([], article.MODEL)
    assert empty.empty and "predicted_max_concurrency" in empty.columns
    if not FIXTURE_LOG.is_file() or not FIXTURE_MODEL.is_dir():
        pytest.skip("vLLM log fixtures are not in this checkout")
    checks = ch4.log_checks([str(FIXTURE_LOG)], str(FIXTURE_MODEL))
    assert len(checks) == 1
    assert checks["logged_kv_cache_tokens"].iloc[0] == checks["predicted_kv_cache_tokens"].iloc[0]
    waterfalls = ch2.log_waterfalls([str(FIXTURE_LOG)])
    (label, w), = waterfalls.items()
    assert label.startswith("measured: ") and w.weights > 0


def test_styled_formats_thousands() -> None:
    html = display.styled(pd.DataFrame({"bytes": [795_869_184], "mib": [759.0]})).to_html()
    assert "795,869,184" in html and "759.00" in html


# --- numbers the prose glues -----------------------------------------------------------------------------


def test_plain_turns_numpy_scalars_into_literals_myst_nb_can_read_back() -> None:
    import ast

    import numpy as np

    for value, expected in ((np.int64(2112), 2112), (np.float64(189.75), 189.75), (np.bool_(True), True),
                            ("TP8", "TP8"), (7, 7)):
        out = display.plain(value)
        assert out == expected and type(out) is type(expected)
        assert ast.literal_eval(repr(out)) == expected  # MyST-NB stores repr() and reads it back so
    assert display.plain(None) != display.plain(None)  # NaN: formats as "nan" instead of failing the build
    assert display.plain(float("nan")) != display.plain(float("nan"))


def test_frame_numbers_names_cells_by_row_and_column() -> None:
    frame = pd.DataFrame({"run": [1, 7], "topology": ["TP8", "TP4DP4"], "mtp": [True, False],
                          "kv_gib": [83.01, 133.96], "note": [None, "x"]})
    by_run = display.frame_numbers(frame, ["kv_gib", "note"], key="run")
    assert by_run == {"1-kv_gib": 83.01, "7-kv_gib": 133.96, "7-note": "x", "min-kv_gib": 83.01,
                      "max-kv_gib": 133.96}
    by_layout = display.frame_numbers(frame, ["kv_gib"], key=["topology", "mtp"])
    assert by_layout["tp4dp4-false-kv_gib"] == 133.96 and by_layout["tp8-true-kv_gib"] == 83.01
    assert display.frame_numbers(frame, ["kv_gib"], labels=["a", "b"])["b-kv_gib"] == 133.96
    assert "min-mtp" not in display.frame_numbers(frame)  # booleans have no range
    with pytest.raises(ValueError):
        display.frame_numbers(frame, labels=["a"])
    with pytest.raises(KeyError):
        display.frame_numbers(frame, ["nope"])


def test_plan_numbers_of_the_article() -> None:
    n = ch1.plan_numbers(article.article_plan())
    assert (n["block"], n["pages"], n["pool-blocks"], n["mib"], n["page-mib"]) == (2112, 184, 8, 759.0, 4.125)
    assert (n["attn-bytes"], n["rec-bytes"], n["attn-blocks"], n["slots"]) == (2048, 4216 * KiB, 5, 5 * 2112)
    assert n["tail-mib"] == pytest.approx((5 * 2112 - LEN) * 2 * KiB * 23 / MiB)  # the empty tail, ~60 MiB
    tp4 = ch1.plan_numbers(article.article_plan(tp=4), relative_to=article.article_plan())
    assert (tp4["mib"], tp4["ratio"], tp4["reciprocal"], tp4["all-ranks-ratio"]) == (189.75, 0.25, 4.0, 1.0)
    mla = ch1.plan_numbers(plan_state(load_model("deepseek-v3"), max_model_len=LEN, kv_cache_dtype="fp8"))
    assert mla["rec-bytes"] == 0 and mla["rec-share"] == 0.0


def test_tp_numbers_pick_a_middle_and_the_largest_tp() -> None:
    n = ch1.tp_numbers(ch1.tp_plans(QWEN, max_model_len=LEN, kv_cache_dtype="fp8", vllm="0.11"))
    assert (n["tp1-mib"], n["mid"], n["mid-mib"], n["mid-ratio"]) == (759.0, 4, 189.75, 1.0)
    assert (n["high"], n["high-block"], n["high-attn-bytes"], n["high-ratio"]) == (8, 1056, 512, 1.5)
    only = ch1.tp_numbers(ch1.tp_plans(QWEN, tps=(1, 2), max_model_len=LEN, kv_cache_dtype="fp8"))
    assert (only["mid"], only["high"]) == (1, 2)
    with pytest.raises(InputError):
        ch1.tp_numbers(ch1.tp_plans(QWEN, tps=(4,), max_model_len=LEN, kv_cache_dtype="fp8"))


def test_pd_block_numbers() -> None:
    common = dict(max_model_len=LEN, kv_cache_dtype="fp8", vllm=article.ARTICLE_VLLM)
    n = ch1.pd_block_numbers(QWEN, ["TP4DP2+EP"], ["TEP8"], **common)
    assert n == {"pairs": 1, "unsupported": 0, "mismatched": 1, "min-block": 1056, "max-block": 2112,
                 "max-extra-pct": pytest.approx(100 / 3)}
    same = ch1.pd_block_numbers(QWEN, ["TP4DP2+EP"], ["TP4DP4+EP"], **common)
    assert (same["mismatched"], same["max-extra-pct"]) == (0, 0.0)
    # A TP size that does not divide the heads is no pair at all, not a disagreement.
    nemotron = ch1.pd_block_numbers(load_model("nemotron-nano-9b-v2"), ["TP4DP2+EP", "TP16+EP"],
                                       ["TEP8", "TEP16"], **common)
    assert (nemotron["pairs"], nemotron["unsupported"], nemotron["mismatched"]) == (1, 3, 0)


def test_utilization_step_and_capacity_numbers() -> None:
    w = article.article_waterfall(7)
    step = ch2.utilization_step(w, article.article_plan().bytes_per_request)
    assert step["gib"] == pytest.approx(0.01 * 276.62, abs=1e-6)
    assert step["requests"] == pytest.approx(0.01 * 276.62 * 1024 / 759, abs=1e-5)
    rank = plan_state(QWEN, tp=4, max_model_len=LEN, kv_cache_dtype="fp8", vllm=article.ARTICLE_VLLM)
    c = ch4.capacity_numbers(rank, w.kv_cache())
    assert (c["page-bytes"], c["group-size"], c["num-blocks"], c["pool-blocks"]) == (2112 * 512, 23, 5783, 8)
    assert c["max-concurrency"] == pytest.approx(5783 / 8)


def test_table_summaries_for_the_prose() -> None:
    s = ch3.table2_summary()
    assert (s["runs"], s["graph-counts-match"], s["over-reserved"], s["under-reserved"]) == (8, 8, 6, 2)
    assert round(s["min-over-pct"]) == 10 and round(s["max-over-pct"]) == 56
    t3 = ch4.table3_per_gpu().set_index("run")
    assert (t3.loc[1, "gpus_per_engine"], t3.loc[5, "gpus_per_engine"]) == (8, 4)
    # per GPU against per GPU: a TP4 rank without MTP shards the 759 MiB perfectly, so the counts agree
    assert t3.loc[7, "vllm_vs_article"] == pytest.approx(1.0, abs=1e-3)
    assert t3.loc[7, "requests_vllm"] == pytest.approx(4 * t3.loc[7, "requests_article"], rel=1e-3)
    layouts = ch4.layout_summary(ch4.table3_per_gpu()).set_index(["topology", "mtp"])
    assert len(layouts) == 3
    assert layouts.loc[("TP4DP4", True), "requests_vllm_per_gpu_min"] == pytest.approx(315.88 / 4, abs=0.01)
    assert article.article_speculative_tokens() == 3


def test_capacity_leaders() -> None:
    capacity = ch4.article_topology_capacity(["TEP16", "TP4DP4+EP", "TP4DP8+EP"])
    lead = ch4.capacity_leaders(capacity)
    assert lead["most-kv-topology"] == "TP4DP8+EP" and lead["most-kv-gpus"] == 32
    assert lead["most-requests"] == pytest.approx(capacity["requests_per_gpu"].max())
    none = ch4.capacity_leaders(capacity.iloc[0:0])
    assert none["most-kv-topology"] == "none" and none["most-requests"] != none["most-requests"]


def test_table1_share_of_the_gpu() -> None:
    t1 = ch3.table1_checked().set_index("run")
    assert t1.loc[6, "pct_of_gpu"] == pytest.approx(100 * 2.24 / 276.62)


def test_glue_numbers_hands_plain_values_to_myst_nb(monkeypatch: pytest.MonkeyPatch) -> None:
    import myst_nb
    import numpy as np

    glued: list[tuple[str, object, bool]] = []
    def fake_glue(name: str, value: object, display: bool = True) -> None:
        glued.append((name, value, display))

    monkeypatch.setattr(myst_nb, "glue", fake_glue)
    display.glue_numbers("state", {"block": np.int64(2112), "model": "qwen3.8-2.4t"})
    frame = pd.DataFrame({"run": [7], "kv_cache_gib": [133.96]})
    display.glue_frame("memory-t3", frame, ["kv_cache_gib"], key="run")
    assert glued == [("state-block", 2112, False), ("state-model", "qwen3.8-2.4t", False),
                     ("memory-t3-7-kv_cache_gib", 133.96, False),
                     ("memory-t3-min-kv_cache_gib", 133.96, False),
                     ("memory-t3-max-kv_cache_gib", 133.96, False)]
    assert type(glued[0][1]) is int


def test_a_small_negative_rounded_to_zero_shows_no_sign() -> None:
    """Table 2's run 3 used 0.01 GiB more than its estimate: -0.013 requests is "0.0", not "-0.0"."""
    import pandas as pd

    from pdtune.chapters.display import styled

    html = styled(pd.DataFrame({"requests_article": [-0.013, -1.25, 0.0], "unused_gib": [-0.001, -0.5, 2.0]})).to_html()
    assert "-0.0<" not in html and ">0.0<" in html and "-1.2" in html and "-0.50" in html
