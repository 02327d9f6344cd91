"""The workbook on a large MoE model pdtune does not bundle: MiMo-V2-Flash from its public config.json.

The fixture (tests/fixtures/configs/mimo-v2-flash, source in its README) has full-attention and sliding-window
layers with different KV heads (4 and 8) and a V head narrower than K (128 vs 192), so its two kinds of page
differ in size. Each test below is one defect the workbook run on it showed, called at the function the
chapter uses (no notebook is executed here).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pdtune.capacity import article_request, capacity_by_version, topology_capacity
from pdtune.chapters import state as ch1
from pdtune.chapters.display import defaults_note
from pdtune.chapters.state_text import model_line, recurrent_sentence, request_sentence
from pdtune.errors import InputError
from pdtune.memory import weights_per_gpu
from pdtune.model import LayerKind, load_model
from pdtune.paramcount import count_parameters
from pdtune.state import plan_state
from pdtune.workbook import load_parameters
from pdtune.workbook.summary import key_numbers, summary_record, to_markdown

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "fixtures" / "configs" / "mimo-v2-flash" / "config.json"
TOKENS = 8192 + 1024


@pytest.fixture(scope="module")
def spec():
    return load_model(CONFIG)


def test_loads_with_each_layer_kind_its_own_heads(spec):
    # vLLM 0.33 registers MiMoV2FlashForCausalLM; before this fix pdtune refused it ("unknown architecture").
    assert spec.model_type == "mimo_v2_flash"
    assert spec.count(LayerKind.FULL_ATTENTION) == 9 and spec.count(LayerKind.SLIDING_ATTENTION) == 39
    assert [i for i, k in enumerate(spec.layer_kinds) if k is LayerKind.FULL_ATTENTION] == [0, 5, 11, 17, 23, 29,
                                                                                          35, 41, 47]
    full, swa = spec.attention_for(LayerKind.FULL_ATTENTION), spec.attention_for(LayerKind.SLIDING_ATTENTION)
    assert (full.num_heads, full.num_kv_heads, full.head_dim, full.v_head_dim) == (64, 4, 192, 128)
    assert (swa.num_heads, swa.num_kv_heads, swa.head_dim, swa.v_head_dim) == (64, 8, 192, 128)
    assert swa.sliding_window == 128
    assert spec.attention_chunk_size is None  # vLLM strips the config's attention_chunk_size 128 (HMA stays on)
    assert spec.moe.num_experts == 256 and spec.moe.experts_per_token == 8
    assert spec.moe_layers == (False,) + (True,) * 47 and spec.intermediate_size == 16384
    # The model card's 309 B parameters, 15 B active per token.
    params = count_parameters(spec)
    assert round(params.main.total / 1e9) == 309 and round(params.active_per_token / 1e9) == 15


def test_kv_bytes_per_token_match_vllm_by_hand(spec):
    # vLLM 0.33 model_executor/models/mimo_v2.py, MiMoV2FlashDecoderLayer.__init__ and MiMoV2Attention.__init__:
    # a layer with hybrid_layer_pattern[i] == 1 builds Attention(num_heads=64 // tp, head_size=swa_head_dim 192,
    # num_kv_heads=max(1, swa_num_key_value_heads 8 // tp), head_size_v=swa_v_head_dim 128,
    # per_layer_sliding_window=sliding_window_size 128); a 0 layer the same with num_key_value_heads 4,
    # head_dim 192, v_head_dim 128 and no window. layers/attention/attention.py, Attention.get_kv_cache_spec,
    # gives FullAttentionSpec / SlidingWindowSpec(num_kv_heads, head_size, head_size_v), whose page
    # (v1/kv_cache_interface.py, AttentionSpec.real_page_size_bytes) is
    # block_size * num_kv_heads * (head_size + head_size_v) * dtype bytes. So per token and layer, bfloat16, TP1:
    #   full:    4 * (192 + 128) * 2 = 2,560 B      sliding: 8 * (192 + 128) * 2 = 5,120 B
    # and with an fp8 KV cache (1 B) half that: 1,280 B and 2,560 B. The 9 full layers hold every token:
    #   9 * 2,560 = 23,040 B per token of context (bf16); 9 * 1,280 = 11,520 B (fp8).
    # At TP8 both kinds keep one KV head per rank (4 < 8 is replicated): 1 * 320 * 1 = 320 B per token, fp8.
    for dtype, full_b, swa_b in (("bfloat16", 2560, 5120), ("fp8", 1280, 2560)):
        plan = plan_state(spec, max_model_len=TOKENS, kv_cache_dtype=dtype, vllm="0.33")
        per_token = {s.page.kind: s.page.bytes_per_token for s in plan.layer_specs}
        assert per_token == {LayerKind.FULL_ATTENTION: full_b, LayerKind.SLIDING_ATTENTION: swa_b}
        assert 9 * per_token[LayerKind.FULL_ATTENTION] == {"bfloat16": 23040, "fp8": 11520}[dtype]
    tp8 = plan_state(spec, tp=8, max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.33")
    assert {s.page.bytes_per_token for s in tp8.layer_specs} == {320}
    # Unequal pages at TP1 (16 x 1,280 vs 16 x 2,560 B): unify_kv_cache_spec_page_size doubles the full block.
    fp8 = plan_state(spec, max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.33")
    blocks = {g.kind: g.page.block_size for g in fp8.groups}
    assert blocks == {LayerKind.FULL_ATTENTION: 32, LayerKind.SLIDING_ATTENTION: 16}


def test_kv_projection_weights_shard_per_layer_kind(spec):
    # At TP8 the full layers' 4 KV heads are replicated (a quarter of their k/v weights per rank), the sliding
    # layers' 8 split eight ways: 9 * 4 * 320 * 4096 / 4 + 39 * 8 * 320 * 4096 / 8 parameters, fp8-block bytes.
    kv = weights_per_gpu(spec, tp=8, ep=8).by_component["attention_kv"]
    expected = (9 * 4 * 320 * 4096 / 4 + 39 * 8 * 320 * 4096 / 8) * 4097 / 4096
    assert kv == pytest.approx(expected, abs=2)


def test_article_arithmetic_falls_back_when_0_11_cannot_plan(spec):
    # The workbook died before chapter 1 (summary.key_numbers -> topology_capacity planned with vLLM 0.11, which
    # cannot group pages of two sizes), then in seven chapters at their vllm="0.11" plans.
    with pytest.raises(InputError, match="different page sizes"):
        plan_state(spec, max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.11")
    plan, note = article_request(spec, max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.33")
    assert plan.semantics.version.startswith("0.33") and "cannot plan" in note
    assert ch1.arithmetic_line(spec, "0.33", quiet=True, max_model_len=TOKENS, kv_cache_dtype="fp8") == "0.33"
    qwen = load_model("qwen3.8-2.4t")  # a model 0.11 plans keeps the article's line
    assert ch1.arithmetic_line(qwen, "0.33", quiet=True, max_model_len=TOKENS, kv_cache_dtype="fp8") == "0.11"
    frame = topology_capacity(spec, ["TP8", "DP8+EP"], gpu_memory_gib=139.81, gpu_memory_utilization=0.9,
                              non_torch_gib=2.9, activation_peak_gib=1.83, cudagraph_estimate_gib=8.29,
                              max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.33", num_speculative_tokens=0)
    assert frame["requests_article"].notna().all() and (frame["requests_per_engine"] > 0).all()
    versions = ch1.version_plans(spec, max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.33",
                                 num_speculative_tokens=0)
    assert not any("0.11" in label for label in versions)
    lengths = ch1.length_sweep({"mimo": spec}, (1024, 4096), kv_cache_dtype="fp8")
    assert len(lengths) == 2
    by_line = capacity_by_version(spec, 10 * 2**30, ["0.11", "0.33"], tp=1, max_model_len=TOKENS,
                                  kv_cache_dtype="fp8")
    assert list(by_line["vllm"]) == ["0.33"] and "0.11" in by_line.attrs["cannot_plan"]
    with pytest.raises(InputError):  # no line plans it: refused, not an empty table
        capacity_by_version(spec, 10 * 2**30, ["0.11"], tp=1, max_model_len=TOKENS, kv_cache_dtype="fp8")


def test_state_sentences_fit_sliding_window_layers(spec):
    # Chapter 1 said "All 48 layers of mimo-v2-flash are attention: its state grows with every token."
    line = model_line(spec)
    assert "only 9 of them see every token" in line and "39 are sliding-window layers" in line and "128" in line
    assert "all of its state grows" not in recurrent_sentence(spec)
    assert model_line(load_model("llama-3.1-70b")).endswith("its state grows with every token.")


def test_request_sentence_uses_each_groups_own_block(spec):
    # Chapter 1 (hybrid page) said "About 86.93 MiB of it is the empty tail of the last attention block: 288
    # blocks of 16 tokens hold 4,608 token slots for 9,216 tokens": the full layers' block is 32 tokens, and the
    # "tail" was the sliding layers' blocks for the tokens in flight (16,384 with async scheduling), not waste.
    plan = plan_state(spec, max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.33")
    numbers = ch1.plan_numbers(plan)
    assert (numbers["attn-blocks"], numbers["attn-block"], numbers["slots"]) == (288, 32, 9216)
    tail = ch1.state_breakdown(plan).query("part == 'attention: empty tail of the last block'")["bytes"].sum()
    assert tail == 39 * 16 * 2560  # the one extra 16-token block of each sliding layer
    text = request_sentence(plan)
    assert "4,608" not in text and "32-token full-attention blocks" in text
    dense = plan_state(load_model("llama-3.1-8b"), max_model_len=TOKENS, kv_cache_dtype="fp8", vllm="0.11")
    assert "no block is left partly empty" in request_sentence(dense)


def test_summary_runs_and_prints_pages_with_thousands_separators(tmp_path):
    # The workbook stopped before any chapter (key_numbers planned the article's request with vLLM 0.11), and
    # summary.md said "28557 pages" beside "1,169,694,720 B".
    params_file = tmp_path / "mimo.yaml"
    params_file.write_text(f"title: MiMo-V2-Flash\nmodel: {CONFIG}\ngpu: h200\nisl: 8192\nosl: 1024\n"
                           "kv_cache_dtype: fp8\nvllm: '0.33'\nprefill_topologies: [TP8]\n"
                           "decode_topologies: [TP8, DP8+EP]\n")
    params = load_parameters(params_file)
    numbers = key_numbers(params.resolved)
    text = to_markdown(summary_record(numbers, params, []))
    assert "28,557 pages of 16-token blocks" in text
    assert "| TP8 | no | 36.19 |" in text  # 289 GiB of FP8 weights over 8 GPUs
    # Every number of the decode-engine table to two decimals, whole values too: Qwen3-Coder-480B's DP8+EP
    # engine holds a whole 1,116 MiB per request, which printed as "1,116" beside TP8's "139.50".
    record = summary_record(numbers, params, [])
    record["decode_engines"]["rows"][-1]["mib_per_request_rank"] = 1116.0
    text = to_markdown(record)
    assert "| 1,116.00 |" in text
    table = text.split("## KV cache and concurrency per decode engine", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[3:-1] for line in table.splitlines() if line.startswith(("| TP8 ", "| DP8+EP "))]
    assert len(rows) == 2 and all(re.fullmatch(r"[\d,]+\.\d\d", c.strip()) for row in rows for c in row), rows
    # The left-out values counted in words that agree with the count (once "1 parameters are", "1 of them are").
    carried = "non_torch_gib = 2.9: carried over from the article's setup"
    own = "mtp_acceptance = 0.25: the performance model's assumption"
    record["defaults_used"] = [carried]
    assert "1 parameter is not in the file; it is carried over" in to_markdown(record)
    assert "only if you confirm it. Give it in the file to replace it." in to_markdown(record)
    record["defaults_used"] = [carried, own]
    assert "2 parameters are not in the file; 1 of them is carried over" in to_markdown(record)
    assert "holds for your cluster only if you confirm it. Give them" in to_markdown(record)
    record["defaults_used"] = [carried, carried.replace("non_torch_gib = 2.9", "activation_peak_gib = 1.83")]
    assert "2 parameters are not in the file; all are carried over" in to_markdown(record)
    record["defaults_used"] = [own]
    assert "1 parameter is not in the file; none is carried over from the article's setup (" in to_markdown(record)
    # and a chapter's note of the values it uses the same way (chapter 2 uses both memory overheads)
    peak = carried.replace("non_torch_gib = 2.9", "activation_peak_gib = 1.83")
    title = {k: defaults_note(v, "02_memory").text.splitlines()[0] for k, v in (
        ("none", ["non_torch_gib = 2.9: from your cluster's log"]), ("one", [carried]), ("all", [carried, peak]),
        ("some", [carried, "activation_peak_gib = 1.83: from your cluster's log"]))}
    assert title == {"none": "Not from your parameters file: 1 value, none carried over from the article's setup:",
                     "one": "Not from your parameters file: 1 value, carried over from the article's setup:",
                     "all": "Not from your parameters file: 2 values, all carried over from the article's setup:",
                     "some": "Not from your parameters file: 2 values, 1 of them carried over from the article's "
                             "setup:"}


def test_plan_exercise_on_a_large_moe_model(tmp_path):
    # Chapter 9's exercise (half the budget) on this model: pdtune plan at 8 GPUs picks a deployment.
    out = subprocess.run([sys.executable, "-m", "pdtune.cli", "plan", str(CONFIG), "--gpu", "h200", "--max-gpus",
                          "8", "--isl", "8192", "--osl", "1024", "--min-tps-per-user", "20"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "mimo-v2-flash" in out.stdout and "nan" not in out.stdout.lower()
