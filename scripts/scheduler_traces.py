#!/usr/bin/env python3
"""Record vLLM's own scheduler, step by step, for ``pdtune.sim`` to replay (``make scheduler-traces``).

Runs in a virtual environment holding ``vllm`` (0.33.0; the Makefile creates ``.vllm-ref`` with ``pip install
vllm==0.33.0`` if it is missing) on a machine without a GPU. For each workload below it builds a ``VllmConfig``
(``DeviceConfig(device="cpu")``, a local folder holding the bundled ``config.json`` of a real model,
``skip_tokenizer_init=True``), the model's KV cache layer specs, grouped by vLLM's own ``get_kv_cache_groups``
into a ``KVCacheConfig`` of a chosen number of blocks, and vLLM's ``Scheduler`` (``AsyncScheduler`` with async
scheduling). It then drives the scheduler the way ``EngineCore`` does (``vllm/v1/engine/core.py``: ``step``,
or ``step_with_batch_queue`` with a queue of ``max_concurrent_batches``): new requests are added at the top of
each loop iteration (a *tick*), ``schedule()`` is called while the queue has room, and the oldest batch's
``ModelRunnerOutput`` goes to ``update_from_output``: one sampled token for every request whose step reaches
the end of its known tokens (``not is_prefill_chunk``), plus the accepted draft tokens with speculative
decoding (a fixed pseudo-random count per request and step; synchronous drafts through
``update_draft_token_ids``, as ``EngineCore.post_step``). Every call is written down: the tokens scheduled
per request, the draft tokens, the preempted requests, the free blocks, each request's blocks per group,
the running and waiting queues, the tokens generated and the requests finished.

The traces go to ``data/vllm/scheduler-traces/<workload>.json``; ``tests/test_sim_traces.py`` replays each
through ``pdtune.sim`` (``pdtune.sim.replay.replay``) and requires the same decisions at every call.

Usage: ``python scripts/scheduler_traces.py --out data/vllm/scheduler-traces [--only NAME ...]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMAT = "pdtune-scheduler-trace/1"

# --------------------------------------------------------------------------------------------- workloads
#
# Layers: (kind, count, params). Attention pages follow the model's config.json on one TP rank; the block sizes
# are pdtune.state.plan_state's for the same model and TP (tests/test_sim_traces.py checks the groups match).

LLAMA_8B = {"model": "llama-3.1-8b", "tp": 1, "layers": [("full", 32, {"block_size": 16, "num_kv_heads": 8, "head_size": 128})]}
# gpt-oss-120b at TP2: 36 layers alternating sliding window (128) and full attention, 8 KV heads / 2, head 64.
GPT_OSS = {"model": "gpt-oss-120b", "tp": 2, "layers": [
    ("alternate", 36, {"block_size": 16, "num_kv_heads": 4, "head_size": 64, "sliding_window": 128})]}
# Qwen3-Next-80B-A3B at TP4: 48 layers, every 4th full attention (2 KV heads -> 1 per rank, head 256) and the
# rest GatedDeltaNet (conv (3, 2048), SSM (8, 128, 128), bf16); pdtune's hybrid block: 272 tokens.
QWEN3_NEXT = {"model": "qwen3-next-80b-a3b", "tp": 4, "layers": [
    ("hybrid", 48, {"interval": 4, "block_size": 272, "num_kv_heads": 1, "head_size": 256,
                    "conv": [3, 2048], "ssm": [8, 128, 128]})]}


def _prompts(seed: int, n: int, lo: int, hi: int, olo: int, ohi: int, every: int = 1, start: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt": rng.randint(lo, hi), "max_tokens": rng.randint(olo, ohi), "tick": start + i * every}
            for i in range(n)]


WORKLOADS: list[dict] = [
    {"name": "chunked-prefill", "why": "chunked prefill under a 512-token budget, arrivals spread over ticks",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 512, "max_model_len": 4096},
     "async": False, "caching": True, "num_blocks": 2000,
     "requests": [{"prompt": p, "max_tokens": o, "tick": t} for p, o, t in
                  [(1500, 20, 0), (700, 12, 0), (300, 30, 0), (1200, 8, 3), (64, 25, 5), (900, 16, 5),
                   (2000, 10, 12), (100, 40, 20), (511, 5, 21), (513, 5, 21)]]},
    {"name": "kv-admission", "why": "KV-limited admission: whole prompts must fit (scheduler_reserve_full_isl)",
     **LLAMA_8B, "sched": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 2048},
     "async": False, "caching": True, "num_blocks": 300,
     "requests": [{"prompt": 1000, "max_tokens": 40, "tick": 0} for _ in range(12)]},
    {"name": "preemption", "why": "running requests outgrow the cache: the newest is preempted and recomputed, "
     "prefix caching finds its own blocks again", **LLAMA_8B,
     "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 1024},
     "async": False, "caching": True, "num_blocks": 110,
     "requests": [{"prompt": p, "max_tokens": 300, "tick": 0} for p in (200, 180, 220, 160, 240, 150)]},
    {"name": "preemption-async", "why": "preemption with async scheduling (outputs in flight become stale)",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 1024},
     "async": True, "caching": True, "num_blocks": 110,
     "requests": [{"prompt": p, "max_tokens": 300, "tick": 0} for p in (200, 180, 220, 160, 240, 150)]},
    {"name": "preemption-nocache", "why": "preemption with prefix caching off (recompute from scratch)",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 1024},
     "async": True, "caching": False, "num_blocks": 110,
     "requests": [{"prompt": p, "max_tokens": 300, "tick": 0} for p in (200, 180, 220, 160, 240, 150)]},
    {"name": "max-num-seqs", "why": "max_num_seqs = 3 caps running requests", **LLAMA_8B,
     "sched": {"max_num_seqs": 3, "max_num_batched_tokens": 1024, "max_model_len": 2048},
     "async": True, "caching": True, "num_blocks": 2000, "requests": _prompts(3, 10, 50, 600, 5, 30)},
    {"name": "async-arrivals", "why": "async scheduling with requests arriving while batches are in flight",
     **LLAMA_8B, "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096},
     "async": True, "caching": True, "num_blocks": 1500, "requests": _prompts(5, 24, 20, 2500, 1, 40, every=3)},
    {"name": "closed-loop", "why": "a closed loop of 6 clients: each sends its next request when one finishes",
     **LLAMA_8B, "sched": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 4096},
     "async": True, "caching": True, "num_blocks": 700,
     "closed_loop": {"clients": 6, "requests": 30, "prompt": [100, 1500], "max_tokens": [5, 60], "seed": 11}},
    {"name": "closed-loop-sync", "why": "the same closed loop without async scheduling", **LLAMA_8B,
     "sched": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 4096},
     "async": False, "caching": True, "num_blocks": 700,
     "closed_loop": {"clients": 6, "requests": 30, "prompt": [100, 1500], "max_tokens": [5, 60], "seed": 11}},
    {"name": "long-prefill-threshold", "why": "long_prefill_token_threshold = 256 caps each prompt's chunk",
     **LLAMA_8B, "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096,
                           "long_prefill_token_threshold": 256},
     "async": False, "caching": True, "num_blocks": 1500, "requests": _prompts(7, 12, 30, 1800, 2, 20, every=2)},
    {"name": "shared-prefix", "why": "prefix-cache hits on a shared 512-token prefix (two prefix groups)",
     **LLAMA_8B, "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096},
     "async": False, "caching": True, "num_blocks": 1500,
     "requests": [{"prompt": 512 + 40 * i, "max_tokens": 10, "tick": i // 2, "prefix": i % 2, "prefix_len": 512}
                  for i in range(10)]},
    {"name": "spec-ngram", "why": "speculative decoding, 3 draft tokens (n-gram: no lookahead slots), synchronous",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 2048},
     "async": False, "caching": True, "num_blocks": 1500, "spec": {"method": "ngram", "k": 3},
     "requests": _prompts(13, 8, 30, 900, 10, 60)},
    {"name": "spec-ngram-async", "why": "speculative decoding with async scheduling (draft placeholders)",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 2048},
     "async": True, "caching": True, "num_blocks": 1500, "spec": {"method": "ngram", "k": 3},
     "requests": _prompts(13, 8, 30, 900, 10, 60)},
    {"name": "spec-eagle3", "why": "EAGLE3 drafts (3 tokens): lookahead KV slots and the prefill lookahead",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 2048},
     "async": True, "caching": True, "num_blocks": 600, "spec": {"method": "eagle3", "k": 3,
                                                                 "model": "eagle3-llama3-8b"},
     "requests": _prompts(17, 10, 30, 900, 10, 80)},
    {"name": "sliding-window", "why": "gpt-oss-120b's groups (sliding window 128 + full): windows free blocks, "
     "admission capped per group", **GPT_OSS,
     "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 512, "max_model_len": 4096},
     "async": False, "caching": False, "num_blocks": 1200, "requests": _prompts(19, 16, 100, 2500, 20, 200)},
    {"name": "sliding-window-async", "why": "the sliding-window groups with async scheduling and prefix caching",
     **GPT_OSS, "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 512, "max_model_len": 4096},
     "async": True, "caching": True, "num_blocks": 3000, "requests": _prompts(19, 16, 100, 2500, 20, 200)},
    {"name": "sliding-window-preemption", "why": "the sliding-window groups when decoding outgrows the cache",
     **GPT_OSS, "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 512, "max_model_len": 4096},
     "async": False, "caching": False, "num_blocks": 260, "requests": _prompts(29, 10, 300, 1500, 300, 600)},
    {"name": "gdn-hybrid-preemption", "why": "the GatedDeltaNet hybrid's groups under preemption, async",
     **QWEN3_NEXT, "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096},
     "async": True, "caching": False, "num_blocks": 34, "requests": _prompts(31, 8, 500, 2000, 400, 800)},
    {"name": "spec-eagle3-preemption", "why": "EAGLE3 drafts, async scheduling and prefix caching under preemption",
     **LLAMA_8B, "sched": {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 2048},
     "async": True, "caching": True, "num_blocks": 150, "spec": {"method": "eagle3", "k": 3,
                                                                 "model": "eagle3-llama3-8b"},
     "requests": _prompts(37, 8, 100, 600, 200, 400)},
    {"name": "gdn-hybrid", "why": "Qwen3-Next's groups (three GatedDeltaNet groups + full attention, 272-token "
     "blocks), prefix caching off, KV-limited", **QWEN3_NEXT,
     "sched": {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096},
     "async": True, "caching": False, "num_blocks": 60, "requests": _prompts(23, 14, 100, 3000, 20, 150)},
]


# ------------------------------------------------------------------------------------------------ building


def _model_dir(name: str, tmp: Path) -> Path:
    src = ROOT / "data" / "models" / name / "config.json"
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, folder / "config.json")
    return folder


def _layer_specs(w: dict, torch, vllm_cfg):  # type: ignore[no-untyped-def]
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec

    specs = {}
    for kind, count, p in w["layers"]:
        attn = {"block_size": p["block_size"], "num_kv_heads": p["num_kv_heads"], "head_size": p["head_size"],
                "dtype": torch.bfloat16}
        for i in range(count):
            name = f"model.layers.{i}.attn"
            if kind == "full":
                specs[name] = FullAttentionSpec(**attn)
            elif kind == "alternate":
                specs[name] = (SlidingWindowSpec(**attn, sliding_window=p["sliding_window"]) if i % 2 == 0
                               else FullAttentionSpec(**attn))
            elif kind == "hybrid":
                if (i + 1) % p["interval"] == 0:
                    specs[name] = FullAttentionSpec(**attn)
                else:
                    page = p["block_size"] * p["num_kv_heads"] * p["head_size"] * 2 * 2
                    specs[f"model.layers.{i}.linear_attn"] = MambaSpec(
                        block_size=vllm_cfg.model_config.max_model_len,
                        shapes=(tuple(p["conv"]), tuple(p["ssm"])), dtypes=(torch.bfloat16, torch.bfloat16),
                        page_size_padded=page, mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                        mamba_cache_mode="none", num_speculative_blocks=0)
    return specs


def build(w: dict, tmp: Path):  # type: ignore[no-untyped-def]
    import torch
    from vllm.config import (CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig,
                             SpeculativeConfig, VllmConfig)
    from vllm.v1.core import kv_cache_planning
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.utils.hashing import get_hash_fn_by_name

    s = w["sched"]
    notes = []
    model_dir = _model_dir(w["model"], tmp)
    try:
        mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16", seed=0,
                         max_model_len=s["max_model_len"])
        model_used = w["model"]
    except Exception as exc:  # noqa: BLE001 - a model vLLM cannot configure on CPU: the layout is what matters
        notes.append(f"ModelConfig({w['model']}) failed on CPU ({type(exc).__name__}); the scheduler ran with "
                     "llama-3.1-8b's ModelConfig and this model's KV cache groups")
        mc = ModelConfig(model=str(_model_dir("llama-3.1-8b", tmp)), skip_tokenizer_init=True, dtype="bfloat16",
                         seed=0, max_model_len=s["max_model_len"])
        model_used = "llama-3.1-8b"
    sc = SchedulerConfig(max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
                         max_model_len=s["max_model_len"], enable_chunked_prefill=True, is_encoder_decoder=False,
                         long_prefill_token_threshold=s.get("long_prefill_token_threshold", 0),
                         async_scheduling=w["async"])
    block = w["layers"][0][2]["block_size"]
    cc = CacheConfig(block_size=block, gpu_memory_utilization=0.9, cache_dtype="auto",
                     enable_prefix_caching=w["caching"])
    cc.kv_cache_layout = "NHD"
    spec_cfg = None
    pc = ParallelConfig()
    if "spec" in w:
        sp = w["spec"]
        if sp["method"] == "ngram":
            spec_cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=sp["k"], prompt_lookup_max=3,
                                         prompt_lookup_min=2, target_model_config=mc, target_parallel_config=pc)
        else:
            spec_cfg = SpeculativeConfig(model=str(_model_dir(sp["model"], tmp)), method=sp["method"],
                                         num_speculative_tokens=sp["k"], target_model_config=mc,
                                         target_parallel_config=pc)
    vc = VllmConfig(scheduler_config=sc, model_config=mc, cache_config=cc, device_config=DeviceConfig(device="cpu"),
                    parallel_config=pc, speculative_config=spec_cfg)
    specs = _layer_specs(w, torch, vc)
    if len({type(v).__name__ for v in specs.values()}) > 1:
        # The CPU platform turns the hybrid KV cache manager off (Platform.support_hybrid_kv_cache); a GPU server
        # keeps it on, and the scheduler is the same code on both: group the layers as the GPU does.
        vc.scheduler_config.disable_hybrid_kv_cache_manager = False
        notes.append("hybrid KV cache manager kept on, as on CUDA (the CPU platform turns it off)")
    groups = kv_cache_planning.get_kv_cache_groups(vc, specs)
    kcfg = KVCacheConfig(num_blocks=w["num_blocks"], kv_cache_tensors=[], kv_cache_groups=groups)
    cc.num_gpu_blocks = w["num_blocks"]
    scheduler_block, hash_block = resolve_kv_cache_block_sizes(kcfg, vc)
    cls = AsyncScheduler if w["async"] else Scheduler
    sched = cls(vllm_config=vc, kv_cache_config=kcfg, log_stats=False,
                structured_output_manager=StructuredOutputManager(vc), block_size=scheduler_block,
                hash_block_size=hash_block)
    hasher = None
    if w["caching"]:
        fn = get_hash_fn_by_name(cc.prefix_caching_hash_algo)
        init_none_hash(fn)
        hasher = get_request_block_hasher(hash_block, fn, vc.num_hash_lookahead_tokens)
    managers = sched.kv_cache_manager.coordinator.single_type_managers
    layout = []
    for g, m in zip(groups, managers, strict=True):
        spec = g.kv_cache_spec
        entry = {"spec": type(spec).__name__, "block_size": spec.block_size, "layers": len(g.layer_names)}
        if type(spec).__name__ == "SlidingWindowSpec":
            entry["sliding_window"] = spec.sliding_window
        if type(spec).__name__ == "MambaSpec":
            entry["spec_blocks"] = spec.num_speculative_blocks
        if m.max_admission_blocks_per_request is not None:
            entry["admission_cap"] = m.max_admission_blocks_per_request
        layout.append(entry)
    info = {
        "model": w["model"], "tp": w["tp"], "model_config": model_used, "async_scheduling": w["async"],
        "scheduler_class": cls.__name__, "enable_prefix_caching": w["caching"], **s,
        "num_spec_tokens": vc.num_speculative_tokens, "num_lookahead_tokens": vc.num_lookahead_tokens,
        "num_prefill_lookahead_tokens": vc.num_prefill_lookahead_tokens,
        "num_hash_lookahead_tokens": vc.num_hash_lookahead_tokens,
        "draft_slots": spec_cfg.max_num_new_slots_for_drafting if spec_cfg is not None else 0,
        "speculative_method": spec_cfg.method if spec_cfg is not None else None,
        "max_concurrent_batches": vc.max_concurrent_batches, "max_in_flight_tokens": vc.max_in_flight_tokens,
        "use_v2_model_runner": vc.use_v2_model_runner, "scheduler_block_size": scheduler_block,
        "hash_block_size": hash_block, "num_blocks": w["num_blocks"], "groups": layout,
        "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl, "watermark": sc.watermark,
        "max_num_scheduled_tokens": sched.max_num_scheduled_tokens,
    }
    return sched, vc, hasher, info, notes


# ------------------------------------------------------------------------------------------------- driving


def _tokens(seed: str, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, 30000) for _ in range(n)]


def _accepted(rid: str, call: int, drafts: int) -> int:
    """A fixed pseudo-random number of accepted drafts in [0, drafts] for this request and call."""
    digest = hashlib.sha256(f"{rid}:{call}".encode()).digest()
    return digest[0] % (drafts + 1)


def run(w: dict, tmp: Path) -> dict:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request

    sched, vc, hasher, info, notes = build(w, tmp)
    depth = vc.max_concurrent_batches
    k = info["num_spec_tokens"]
    prefixes: dict[int, list[int]] = {}

    def make(rid: str, spec: dict) -> Request:
        p = spec["prompt"]
        tokens = _tokens(rid, p)
        if "prefix" in spec:
            shared = prefixes.setdefault(spec["prefix"], _tokens(f"prefix-{spec['prefix']}", spec["prefix_len"]))
            tokens = shared + tokens[spec["prefix_len"]:]
        params = SamplingParams(max_tokens=spec["max_tokens"], ignore_eos=True)
        return Request(request_id=rid, prompt_token_ids=tokens, sampling_params=params, pooling_params=None,
                       block_hasher=hasher)

    # Requests: a fixed list with arrival ticks, or a closed loop whose next request arrives the tick after one
    # finishes (the engine takes new input at the top of its next loop iteration).
    static = deque()
    loop = w.get("closed_loop")
    if loop is None:
        for i, spec in enumerate(w["requests"]):
            static.append((spec["tick"], f"r{i}", spec))
        static = deque(sorted(static, key=lambda x: x[0]))
        remaining_loop: deque = deque()
    else:
        rng = random.Random(loop["seed"])
        remaining_loop = deque(
            (f"r{i}", {"prompt": rng.randint(*loop["prompt"]), "max_tokens": rng.randint(*loop["max_tokens"])})
            for i in range(loop["requests"]))
        for _ in range(loop["clients"]):
            rid, spec = remaining_loop.popleft()
            static.append((0, rid, spec))
    events: list[dict] = []
    added: list[dict] = []
    queue: deque = deque()
    tick = 0
    calls = 0
    limit = 20000

    def snapshot() -> dict:
        kvm = sched.kv_cache_manager
        blocks = {}
        for rid in sched.requests:
            groups = kvm.coordinator.get_blocks(rid)
            counts = [sum(1 for b in g if not b.is_null) for g in groups]
            if any(counts):
                blocks[rid] = counts
        return {"free": kvm.block_pool.get_num_free_blocks(), "blocks": blocks,
                "running": [r.request_id for r in sched.running],
                "waiting": [r.request_id for r in sched.kv_holding_waiting] + [r.request_id for r in sched.waiting]}

    while True:
        if calls > limit:
            raise RuntimeError(f"{w['name']}: more than {limit} calls")
        while static and static[0][0] <= tick:
            _, rid, spec = static.popleft()
            sched.add_request(make(rid, spec))
            entry = {"tick": tick, "rid": rid, "prompt": spec["prompt"], "max_tokens": spec["max_tokens"]}
            if "prefix" in spec:
                entry.update(prefix=spec["prefix"], prefix_len=spec["prefix_len"])
            added.append(entry)
        if sched.has_requests() and len(queue) < depth:
            out = sched.schedule()
            calls += 1
            sampling = [rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk]
            executed = out.total_num_scheduled_tokens > 0
            events.append({"op": "schedule", "tick": tick, "scheduled": dict(out.num_scheduled_tokens),
                           "spec": {rid: len(v) for rid, v in out.scheduled_spec_decode_tokens.items()},
                           "preempted": sorted(out.preempted_req_ids), "sampling": sampling, **snapshot()})
            queue.appendleft((out, sampling, calls))
            if len(queue) < depth and (executed or sched.has_requests()):
                tick += 1
                continue
        elif not queue:
            if not static and not remaining_loop:
                break
            if static:
                tick = max(tick + 1, static[0][0])
                continue
            break
        out, sampling, call = queue.pop()
        ids = list(out.num_scheduled_tokens)
        generated = {}
        sampled = []
        for rid in ids:
            if rid not in sampling:
                sampled.append([])
                continue
            drafts = out.scheduled_spec_decode_tokens.get(rid, [])
            real = [d for d in drafts if d != -1]
            n = 1 + (_accepted(rid, call, len(real)) if real else 0)
            generated[rid] = n
            sampled.append([7 + hashlib.sha256(f"{rid}:{call}:{j}".encode()).digest()[1] for j in range(n)])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={}, pooler_output=[])
        outputs = sched.update_from_output(out, mro)
        calls += 1
        finished = sorted(o.request_id for eco in outputs.values() for o in eco.outputs if o.finish_reason is not None)
        event = {"op": "update", "tick": tick, "generated": generated, "finished": finished, **snapshot()}
        if k and not vc.scheduler_config.async_scheduling and out.total_num_scheduled_tokens > 0:
            # EngineCore.post_step: the drafts the runner proposed for the batch.
            drafts = {rid: [11] * k for rid in ids if rid in sched.requests}
            sched.update_draft_token_ids(DraftTokenIds(list(drafts), list(drafts.values())))
            event["drafts"] = {rid: k for rid in drafts}
        events.append(event)
        if loop is not None:
            for _ in finished:
                if remaining_loop:
                    rid, spec = remaining_loop.popleft()
                    static.append((tick + 1, rid, spec))
        tick += 1
    return {"format": FORMAT, "workload": w["name"], "why": w["why"], "config": info, "notes": notes,
            "requests": added, "events": events}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "data" / "vllm" / "scheduler-traces"))
    parser.add_argument("--only", nargs="*", help="workload names (default: all)")
    args = parser.parse_args(argv)
    import vllm

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [w for w in WORKLOADS if not args.only or w["name"] in args.only]
    with tempfile.TemporaryDirectory() as tmp:
        for w in chosen:
            t0 = time.time()
            trace = run(w, Path(tmp))
            trace["vllm"] = vllm.__version__
            path = out / f"{w['name']}.json"
            path.write_text(json.dumps(trace, separators=(",", ":"), sort_keys=True) + "\n")
            steps = sum(1 for e in trace["events"] if e["op"] == "schedule")
            print(f"{w['name']}: {steps} schedule calls, {len(trace['requests'])} requests, "
                  f"{time.time() - t0:.1f} s -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
