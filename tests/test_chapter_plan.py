"""The plan chapter's worked numbers and chapter 1's second kind of layer, derived by hand.

The chapters themselves run for every parameter set in ``tests/test_parameter_sets.py`` (and the book build);
here the numbers their prose glues are checked against the arithmetic they claim.
"""

from __future__ import annotations

import math

import pytest

from pdtune.chapters import plan as ch9
from pdtune.chapters import state as ch1, state_text as ch1_text
from pdtune.model import load_model
from pdtune.state import plan_state
from pdtune.units import MiB


def test_the_articles_request_over_nvlink_and_a_400_gbit_nic() -> None:
    """759 MiB = 795,869,184 B (chapter 1). NVLink 5 of a GB300: 900 GB/s per GPU and 2 us (data/gpus), so
    795,869,184 / 900e9 + 2e-6 s = 0.8863 ms; a 400 Gb/s ConnectX-7 is 50 GB/s and 20 us: 15.937 ms."""
    n = ch9.article_request_bytes()
    assert n == 759 * MiB == 795_869_184
    w = ch9.link_worked(n)
    assert w["nvlink-ms"] == pytest.approx(1000 * (n / 900e9 + 2e-6))
    assert w["nic-ms"] == pytest.approx(1000 * (n / 50e9 + 20e-6))
    assert w["nic-gbit"] == 400
    assert w["ratio"] == pytest.approx(w["nic-ms"] / w["nvlink-ms"])
    shares = ch9.share_numbers(w, {"prefill_ttft_ms": 100.0, "deployment": "x"})
    assert shares["nic-share"] == pytest.approx(w["nic-ms"] / (100.0 + w["nic-ms"]))
    assert math.isnan(ch9.share_numbers(w, None)["nic-share"])


def test_chapter_one_sets_jamba_beside_the_article_under_the_same_arithmetic() -> None:
    """Jamba-1.5-Mini at 9,216 tokens, fp8, vLLM 0.33: 8 groups of 4 slots (7 Mamba1, 1 attention), a 160-token
    block; pages = 4 x ceil(9216 / 160) + 28 x 1 = 4 x 58 + 28 = 260 (state-pages-per-request)."""
    other = ch1.other_kind_plan(load_model("qwen3.8-2.4t"), 9216, "fp8")
    assert other.model.name == "jamba-1.5-mini"
    assert other.block_tokens == 160 and len(other.groups) == 8 and other.group_size == 4
    assert other.blocks_per_request == 4 * math.ceil(9216 / 160) + 28 == 260
    same = plan_state(load_model("jamba-1.5-mini"), max_model_len=9216, kv_cache_dtype="fp8", vllm="0.33")
    assert other.bytes_per_request == same.bytes_per_request
    text = ch1_text.kind_sentence(other)
    assert "Mamba1" in text and "260 pages" in text and f"{same.bytes_per_request / MiB:,.2f} MiB" in text
    # when the parameters name Jamba itself, the other kind is Gemma-3's interleaved sliding windows
    assert ch1.other_kind_plan(load_model("jamba-1.5-mini"), 9216, "fp8").model.name == "gemma-3-27b-it"


def test_the_mixed_pool_plans_prefill_on_another_kind() -> None:
    kwargs = dict(model="llama-3.1-70b", gpu="h200", isl=8192, osl=1024, num_speculative_tokens=0,
                  plan={"max_gpus": 16})
    slas = ch9.plan_slas({"min_tps_per_user": [20, 50]})
    single = ch9.timed_plan(ch9.plan_settings(**kwargs), slas).plan
    mixed = ch9.mixed_plan(kwargs, slas, "h200")
    assert not isinstance(mixed, str)
    assert (mixed.plan.prefill_gpu.name, mixed.plan.decode_gpu.name) == ("b200", "h200")
    disagg = mixed.plan.table[mixed.plan.table["mode"] == "disagg"]
    assert set(disagg["kv_link"]) == {"scale_out"}  # two GPU kinds never share NVLink
    sentence = ch9.mixed_sentence(single, mixed)
    row = ch9.middle_pick(mixed.plan, ch9.middle_sla(single), disaggregated=True)
    assert row is not None and row["deployment"] in sentence and "both pools on h200" in sentence
    frame = ch9.picks_frame(single)
    assert list(frame["deployment"]) == [single.row(p.row)["deployment"] for p in single.picks]


def test_the_chapter_compares_the_serving_modes_and_prints_runnable_serve_lines() -> None:
    kwargs = dict(model="gpt-oss-120b", gpu="h200", isl=1024, osl=1024, num_speculative_tokens=0,
                  plan={"max_gpus": 8})
    p = ch9.timed_plan(ch9.plan_settings(**kwargs), ch9.plan_slas({"min_tps_per_user": [50]})).plan
    text = ch9.comparison_sentences(p)
    assert "wins" in text and "x the best" in text
    assert set(ch9.frontier_frame(p)["mode"]) <= {"agg", "disagg"} and "mode" in ch9.picks_frame(p)
    row = ch9.middle_pick(p)
    lines = ch9.serve_lines(ch9.recipe_texts(p, row)["serve"]).splitlines()
    assert lines and all("vllm serve openai/gpt-oss-120b" in line for line in lines)
    assert all(line.startswith("CUDA_VISIBLE_DEVICES=") for line in lines)


def test_a_plan_of_aggregated_servers_only_reads_whole() -> None:
    """Llama-3.1-70B in BF16 (about 141 GB of weights) on 4 H100s: a TP4 server fits, but a prefill/decode pair
    needs two engines of at least TP4, 8 GPUs. The plan is aggregated rows only (it refused the budget before);
    every chapter-9 sentence that weighs a disaggregated row says there is none and why, and the tables show
    no KV transfer for an aggregated row rather than a transfer of 0."""
    kwargs = dict(model="llama-3.1-70b", gpu="h100", isl=8192, osl=1024, num_speculative_tokens=0,
                  plan={"max_gpus": 4})
    p = ch9.timed_plan(ch9.plan_settings(**kwargs), ch9.plan_slas({"min_tps_per_user": [20, 50]})).plan
    assert set(p.table["mode"]) == {"agg"} and p.no_disagg is not None and "8 GPUs" in p.no_disagg
    assert ch9.best_disaggregated(p) is None
    assert ch9.middle_pick(p, disaggregated=True) is None
    shares = ch9.share_numbers(ch9.link_worked(ch9.article_request_bytes()), None)
    assert p.no_disagg in ch9.share_sentence(shares, p)
    assert ch9.largest_share_clause(p).startswith("This plan moves no KV cache")
    assert "nothing crosses a link" in ch9.transfer_sentence(p)
    assert len(ch9.transfer_table(p)) == 0
    assert ch9.picks_frame(p)["kv_transfer_share"].isna().all()
    assert ch9.frontier_frame(p)["kv_transfer_ms"].isna().all()
    assert "no disaggregated deployment fits 4 GPUs" in ch9.comparison_sentences(p)
    assert "0 disaggregated deployments that fit the budget (4 GPUs are fewer" in ch9.search_sentence(
        ch9.timed_plan(ch9.plan_settings(**kwargs), ch9.plan_slas({"min_tps_per_user": [20]})))
