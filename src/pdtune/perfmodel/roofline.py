"""Rooflines of one engine: the most tokens/s per GPU prefill and decode can reach, and why.

* :func:`prefill_ceiling` — the compute ceiling of prefill: seconds of the GPU's dense peak per prompt
  token, by kind of matmul (:class:`PrefillCeiling`);
* :func:`experts_touched` / :func:`tokens_to_touch` — how many routed experts a decode step of ``B`` tokens
  reads from HBM, which is what makes small decode batches memory-bound on a MoE model;
* :func:`decode_roofline` — one decode step of each topology at ``B`` requests: the roofline step time and
  the modeled one (:class:`pdtune.perfmodel.engine.Engine`), as tokens/s per GPU.

Everything here is modeled, from the model's config and the GPU's peaks; a sweep is only ever set beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from pdtune.errors import InputError
from pdtune.gpus import GpuSpec
from pdtune.model import ModelSpec
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY
from pdtune.perfmodel.costs import model_costs
from pdtune.perfmodel.engine import Batch, EngineConfig, build_engine
from pdtune.perfmodel.expert_load import touched
from pdtune.results.schema import empty_frame
from pdtune.topology import parse_topology
from pdtune.units import GiB

if TYPE_CHECKING:
    from pdtune.sweep import Sweep


@dataclass(frozen=True)
class PrefillCeiling:
    """The compute roofline of prefill: no layout can push more tokens/s through one GPU than this."""

    model: str
    gpu: str
    isl: int
    seconds_per_token: dict[str, float]  # per kind of work, at the GPU's dense peak
    best_tps_per_gpu: float | None  # the sweep's best total tokens/s per GPU (None without a sweep)

    @property
    def ceiling_tps_per_gpu(self) -> float:
        return 1.0 / sum(self.seconds_per_token.values())

    @property
    def share(self) -> float | None:
        """The sweep's best as a fraction of the ceiling."""
        return None if self.best_tps_per_gpu is None else self.best_tps_per_gpu / self.ceiling_tps_per_gpu

    def frame(self) -> pd.DataFrame:
        total = sum(self.seconds_per_token.values())
        return pd.DataFrame([{"work": k, "us_per_token": v * 1e6, "share": v / total}
                             for k, v in self.seconds_per_token.items()])


def prefill_ceiling(spec: ModelSpec, gpu: GpuSpec, isl: int, sweep: Sweep | None = None) -> PrefillCeiling:
    """Seconds of one GPU's dense peak per prompt token, by kind of matmul; the ceiling is their inverse.

    A prompt token multiplies through the dense layers (``2 N_dense`` FLOPs), ``k`` experts in each MoE
    layer (``2 k N_expert``) and attends on average to ``ISL / 2`` earlier tokens in every attention layer;
    the lm_head runs once per request. Each kind runs at the peak of its math format
    (:meth:`pdtune.gpus.GpuSpec.peak_flops`): experts in NVFP4 on a Blackwell, the rest in BF16.
    """
    c = model_costs(spec)
    moe_layers = c.num_moe_layers
    bf16 = gpu.peak_flops("bf16")
    experts = moe_layers * c.experts_per_token * c.expert_params if c.num_experts else 0
    parts = {
        "dense layers": 2 * c.dense_params / gpu.peak_flops(c.dense_dtype),
        "routed experts": 2 * experts / gpu.peak_flops(c.expert_dtype),
        "attention (pairs)": c.attention_layers * c.attn_pair_flops_prefill * (isl + 1) / 2 / bf16,
        "lm_head (once per prompt)": 2 * c.lm_head_params / isl / bf16,
    }
    if c.recurrent_layers:
        parts["linear attention (GDN/Mamba)"] = c.recurrent_layers * c.recurrent_flops_prefill / bf16
    parts = {k: v for k, v in parts.items() if v > 0}
    best = None
    if sweep is not None and sweep.available:
        best = float(sweep.frame["tps_per_gpu"].max())
    return PrefillCeiling(spec.name, gpu.name, isl, parts, best)


def experts_touched(spec: ModelSpec, batch_sizes: Iterable[int]) -> pd.DataFrame:
    """Experts a step of ``B`` tokens touches in one MoE layer, ``E (1 - (1 - k/E)^B)`` (each token picks
    ``k`` of ``E`` uniformly at random), and the bytes of routed experts one step streams from HBM."""
    columns = ["tokens", "experts_touched", "share", "expert_gib_per_step", "expert_mib_per_token"]
    c = model_costs(spec)
    if not c.num_experts:
        return empty_frame(columns)
    e, k = c.num_experts, c.experts_per_token
    rows = []
    for b in batch_sizes:
        read = touched(e, k, b)
        gib = read * c.expert_bytes * c.num_moe_layers / GiB
        rows.append({"tokens": int(b), "experts_touched": read, "share": read / e,
                     "expert_gib_per_step": gib, "expert_mib_per_token": gib * 1024 / b})
    return pd.DataFrame(rows, columns=columns)


def tokens_to_touch(spec: ModelSpec, share: float) -> int | None:
    """The fewest tokens in one step that touch ``share`` of a MoE layer's experts on average:
    ``ceil(ln(1 - share) / ln(1 - k/E))``. None for a model without routed experts."""
    c = model_costs(spec)
    if not c.num_experts or not 0 < share < 1:
        return None
    return math.ceil(math.log1p(-share) / math.log1p(-c.experts_per_token / c.num_experts))


def decode_roofline(
    spec: ModelSpec,
    gpu: GpuSpec,
    topologies: Sequence[str],
    requests: Iterable[int],
    *,
    isl: int,
    osl: int,
    mtp_tokens: int = 0,
    acceptance: float = 0.25,
    kv_cache_dtype: str = "fp8",
    vllm: str = "0.26.1",
    gpu_memory_utilization: float = 0.92,
) -> pd.DataFrame:
    """A sketch of one decode step of each topology (without and, when ``mtp_tokens`` > 0 and the model
    has an MTP module, with MTP) at ``B`` running requests per engine, spread over its DP ranks.

    From :class:`pdtune.perfmodel.engine.Engine`: the roofline step time (all FLOPs at peak or all bytes at
    full HBM bandwidth, whichever is longer), and the modeled step time (the calibrated efficiencies, the
    communication and a fixed overhead per step). A step runs ``B (1 + K)`` tokens and keeps
    ``B (1 + K A)``, which gives tokens/s per GPU. ``fits`` says whether ``B`` requests fit the engine's KV
    cache at ``isl + osl`` tokens. A topology the model does not fit on the GPU is left out.
    """
    columns = ["deployment", "requests", "tokens_per_step", "experts_touched", "roofline_ms", "modeled_ms",
               "roofline_tps_per_gpu", "modeled_tps_per_gpu", "fits"]
    ks = [0] + ([mtp_tokens] if mtp_tokens and spec.num_mtp_layers else [])
    config = EngineConfig(gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
                          vllm=vllm)
    context = isl + osl / 2
    counts = list(requests)
    rows = []
    for name in topologies:
        layout = parse_topology(name, "decode topology")
        for k in ks:
            try:
                engine = build_engine(spec, gpu, layout, isl=isl, osl=osl, mtp_tokens=k, config=config)
            except InputError:
                continue
            c = engine.costs
            q = 1 + k
            for n in counts:
                per_rank = n / layout.dp
                batch = Batch(tokens=per_rank * q, seqs=per_rank, attn_pairs=per_rank * q * context,
                              kv_tokens_read=per_rank * context, logits=per_rank * q, state_writes=q,
                              ep_tokens=n * q, draft_passes=k)
                roof = engine.roofline_time(batch)
                modeled = engine.step_time(batch, DEFAULT_EFFICIENCY).total
                kept = n * (1 + k * acceptance)
                read = touched(c.num_experts, c.experts_per_token, n * q)
                rows.append({"deployment": name + ("+MTP" if k else ""), "requests": int(n),
                             "tokens_per_step": n * q, "experts_touched": read, "roofline_ms": roof * 1e3,
                             "modeled_ms": modeled * 1e3, "roofline_tps_per_gpu": kept / roof / layout.gpus,
                             "modeled_tps_per_gpu": kept / modeled / layout.gpus,
                             "fits": n <= engine.capacity})
    return pd.DataFrame(rows, columns=columns)
