"""Every rule a chapter page shows as its own short function equals the package's, over many inputs.

A page writes a core rule as a few lines of plain Python (``notebooks/README.md``, "A chapter is a lesson"),
so a reader sees the formula as code; the chapter's numbers still come from ``pdtune``. Here each page
function (read back by :mod:`pagecode`, run alone) is called beside the package on the same inputs drawn by
hypothesis (or read from the shipped scorecard's rows), and the two must agree exactly (chapter 8's
percentiles to 12 significant digits: :func:`_percentiles` says why). The package side goes through the public path the chapters use
(``plan_state`` on a model built from a config, a ``Waterfall``, ``capture_sizes`` ...), so the page cannot
drift from vLLM's arithmetic as ``pdtune`` follows it.

To add a rule: define it in the page, add a :class:`PageRule` to :data:`RULES` with the package's way of
computing the same thing and a strategy for its arguments. A page function not listed here fails
:func:`test_every_page_function_is_held_to_the_package`; a lesson page without one fails
:func:`test_every_lesson_page_shows_a_rule` unless it is in :data:`RULES_PENDING`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagecode import defined_names, page_functions, pages
from pdtune.chapters import trust as ch8
from pdtune.chapters import scheduler as sched
from pdtune.frontier.ratios import count_pairs
from pdtune.memory import (Waterfall, capture_sizes, cudagraph_estimate, cudagraph_plan, max_utilization,
                           weights_per_gpu)
from pdtune.model import ModelSpec, load_model
from pdtune.perfmodel.heldout import fold_of
from pdtune.perfmodel.replicates import replicate_error
from pdtune.paramcount import count_parameters, weight_bytes
from pdtune.model.load import spec_from_config
from pdtune.state import plan_state
from pdtune.versions import at_least


@dataclass(frozen=True)
class PageRule:
    page: str  # notebooks/<page>.md
    name: str  # the function the page defines
    inputs: st.SearchStrategy[dict[str, Any]]  # one case: what both sides are computed from
    call: Callable[[Callable[..., Any], dict[str, Any]], Any]  # the page function applied to a case
    package: Callable[[dict[str, Any]], Any]  # the same quantity for the case, computed by pdtune

    @property
    def id(self) -> str:
        return f"{self.page}:{self.name}"


# --- models built from configs, so the package side goes through load and plan as a chapter does -----------

_KV_DTYPE = {1: "fp8", 2: "bfloat16"}


def _dense(layers: int, kv_heads: int, head_dim: int, groups: int) -> ModelSpec:
    heads = kv_heads * groups
    return spec_from_config({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": heads * head_dim,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "num_hidden_layers": layers, "intermediate_size": 4 * heads * head_dim, "vocab_size": 32000,
        "max_position_embeddings": 1 << 20, "torch_dtype": "bfloat16"}, name="dense-case")


def _hybrid(c: dict[str, Any]) -> ModelSpec:
    """Qwen3-Next's bundled config with the case's GDN and attention shapes and depth (one layer in 4 attention)."""
    raw = dict(load_model("qwen3-next-80b-a3b").extra["config"])
    raw.update(num_hidden_layers=4 * c["quarters"], num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"],
               num_attention_heads=c["kv_heads"] * 4, linear_num_key_heads=c["key_heads"],
               linear_key_head_dim=c["key_dim"], linear_num_value_heads=c["key_heads"] * c["value_ratio"],
               linear_value_head_dim=c["value_dim"], linear_conv_kernel_dim=c["conv_kernel"], full_attention_interval=4)
    return spec_from_config(raw, name="hybrid-case")


dense_cases = st.fixed_dictionaries({
    "layers": st.integers(1, 96), "kv_heads": st.sampled_from([1, 2, 4, 8, 16]),
    "head_dim": st.sampled_from([64, 128, 256]), "groups": st.sampled_from([1, 2, 4, 8]),
    "dtype_bytes": st.sampled_from([1, 2]), "tokens": st.integers(1, 200_000), "tp": st.sampled_from([1, 2, 4, 8, 16]),
})
hybrid_cases = st.fixed_dictionaries({
    "quarters": st.integers(1, 24), "kv_heads": st.sampled_from([1, 2, 4]), "head_dim": st.sampled_from([128, 256]),
    "key_heads": st.sampled_from([4, 8, 16]), "key_dim": st.sampled_from([64, 128]),
    "value_ratio": st.sampled_from([1, 2, 4, 8]), "value_dim": st.sampled_from([64, 128]),
    "conv_kernel": st.sampled_from([2, 4]), "dtype_bytes": st.sampled_from([1, 2]), "tokens": st.integers(1, 200_000),
})


_GiB = 2**30
memory_cases = st.fixed_dictionaries({
    "total": st.integers(16 * _GiB, 300 * _GiB), "u": st.floats(0.5, 0.99),
    "non_torch": st.integers(0, 4 * _GiB), "weights": st.integers(0, 200 * _GiB),
    "activation": st.integers(0, 4 * _GiB), "graphs": st.integers(0, 12 * _GiB),
    "vllm": st.sampled_from(["0.20", "0.26.1", "0.33"]),
})
reserve_cases = st.fixed_dictionaries({
    "total": st.floats(16, 300), "context": st.floats(0, 8), "overrun": st.floats(0, 8)})
_WEIGHT_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v3", "qwen3.8-2.4t", "glm-4.7",
                  "mixtral-8x7b", "qwen3-next-80b-a3b")


def _fits_kv_heads(c: dict[str, Any]) -> bool:
    a = c["spec"].attention
    return a is None or a.num_kv_heads >= c["tp"]


weight_cases = st.fixed_dictionaries({
    "spec": st.sampled_from(_WEIGHT_MODELS).map(load_model), "tp": st.sampled_from([1, 2, 4, 8]),
    "ep": st.sampled_from([1, 2, 4, 8, 16, 32]),
}).filter(_fits_kv_heads)


# One sequence with 2, 4, 5 or 6 draft tokens captures nothing vLLM accepts (no multiple of 1 + K fits): left out.
graph_cases = st.fixed_dictionaries({"seqs": st.integers(2, 2048), "k": st.integers(0, 7)})
estimate_cases = st.fixed_dictionaries({
    "first": st.integers(0, 16 * _GiB), "increment": st.integers(0, 512 * 2**20), "graphs": st.integers(1, 600),
})


_CAPACITY_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "qwen3.8-2.4t", "qwen3-next-80b-a3b", "deepseek-v3",
                    "gemma-3-27b-it", "jamba-1.5-mini")


@st.composite
def capacity_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A plan of a bundled model (dense, hybrid, MLA, sliding window, Mamba) under some vLLM line, and a KV cache."""
    spec = load_model(draw(st.sampled_from(_CAPACITY_MODELS)))
    tp = draw(st.sampled_from([1, 2, 4]))
    plan = plan_state(spec, tp=tp, max_model_len=draw(st.integers(256, 32_768)), kv_cache_dtype="fp8",
                      vllm=draw(st.sampled_from(["0.11", "0.20", "0.21", "0.26.1", "0.33"])),
                      num_speculative_tokens=draw(st.sampled_from([0, 1])) if spec.num_mtp_layers else 0)
    return {"plan": plan, "kv": draw(st.integers(0, 200 * _GiB))}


def _plan(spec: ModelSpec, c: dict[str, Any], **kwargs: Any) -> Any:
    return plan_state(spec, max_model_len=c["tokens"], kv_cache_dtype=_KV_DTYPE[c["dtype_bytes"]], vllm="0.11",
                      **kwargs)


def _dense_plan(c: dict[str, Any], tp: int = 1) -> Any:
    return _plan(_dense(c["layers"], c["kv_heads"], c["head_dim"], c["groups"]), c, tp=tp)


def _gdn_args(c: dict[str, Any]) -> tuple[int, ...]:
    return (c["key_heads"], c["key_dim"], c["key_heads"] * c["value_ratio"], c["value_dim"], c["conv_kernel"], 2)


def _attn_bytes(c: dict[str, Any]) -> int:
    return 2 * c["kv_heads"] * c["head_dim"] * c["dtype_bytes"]


def _page(page: str) -> dict[str, Callable[..., Any]]:
    return page_functions(page)


# --- chapters 8 and 9: the scorecard's rows, a plan's budget, links and recipes ------------------------------


@cache
def _scored_rows() -> Any:
    """Every scored row of the shipped scorecard (data/perfmodel/validation/): prediction, measurement, error."""
    return ch8.scorecard().rows


def _error_case(i: int) -> dict[str, Any]:
    """Row ``i`` (modulo) of the scorecard with one of its predictions: uncalibrated or held-out calibrated."""
    rows = _scored_rows()
    kinds = [(k, m) for k in ("lomo", "calibrated") for m in ("tpot_ms_p50", "ttft_ms_p50")]
    kind, metric = kinds[i % len(kinds)]
    scored = rows[rows[f"{kind}_{metric}"].notna()]
    r = scored.iloc[(i // len(kinds)) % len(scored)]
    return {"predicted": float(r[f"{kind}_{metric}"]), "measured": float(r[f"measured_{metric}"]),
            "error": float(r[f"{kind}_{metric}_error"])}


def _pair_case(i: int) -> dict[str, Any]:
    """One model x GPU of the scorecard, its deployments and one fold (the scorecard's own split)."""
    rows = _scored_rows()
    pairs = sorted(rows.groupby(["model_key", "gpu_name"]).groups)
    frame = rows[(rows["model_key"] == pairs[i % len(pairs)][0]) & (rows["gpu_name"] == pairs[i % len(pairs)][1])]
    fold = (i // len(pairs)) % 4
    return {"deployments": sorted(set(frame["deployment"])), "fold": fold,
            "split": (sorted(set(frame.loc[frame["fold"] != fold, "deployment"])),
                      sorted(set(frame.loc[frame["fold"] == fold, "deployment"])))}


budget_cases = st.fixed_dictionaries({"gp": st.sampled_from([1, 2, 4, 8, 16]), "gd": st.sampled_from([1, 2, 4, 8, 16]),
                                      "budget": st.integers(2, 96)}).filter(lambda c: c["gp"] + c["gd"] <= c["budget"])
link_cases = st.fixed_dictionaries({"gpu": st.sampled_from(["gb300", "gb200", "b200", "b300", "h200", "h100"]),
                                    "scope": st.sampled_from(["nvlink", "scale_out"]),
                                    "bytes": st.integers(0, 64 * _GiB)})
share_cases = st.fixed_dictionaries({"prefill": st.floats(1e-3, 1e6), "kv": st.floats(0, 1e4)})
seqs_cases = st.fixed_dictionaries({
    "role": st.sampled_from(["decode", "aggregated"]),
    "topology": st.sampled_from(["TP4", "TEP8", "TP2DP4+EP", "TP4DP8+EP", "DP16+EP", "TP16DP2+EP", "TP1PP6+EP"]),
    "requests": st.integers(0, 20_000)})


def _link_ms(c: dict[str, Any]) -> float:
    from pdtune.transfer import load_link

    return 1000 * load_link(c["gpu"], c["scope"]).seconds(c["bytes"])


def _recipe_seqs(c: dict[str, Any]) -> int:
    """``--max-num-seqs`` of a recipe's decode or aggregated engine (pdtune.recipe, as row_engines builds it)."""
    from pdtune.recipe import _engine

    settings = {"max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8"}
    engine = _engine(c["role"], c["topology"], 0, c["requests"], settings, max_model_len=9216 + 16,
                     block_size=None, kv_transfer=c["role"] == "decode")
    return engine.max_num_seqs


def _link_args(c: dict[str, Any]) -> tuple[int, float, float]:
    from pdtune.transfer import load_link

    link = load_link(c["gpu"], c["scope"])
    return c["bytes"], link.bandwidth, link.latency_s


def _dp(topology: str) -> int:
    from pdtune.topology import parse_topology

    return parse_topology(topology).dp


def _share(c: dict[str, Any]) -> float:
    from pdtune.chapters import plan as ch9

    return ch9.share_numbers({"nvlink-ms": c["kv"], "nic-ms": c["kv"]},
                             {"prefill_ttft_ms": c["prefill"], "deployment": "d"})["nvlink-share"]


def _percentiles(errors: list[float]) -> Any:
    """The package's median and p90 |error| (%), to 12 significant digits: numpy interpolates between the same
    two sorted values as the page, but from the upper one when the fraction is past one half, which can move
    the last bit."""
    from pdtune.perfmodel.validation import error_percentiles

    return pytest.approx(error_percentiles(errors), rel=1e-12, abs=1e-12)


RULES: list[PageRule] = [
    # chapter 1: a dense model (notebooks/01_state.md)
    PageRule("01_state", "kv_bytes_per_token", dense_cases,
             lambda f, c: f(c["kv_heads"], c["head_dim"], c["dtype_bytes"]),
             lambda c: _dense_plan(c).per_layer_bytes()["attention_per_token"]),
    PageRule("01_state", "request_bytes", dense_cases,
             lambda f, c: f(c["tokens"], c["layers"], _attn_bytes(c)),
             lambda c: _dense_plan(c).bytes_per_request),
    # chapter 1: a hybrid (notebooks/01_state_hybrid.md); GDN state in bfloat16, as Qwen3-Next's config says
    PageRule("01_state_hybrid", "gdn_state_bytes", hybrid_cases,
             lambda f, c: f(*_gdn_args(c)),
             lambda c: _plan(_hybrid(c), c).recurrent_page.state_bytes),
    PageRule("01_state_hybrid", "hybrid_block", hybrid_cases,
             lambda f, c: f(_page("01_state_hybrid")["gdn_state_bytes"](*_gdn_args(c)), _attn_bytes(c)),
             lambda c: _plan(_hybrid(c), c).block_tokens),
    PageRule("01_state_hybrid", "hybrid_pages", hybrid_cases,
             lambda f, c: f(c["tokens"], _plan(_hybrid(c), c).block_tokens, c["quarters"], 3 * c["quarters"]),
             lambda c: _plan(_hybrid(c), c).blocks_per_request),
    # chapter 2: the waterfall (notebooks/02_memory.md); vLLM 0.20+ rounds the requested memory up
    PageRule("02_memory", "kv_cache_bytes", memory_cases,
             lambda f, c: f(c["total"], c["u"], c["non_torch"], c["weights"], c["activation"], c["graphs"]),
             lambda c: Waterfall(total=c["total"], gpu_memory_utilization=c["u"], weights=c["weights"],
                                 activation_peak=c["activation"], non_torch=c["non_torch"],
                                 cudagraph_estimate=c["graphs"], source="case", version=c["vllm"]).kv_cache()),
    # chapter 2: weights per GPU (notebooks/02_memory_weights.md), for layouts that keep one KV head per rank
    PageRule("02_memory_weights", "weights_per_gpu", weight_cases,
             lambda f, c: f(weight_bytes(c["spec"], count_parameters(c["spec"]).main).by_component, c["tp"],
                            c["ep"]),
             lambda c: weights_per_gpu(c["spec"], tp=c["tp"], ep=c["ep"]).total),
    # chapter 2: how far the utilization may go (notebooks/02_memory_reserve.md)
    PageRule("02_memory_reserve", "max_utilization", reserve_cases,
             lambda f, c: f(c["total"], c["context"], c["overrun"]),
             lambda c: max_utilization(c["total"], c["context"], c["overrun"])),
    # chapter 3: the capture list (notebooks/03_graphs.md), as the article's decode engines set it up
    PageRule("03_graphs", "capture_sizes", graph_cases,
             lambda f, c: f(c["seqs"]),
             lambda c: capture_sizes(c["seqs"], c["seqs"] + 16)),
    PageRule("03_graphs", "with_speculation", graph_cases,
             lambda f, c: f(_page("03_graphs")["capture_sizes"](c["seqs"] * (1 + c["k"])), c["k"]),
             lambda c: list(cudagraph_plan(c["seqs"], num_speculative_tokens=c["k"]).capture_sizes)),
    # chapter 3: the estimate (notebooks/03_graphs_estimate.md)
    PageRule("03_graphs_estimate", "graph_estimate", estimate_cases,
             lambda f, c: f(c["first"], c["increment"], c["graphs"]),
             lambda c: cudagraph_estimate(c["first"], c["increment"], c["graphs"])),
    # chapter 4: vLLM's count (notebooks/04_concurrency.md) and its log line (04_concurrency_layouts.md)
    PageRule("04_concurrency", "max_concurrency", capacity_cases(),
             lambda f, c: f(c["kv"], c["plan"].group_size, c["plan"].block_bytes, c["plan"].pool_blocks_per_request),
             lambda c: c["plan"].capacity(c["kv"]).max_concurrency),
    PageRule("04_concurrency_layouts", "logged_tokens", capacity_cases(),
             lambda f, c: f(c["plan"].capacity(c["kv"]).num_blocks, len(c["plan"].groups),
                            c["plan"].min_block_tokens, c["plan"].capacity(c["kv"]).max_concurrency,
                            c["plan"].max_model_len, at_least(c["plan"].semantics.version, "0.21")),
             lambda c: c["plan"].capacity(c["kv"]).kv_cache_tokens),
    # chapter 1: one TP rank (notebooks/01_state_vllm.md)
    PageRule("01_state_vllm", "kv_heads_per_rank", dense_cases.filter(lambda c: c["tp"] <= c["kv_heads"] * c["groups"]),
             lambda f, c: f(c["kv_heads"], c["tp"]),
             lambda c: _dense_plan(c, tp=c["tp"]).per_layer_bytes()["attention_per_token"]
             // (2 * c["head_dim"] * c["dtype_bytes"])),
    # chapter 8: one prediction's error (notebooks/08_trust.md), on every scored row of the shipped scorecard
    PageRule("08_trust", "relative_error", st.integers(0, 10**6).map(_error_case),
             lambda f, c: f(c["predicted"], c["measured"]), lambda c: c["error"]),
    PageRule("08_trust", "median_and_p90",
             st.fixed_dictionaries({"errors": st.lists(st.floats(-0.999, 20.0), min_size=1, max_size=80)}),
             lambda f, c: f(c["errors"]), lambda c: _percentiles(c["errors"])),
    # chapter 8: the regimes (notebooks/08_trust_regimes.md) and the held-out folds (08_trust_calibration.md)
    PageRule("08_trust_regimes", "concurrency_band", st.fixed_dictionaries({"c": st.integers(1, 100_000)}),
             lambda f, c: f(c["c"]), lambda c: ch8.concurrency_band(c["c"])),
    # two runs of one point (08_trust_regimes.md): each run against the median of the others
    PageRule("08_trust_regimes", "replicate_error",
             st.fixed_dictionaries({"run": st.floats(1.0, 1e5),
                                    "others": st.lists(st.floats(1.0, 1e5), min_size=1, max_size=8)}),
             lambda f, c: f(c["run"], c["others"]), lambda c: replicate_error(c["run"], c["others"])),
    PageRule("08_trust_calibration", "fold_of",
             st.fixed_dictionaries({"key": st.text(max_size=80), "folds": st.integers(1, 8)}),
             lambda f, c: f(c["key"], c["folds"]),
             lambda c: fold_of(c["key"], c["folds"])),
    PageRule("08_trust_calibration", "held_out", st.integers(0, 10**6).map(_pair_case),
             lambda f, c: f(c["deployments"], c["fold"]), lambda c: c["split"]),
    # chapter 8: Little's law for the queue above the KV limit (08_trust_scheduler.md)
    PageRule("08_trust_scheduler", "queued_ttft",
             st.fixed_dictionaries({"t": st.floats(0, 1e5), "c": st.integers(1, 10_000), "n": st.integers(1, 5_000),
                                    "b": st.floats(0, 1e6)}),
             lambda f, c: f(c["t"], c["c"], c["n"], c["b"]),
             lambda c: sched.queued_ttft_ms(c["t"], c["c"], c["n"], c["b"])),
    # chapter 9: the budget (notebooks/09_plan.md), the transfer (09_plan_transfer.md), the recipe (09_plan_launch.md)
    # the plan counts every (x, y) within the budget without building them (pdtune.frontier.ratios.count_pairs)
    PageRule("09_plan", "engine_counts", budget_cases,
             lambda f, c: len(f(c["gp"], c["gd"], c["budget"])), lambda c: count_pairs(c["gp"], c["gd"], c["budget"])),
    PageRule("09_plan_transfer", "transfer_ms", link_cases, lambda f, c: f(*_link_args(c)), _link_ms),
    PageRule("09_plan_transfer", "ttft_share", share_cases, lambda f, c: f(c["prefill"], c["kv"]), _share),
    PageRule("09_plan_launch", "max_num_seqs", seqs_cases,
             lambda f, c: f(c["requests"], _dp(c["topology"])), _recipe_seqs),
]

#: Functions a page defines that are not rules (an explorer's callback, say), with why.
NOT_RULES: dict[tuple[str, str], str] = {
    ("05_prefill", "reload"): "the live explorer's callback: it calls the package, it states no rule",
}

#: Lesson pages that show no rule of their own yet, each with who is writing it. A page listed here must
#: still have none (else take it off the list).
RULES_PENDING: dict[str, str] = {
    "07_frontier_measured": "reads measured frontiers with 07_frontier's upper_envelope",
}


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_the_page_function_equals_the_package(rule: PageRule) -> None:
    shown = page_functions(rule.page)[rule.name]

    @settings(max_examples=120, deadline=None)
    @given(rule.inputs)
    def agree(case: dict[str, Any]) -> None:
        assert rule.call(shown, case) == rule.package(case), case

    agree()


def _held_in_chapters_5_7() -> set[tuple[str, str]]:
    """The functions of chapters 5-7, each held to the package in tests/test_chapters_5_7_rules.py."""
    from test_chapters_5_7_rules import PAGE_FUNCTIONS

    return {(page, name) for page, names in PAGE_FUNCTIONS.items() for name in names}


def test_every_page_function_is_held_to_the_package() -> None:
    listed = {(r.page, r.name) for r in RULES} | set(NOT_RULES) | _held_in_chapters_5_7()
    unlisted = [f"{page}:{name}" for page in pages() for name in defined_names(page) if (page, name) not in listed]
    assert unlisted == [], f"page functions no test compares with the package: {unlisted}"


def test_every_lesson_page_shows_a_rule() -> None:
    with_rules = {r.page for r in RULES} | {page for page, _ in _held_in_chapters_5_7()}
    missing = [p for p in pages() if p not in with_rules and p.split("_")[0] not in RULES_PENDING_CHAPTERS()
               and p not in RULES_PENDING]
    assert missing == [], f"lesson pages without a page rule: {missing}"
    done = sorted(p for p in RULES_PENDING if p in with_rules)
    assert done == [], f"these pages show a rule now, take them off RULES_PENDING: {done}"


def RULES_PENDING_CHAPTERS() -> set[str]:  # noqa: N802 - reads as the constant it derives
    """Chapter numbers of pending pages: a pending chapter's section pages are pending too."""
    return {p.split("_")[0] for p in RULES_PENDING}
