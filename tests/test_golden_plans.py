"""``pdtune state`` against vLLM 0.33.0's own KV planner, for every bundled model at TP 1, 2, 4 and 8.

``data/vllm/golden-plans.json`` was written by ``make golden-plans`` (``scripts/golden_plans.py``): pdtune's
per-layer specs handed to ``get_kv_cache_groups`` and ``get_kv_cache_configs`` of
``vllm/v1/core/kv_cache_planning.py``, 40 GiB of KV memory, on the CPU platform with the CUDA platform's
answers passed deliberately (the hybrid KV-cache manager supported, async scheduling on; see the script and
``data/vllm/README.md``). Each case's groups (layers, block size, blocks per request, spec kind), blocks per
request and ``num_blocks`` must equal what ``pdtune state`` prints. :data:`DIFFERENT` lists the cases that may
differ, each with the reason; it is empty when every case agrees.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pdtune.cli import main
from pdtune.guarded import read_json
from pdtune.model import load_model
from pdtune.paths import data_dir
from pdtune.state import plan_state

GOLDEN = data_dir() / "vllm" / "golden-plans.json"
DATA = read_json(GOLDEN)
CASES = DATA["cases"]

#: (model, tp) -> why pdtune and vLLM's planner differ there. Empty: every recorded case agrees.
DIFFERENT: dict[tuple[str, int], str] = {}

#: vLLM's spec class -> the coarse kind both sides name (a UniformTypeKVCacheSpecs group mixes pages of one type).
VLLM_KIND = {"FullAttentionSpec": "full", "MLAAttentionSpec": "full", "SlidingWindowSpec": "sliding",
             "ChunkedLocalAttentionSpec": "chunked", "MambaSpec": "state", "UniformTypeKVCacheSpecs": None}


def _pdtune_kind(kind: str) -> str:
    return {"full_attention": "full", "mla": "full", "sliding_attention": "sliding",
            "chunked_attention": "chunked"}.get(kind, "state")


def _ids(case: dict) -> str:
    return f"{case['model']}-tp{case['tp']}"


def test_every_bundled_model_at_every_tp_is_recorded() -> None:
    models = sorted(p.name for p in (data_dir() / "models").iterdir() if (p / "config.json").is_file())
    assert sorted({c["model"] for c in CASES}) == models
    assert Counter(c["model"] for c in CASES) == {m: 4 for m in models}
    assert DATA["vllm_version"] == "0.33.0" and DATA["kv_memory_bytes"] == 40 * 1024**3


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_pdtune_state_matches_vllms_planner(case: dict, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["state", case["model"], "--tp", str(case["tp"]), "--max-model-len", str(case["max_model_len"]),
            "--no-prefix-caching", "--max-num-batched-tokens", str(case["max_num_batched_tokens"]),
            "--kv-cache-dtype", case["kv_cache_dtype"], "--kv-cache-gib", "40", "--vllm", "0.33", "--json"]
    status = main(argv)
    out = capsys.readouterr()
    if "pdtune_refuses" in case:  # recorded with pdtune's reason (heads that do not divide): still refused
        assert status == 2 and case["pdtune_refuses"].split(":")[0] in out.err
        return
    assert "vllm_error" not in case, f"vLLM's planner failed on pdtune's specs: {case.get('vllm_error')}"
    key = (case["model"], case["tp"])
    if key in DIFFERENT:
        pytest.xfail(DIFFERENT[key])
    assert status == 0, out.err
    got = json.loads(out.out)
    want = case["vllm"]
    plan = plan_state(load_model(case["model"]), max_model_len=case["max_model_len"], tp=case["tp"], vllm="0.33",
                      prefix_caching=False, max_num_batched_tokens=case["max_num_batched_tokens"],
                      kv_cache_dtype=case["kv_cache_dtype"])
    # DeepSeek-V3.2's indexer key cache is a layer of its own in vLLM (DeepseekV32IndexerCache, in the MLA
    # layers' UniformTypeKVCacheSpecs group); pdtune keeps its page in the MLA layer's slot (MLAPage): two vLLM
    # layer names per pdtune slot, the same bytes.
    names_per_slot = 2 if plan.model.indexer is not None else 1
    ours = Counter((_pdtune_kind(str(g.kind)), (len(g.layers) - g.padding_layers) * names_per_slot,
                    g.page.block_size, g.blocks_per_request) for g in plan.groups)
    theirs = Counter((VLLM_KIND[g["spec"]], g["layers"], g["block_size"], g["blocks_per_request"])
                     for g in want["groups"])
    if any(VLLM_KIND[g["spec"]] is None for g in want["groups"]):  # one group of one type: compare without kind
        ours = Counter(k[1:] for k in ours.elements())
        theirs = Counter(k[1:] for k in theirs.elements())
    assert ours == theirs
    assert got.get("hybrid_kv_cache_manager", True) == want["hybrid_kv_cache_manager"]
    assert got["pool_blocks_per_request"] == want["blocks_per_request"]
    assert got["num_blocks"] == want["num_blocks"]
    assert got["max_concurrency"] == pytest.approx(want["max_concurrency"], rel=1e-12)


def test_the_recorded_platform_answers_are_said() -> None:
    assert "support_hybrid_kv_cache() = True" in DATA["platform"] and "async" in DATA["platform"]
    assert "pdtune's" in DATA["layer_specs"]
    for case in CASES:
        if "vllm" in case:
            # async on, 8192 tokens per step: two batches in flight, as pdtune assumes for 0.33
            assert case["vllm"]["max_in_flight_tokens"] == 2 * case["max_num_batched_tokens"]
