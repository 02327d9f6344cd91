"""One vLLM engine of a given topology on a given GPU: its memory, its KV room, and the time of one step.

**Memory.** Weights per GPU come from :func:`pdtune.memory.weights_per_gpu` (a pipeline stage holds its own
layers, plus the embedding on the first stage and the lm_head and MTP module on the last). The KV cache is
vLLM's arithmetic (:class:`pdtune.memory.Waterfall`): ``total * gpu_memory_utilization`` minus weights,
activation peak, non-torch memory and the CUDA-graph estimate. Those three overheads come from the
article's table 3 when the topology and MTP setting match a row there (the run with the largest
max-num-seqs), and otherwise from the largest overhead table 3 records (a conservative constant). How many
requests fit is vLLM's own TP-sharded accounting (:func:`pdtune.state.plan_state`, one TP rank).

**One step.** Every DP rank runs the same step in lockstep (MoE layers exchange tokens every layer), so a
step takes as long as the busiest rank. On each GPU of the slowest pipeline stage, for each kind of work, the
time is the roofline ``max(FLOPs / (peak * compute), bytes / (HBM * hbm))``, and the kinds add up (vLLM runs
them one after another):

* dense matmuls (mixers, dense MLPs, shared experts, routers): TP-sharded FLOPs and weight bytes;
* routed experts: FLOPs of ``k`` experts per token over the expert shards, and the bytes of the experts that
  at least one token touches, ``E * (1 - (1 - k/E)^T)`` for ``T`` tokens in the whole EP group;
* attention: ``S^2``-type pair FLOPs and the KV cache read (per TP rank: vLLM's page accounting);
* GDN/Mamba: the linear-time recurrent FLOPs and the state read once and written once per step (``1 + K``
  times with ``K`` speculative tokens: vLLM keeps a state per draft position);
* lm_head for the tokens that are sampled; the MTP draft module ``K`` times with speculation;

then communication, which vLLM does not overlap with compute: TP all-reduces (or, with DP attention, the
reduce-scatter + all-gather of sequence-parallel MoE) and the expert all-gather / reduce-scatter of vLLM's
default ``allgather_reducescatter`` all2all backend (dispatch in the experts' activation format, combine in
bf16), each at ``link`` of the per-GPU link bandwidth plus ``collective_latency_s`` per call (two for a large
all-reduce; a group beyond the NVLink domain also pays the scale-out network: :mod:`pdtune.perfmodel.network`);
pipeline stages send hidden state and residual to the next; a fixed ``step_overhead_s`` plus ``layer_overhead_s``
per layer of the stage.

:meth:`Engine.step_terms` gives the same step as linear pieces with the efficiency factors left out
(:class:`StepTerms`), so that calibration can re-evaluate thousands of steps for each trial set of factors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache, cached_property

import pandas as pd

from pdtune.errors import InputError
from pdtune.guarded import bundled, read_frame
from pdtune.gpus import GpuSpec
from pdtune.memory import Waterfall, graph_tokens, weights_per_gpu
from pdtune.model import LayerKind, ModelSpec
from pdtune.paths import article_dir
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from pdtune.perfmodel.expert_load import busiest_rank
from pdtune.perfmodel.costs import ModelCosts, model_costs, stage_layers
from pdtune.perfmodel.network import allreduce_calls, group_bandwidth, scale_out_latency
from pdtune.precision import expert_kernel
from pdtune.state import StatePlan, plan_state
from pdtune.topology import Topology
from pdtune.units import GiB, from_gib

#: Activations travel between GPUs in bf16 (TP all-reduce, MoE combine, pipeline sends).
ACTIVATION_BYTES = 2

#: The kinds of work of one step, each timed at its own fractions (:meth:`Efficiency.fractions`).
KINDS = ("dense", "experts", "attention", "recurrent", "lm_head", "mtp_draft")

#: The GPUs of compute capability 10 (``is_device_capability_family(100)``), whose CUDA-graph capture ceiling is
#: its own from 0.28 (``value:cudagraph.max_capture_size.ceiling_sm100`` in the switches table).
SM100_GPUS = ("b200", "b300", "gb200", "gb300")


def capture_ceiling(vllm: str, gpu_name: str) -> tuple[int, int]:
    """vLLM's ceiling on the largest CUDA-graph capture size when none is set, and the sequences multiplier:
    ``min(multiplier x max_num_seqs x decode query length, ceiling)`` (``VllmConfig._set_cudagraph_sizes``),
    read from the switches table: 2 and 512, 1024 on compute-capability-10 GPUs from 0.28."""
    from pdtune import switches

    ceiling = switches.number("value:cudagraph.max_capture_size.ceiling", vllm)
    sm100 = switches.number("value:cudagraph.max_capture_size.ceiling_sm100", vllm)
    multiplier = switches.number("value:cudagraph.max_capture_size.seqs_multiplier", vllm)
    assert isinstance(ceiling, int) and isinstance(multiplier, int)
    if sm100 is not None and gpu_name in SM100_GPUS:
        ceiling = int(sm100)
    return ceiling, multiplier



@dataclass(frozen=True)
class EngineConfig:
    """The vLLM settings a prediction assumes (the article's unless said otherwise)."""

    gpu_memory_utilization: float = 0.92
    kv_cache_dtype: str = "fp8"
    vllm: str = "0.26.1"
    max_num_batched_tokens: int = 8192  # per DP rank; vLLM's default for the OpenAI server
    max_num_seqs: int | None = None  # None: only the KV cache limits running requests
    template_tokens: int = 0  # chat-template tokens added to every request
    overheads_gib: tuple[float, float, float] | None = None  # (activation, non-torch, graphs); None: table 3
    # KV room only (pdtune.state): an EAGLE head's or draft model's layers join the cache with its draft
    # tokens; DCP shards full-attention tokens over the TP group. Neither changes the step model.
    speculative_model: ModelSpec | None = None
    num_speculative_tokens: int = 0  # the speculative model's draft tokens (MTP uses ``mtp_tokens``)
    decode_context_parallel_size: int = 1
    max_capture_size: int | None = None  # largest CUDA-graph batch; None: vLLM's default (Engine.capture_limit)
    block_size: int | None = None  # --block-size; None: the attention backend's (pdtune.state.plan_state)

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InputError("--gpu-memory-utilization", "gpu_memory_utilization",
                             f"must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.max_num_batched_tokens < 1:
            raise InputError("--max-num-batched-tokens", "max_num_batched_tokens", "must be positive")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise InputError("--max-num-seqs", "max_num_seqs", "must be positive")


@dataclass(frozen=True)
class Overheads:
    """Per-GPU memory that is neither weights nor KV cache, and where the numbers came from."""

    activation_peak: int
    non_torch: int
    cudagraph_estimate: int
    source: str

    @property
    def total(self) -> int:
        return self.activation_peak + self.non_torch + self.cudagraph_estimate


@cache
def _table3() -> pd.DataFrame:
    """The article's table 3, read once (the plan builds hundreds of engines)."""
    with bundled():
        return read_frame(article_dir() / "table3_memory_per_engine.csv",
                          ("topology", "mtp", "run", "activation_peak_gib", "non_torch_gib", "cudagraph_estimate_gib"))


def engine_overheads(topology: Topology, mtp: bool, config: EngineConfig) -> Overheads:
    """Table 3's row for this layout (largest max-num-seqs), else its largest overhead as a constant."""
    if config.overheads_gib is not None:
        act, non_torch, graphs = config.overheads_gib
        return Overheads(from_gib(act), from_gib(non_torch), from_gib(graphs), "given")
    table = _table3()
    layouts = {"TP8": (8, 1), "TP4DP4": (4, 4)}  # the article's decode engines (both with +EP experts)
    matching = [
        row
        for _, row in table.iterrows()
        if layouts.get(str(row["topology"])) == (topology.tp, topology.dp)
        and topology.pp == 1
        and topology.expert_parallel
        and bool(row["mtp"]) == mtp
    ]
    if matching:
        row = matching[-1]  # rows are in increasing max-num-seqs: the largest configuration
        where = f"article table 3, run {int(row['run'])} ({row['topology']}, MTP {'on' if mtp else 'off'})"
    else:
        sums = table["activation_peak_gib"] + table["non_torch_gib"] + table["cudagraph_estimate_gib"]
        row = table.loc[sums.idxmax()]
        where = f"constant: article table 3's largest overhead (run {int(row['run'])})"
    return Overheads(
        from_gib(float(row["activation_peak_gib"])),
        from_gib(float(row["non_torch_gib"])),
        from_gib(float(row["cudagraph_estimate_gib"])),
        where,
    )


@dataclass(frozen=True)
class Batch:
    """What the busiest DP rank runs in one step (one micro-batch per stage under PP)."""

    tokens: float  # tokens through the model (prefill chunk tokens + decode tokens, draft positions included)
    seqs: float  # sequences (fractional: an average over micro-batches or ranks)
    prefill_tokens: float = 0  # of ``tokens``: prefill (chunked kernels)
    attn_pairs: float = 0.0  # sum over the step's tokens of the keys each attends to
    decode_pairs: float = 0.0  # of ``attn_pairs`` in a step with prefill: the decode tokens' (decode kernels)
    kv_tokens_read: float = 0.0  # sum over sequences of cached tokens read from the KV cache
    logits: float = 0  # tokens that go through the lm_head
    state_writes: int = 1  # recurrent states written per sequence (1 + K with K draft tokens)
    ep_tokens: float = 0  # tokens entering each MoE layer across the whole EP group (all DP ranks)
    draft_passes: int = 0  # MTP draft forward passes (K with speculation), one token per sequence each

    @property
    def decode_tokens(self) -> float:
        return self.tokens - self.prefill_tokens


@dataclass(frozen=True)
class _StageInfo:
    """Layer counts and dense weights of one pipeline stage (computed once per engine)."""

    attention: int  # full-context attention layers (GQA or MLA)
    sliding: int  # sliding-window attention layers
    recurrent: int
    moe: int
    layers: int
    dense_params: int
    dense_bytes: int


@dataclass(frozen=True)
class Work:
    """FLOPs by math format and HBM bytes of one kind of work on one GPU."""

    flops: dict[str, float]
    bytes: float

    def time(self, gpu: GpuSpec, eff: Efficiency, kind: str = "dense", kernel: str = "") -> float:
        """Roofline at the achieved fractions of ``kind`` (the routed experts at their ``kernel``'s):
        compute-bound or memory-bound, whichever is slower."""
        fraction, hbm = eff.fractions(kind, kernel)
        compute = sum(f / (gpu.peak_flops(d) * fraction) for d, f in self.flops.items())
        return max(compute, self.bytes / (gpu.hbm_bandwidth * hbm))

    def peak_seconds(self, gpu: GpuSpec) -> tuple[float, float]:
        """(compute seconds, memory seconds) at 100 % of the peaks: the roofline's two sides."""
        return (sum(f / gpu.peak_flops(d) for d, f in self.flops.items()), self.bytes / gpu.hbm_bandwidth)

    def scaled(self, factor: float) -> Work:
        return Work({d: f * factor for d, f in self.flops.items()}, self.bytes * factor)

    def __add__(self, other: Work) -> Work:
        flops = dict(self.flops)
        for d, f in other.flops.items():
            flops[d] = flops.get(d, 0.0) + f
        return Work(flops, self.bytes + other.bytes)


@dataclass(frozen=True)
class StepTime:
    """Seconds one step spends on each kind of work (one GPU of the slowest stage)."""

    parts: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def to_dict(self) -> dict[str, float]:
        return {**self.parts, "total": self.total}


@dataclass(frozen=True)
class StepTerms:
    """One step on one GPU as linear pieces, the efficiency factors left out.

    ``seconds(eff)`` equals :meth:`Engine.step_time` ``(batch, eff).total`` (to rounding) for a one-stage
    engine: each kind of work costs ``max(compute_s / compute, memory_s / hbm)`` at its kind's fractions (the
    routed experts at their kernel family's), communication ``link_s / link`` plus ``calls x
    collective_latency_s`` (and the network latency for calls that leave the NVLink domain), and the fixed costs
    ``step_overhead_s + layers x layer_overhead_s + expert_slots x expert_overhead_s + seqs x seq_overhead_s
    + eager_layers x eager_layer_overhead_s`` (``expert_slots``: MoE layers x the routed experts one GPU holds).
    """

    kinds: tuple[str, ...]  # the kind of each piece of work (:data:`KINDS`)
    compute_s: tuple[float, ...]  # per kind of work: seconds at the dense tensor-core peak
    memory_s: tuple[float, ...]  # per kind of work: seconds at the HBM peak
    kernel: str  # the routed experts' kernel family ("" without routed experts)
    link_s: float  # communication seconds at 100 % of the links
    calls: float  # collective calls, each costing collective_latency_s
    network_s: float  # fixed network cost of the calls that leave the NVLink domain (seconds)
    layers: int
    expert_slots: float = 0.0  # MoE layers x routed experts per GPU (E / EP)
    seqs: float = 0.0  # sequences in the step (one rank's)
    eager_layers: int = 0  # layers run outside CUDA graphs (all of them in a step above the capture size)
    stages: int = 1  # pipeline stages summed into these terms (each pays the step overhead)

    def seconds(self, eff: Efficiency) -> float:
        work = 0.0
        for kind, c, m in zip(self.kinds, self.compute_s, self.memory_s, strict=True):
            compute, hbm = eff.fractions(kind, self.kernel)
            work += max(c / compute, m / hbm)
        return (
            work
            + self.link_s / eff.link
            + self.calls * eff.collective_latency_s
            + self.network_s
            + fixed_seconds(eff, self.layers, self.expert_slots, self.seqs, self.eager_layers, self.stages)
        )

    def __add__(self, other: StepTerms) -> StepTerms:
        """Two steps one after the other (pipeline stages in turn): the step overhead is paid once per stage."""
        return StepTerms(
            self.kinds + other.kinds,
            self.compute_s + other.compute_s,
            self.memory_s + other.memory_s,
            self.kernel or other.kernel,
            self.link_s + other.link_s,
            self.calls + other.calls,
            self.network_s + other.network_s,
            self.layers + other.layers,
            self.expert_slots + other.expert_slots,
            self.seqs + other.seqs,
            self.eager_layers + other.eager_layers,
            self.stages + other.stages,
        )


def fixed_seconds(eff: Efficiency, layers: int, expert_slots: float, seqs: float, eager_layers: int,
                  stages: int = 1) -> float:
    """The fixed costs of one step of one stage (or ``stages`` of them): what no roofline term sees."""
    return (
        stages * eff.step_overhead_s
        + layers * eff.layer_overhead_s
        + expert_slots * eff.expert_overhead_s
        + seqs * eff.seq_overhead_s
        + eager_layers * eff.eager_layer_overhead_s
    )


@dataclass(frozen=True)
class Engine:
    """A model served by one vLLM engine of ``topology`` on ``gpu``; build with :func:`build_engine`."""

    spec: ModelSpec
    gpu: GpuSpec
    topology: Topology
    costs: ModelCosts
    plan: StatePlan
    weights_per_gpu: int
    overheads: Overheads
    kv_cache_per_gpu: int
    capacity_per_rank: int  # running requests one DP rank holds (KV cache, then max_num_seqs)
    mtp_tokens: int
    config: EngineConfig
    stages: tuple[range, ...] = field(repr=False)

    @property
    def dp(self) -> int:
        return self.topology.dp

    @property
    def capacity(self) -> int:
        """Running requests the whole engine holds."""
        return self.capacity_per_rank * self.topology.dp

    @cached_property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token occupies in one attention layer on one TP rank."""
        page = self.plan.attention_page
        return page.bytes_per_token if page is not None else 0

    @cached_property
    def expert_kernel(self) -> str:
        """The routed experts' kernel family on this GPU (:func:`pdtune.precision.expert_kernel`); "" for a dense
        model."""
        if not self.costs.num_experts:
            return ""
        return expert_kernel(self.spec.weights, native_fp4="fp4" in self.gpu.dense_flops)

    @cached_property
    def capture_limit(self) -> int:
        """Tokens of the largest step that runs in a CUDA graph: ``--max-cudagraph-capture-size`` if given, else
        vLLM's default ``min(2 x max_num_seqs x (1 + MTP tokens), ceiling)`` (:func:`capture_ceiling`), never
        above ``max_num_batched_tokens`` (``VllmConfig._set_cudagraph_sizes``). A larger step runs eagerly."""
        config = self.config
        if config.max_capture_size is not None:
            return min(config.max_capture_size, config.max_num_batched_tokens)
        ceiling, multiplier = capture_ceiling(config.vllm, self.gpu.name)
        seqs = config.max_num_seqs if config.max_num_seqs is not None else ceiling
        query = 1 + self.mtp_tokens  # a uniform decode step carries every draft token
        return min(multiplier * seqs * query, ceiling, config.max_num_batched_tokens)

    def _fixed_counts(self, index: int, batch: Batch) -> tuple[int, float, float, int]:
        """(layers, expert slots, sequences, eager layers) of stage ``index`` in ``batch``: what the fixed costs
        count. Expert slots are MoE layers times the routed experts one GPU holds (``E / EP``); a step runs in a
        CUDA graph when its tokens fit the largest capture size; sequences are counted once per step (on the
        first stage)."""
        info = self._stage_info[index]
        eager = info.layers if batch.tokens > self.capture_limit else 0
        slots = info.moe * self.costs.num_experts / self.topology.ep
        return info.layers, slots, batch.seqs if index == 0 else 0.0, eager

    @cached_property
    def state_bytes(self) -> int:
        """Recurrent state (conv + SSM) of one request in one layer on one TP rank, without padding."""
        page = self.plan.recurrent_page
        return page.state_bytes if page is not None else 0

    def memory_summary(self) -> dict[str, float | int | str]:
        return {
            "weights_gib": self.weights_per_gpu / GiB,
            "activation_peak_gib": self.overheads.activation_peak / GiB,
            "non_torch_gib": self.overheads.non_torch / GiB,
            "cudagraph_estimate_gib": self.overheads.cudagraph_estimate / GiB,
            "overheads_source": self.overheads.source,
            "kv_cache_gib": self.kv_cache_per_gpu / GiB,
            "bytes_per_request": self.plan.bytes_per_request,
            "capacity_per_rank": self.capacity_per_rank,
            "capacity": self.capacity,
        }

    # ------------------------------------------------------------------------------------------ step time

    def stage_times(self, batch: Batch, eff: Efficiency = DEFAULT_EFFICIENCY) -> list[StepTime]:
        """The step's time on one GPU of each pipeline stage."""
        return [self._stage_time(i, batch, eff) for i in range(len(self.stages))]

    def step_time(self, batch: Batch, eff: Efficiency = DEFAULT_EFFICIENCY) -> StepTime:
        """The slowest stage: what sets the pace of the pipeline (the whole step without PP)."""
        return max(self.stage_times(batch, eff), key=lambda s: s.total)

    def roofline_time(self, batch: Batch) -> float:
        """The GPU's limit for this step: ``max(all FLOPs / peak, all bytes / HBM bandwidth)`` on the slowest
        stage, with no communication and no overhead. No prediction is faster."""
        best = 0.0
        for i in range(len(self.stages)):
            work = self._stage_work(i, batch).values()
            compute = sum(f / self.gpu.peak_flops(d) for w in work for d, f in w.flops.items())
            memory = sum(w.bytes for w in work) / self.gpu.hbm_bandwidth
            best = max(best, compute, memory)
        return best

    def _stage_time(self, index: int, batch: Batch, eff: Efficiency) -> StepTime:
        parts = {
            name: w.time(self.gpu, eff, name, self.expert_kernel)
            for name, w in self._stage_work(index, batch).items()
        }
        parts.update(self._comm_times(batch, index, eff))
        if batch.draft_passes and index == len(self.stages) - 1:
            mtp = self._layer_comm(batch.seqs, batch.seqs * self.topology.dp, moe=self.costs.mtp_moe, eff=eff)
            parts["mtp_draft"] = parts.get("mtp_draft", 0.0) + batch.draft_passes * mtp
        if index < len(self.stages) - 1:
            link = group_bandwidth(self.gpu, self._pp_group, eff)
            hidden_and_residual = 2 * batch.tokens * self.costs.hidden * ACTIVATION_BYTES
            parts["pp_send"] = hidden_and_residual / link + eff.collective_latency_s + self._pp_network_latency
        parts["overhead"] = fixed_seconds(eff, *self._fixed_counts(index, batch))
        return StepTime(parts)

    @property
    def _pp_group(self) -> int:
        """Pipeline sends stay on NVLink while the whole engine fits one NVLink domain (2: a point-to-point)."""
        return 2 if not self.gpu.crosses_network(self.topology.gpus) else self.gpu.nvlink_domain + 1

    @property
    def _pp_network_latency(self) -> float:
        return scale_out_latency(self.gpu.name) if self.gpu.crosses_network(self.topology.gpus) else 0.0

    def step_terms(self, batch: Batch) -> StepTerms:
        """The step as :class:`StepTerms`, every pipeline stage in turn (their sum)."""
        total: StepTerms | None = None
        for terms in self.stage_terms(batch):
            total = terms if total is None else total + terms
        assert total is not None
        return total

    def stage_terms(self, batch: Batch, window: tuple[float, float, float] | None = None) -> list[StepTerms]:
        """The step as :class:`StepTerms` on one GPU of each stage (``stage_times`` without the factors), as
        :mod:`pdtune.sim` caches and re-times it; ``window`` gives the sliding-window fields (:func:`window_fields`)
        apart, so that every piece of work is affine in the batch's fields, sliding windows included."""
        return [self._stage_terms(index, batch, window) for index in range(len(self.stages))]

    @cached_property
    def sliding_window(self) -> int | None:
        """The window of the model's sliding-window layers (None without such layers)."""
        if not self._stage_info or not any(s.sliding for s in self._stage_info):
            return None
        return self.spec.attention.sliding_window if self.spec.attention else None

    def _stage_terms(self, index: int, batch: Batch, window: tuple[float, float, float] | None = None) -> StepTerms:
        gpu, topo = self.gpu, self.topology
        works = self._stage_work(index, batch, window)
        peaks = [w.peak_seconds(gpu) for w in works.values()]
        info = self._stage_info[index]
        link_s = calls = network_s = 0.0
        for moe, count in ((True, info.moe), (False, info.layers - info.moe)):
            if count:
                tp_b, ep_b, n = self._layer_comm_bytes(batch.tokens, batch.ep_tokens, moe=moe)
                link_s += count * (tp_b / gpu.link_bandwidth(topo.tp)
                                   + ep_b / gpu.link_bandwidth(topo.expert_shards))
                calls += count * n
                network_s += count * self._network_calls(n, moe=moe) * scale_out_latency(gpu.name)
        if batch.draft_passes and index == len(self.stages) - 1:
            tp_b, ep_b, n = self._layer_comm_bytes(batch.seqs, batch.seqs * topo.dp, moe=self.costs.mtp_moe)
            link_s += batch.draft_passes * (
                tp_b / gpu.link_bandwidth(topo.tp) + ep_b / gpu.link_bandwidth(topo.expert_shards)
            )
            calls += batch.draft_passes * n
            draft_calls = self._network_calls(n, moe=self.costs.mtp_moe)
            network_s += batch.draft_passes * draft_calls * scale_out_latency(gpu.name)
        if index < len(self.stages) - 1:
            link_s += 2 * batch.tokens * self.costs.hidden * ACTIVATION_BYTES / gpu.link_bandwidth(self._pp_group)
            calls += 1
            network_s += self._pp_network_latency
        layers, slots, seqs, eager = self._fixed_counts(index, batch)
        return StepTerms(
            tuple(works),
            tuple(c for c, _ in peaks),
            tuple(m for _, m in peaks),
            self.expert_kernel,
            link_s,
            calls,
            network_s,
            layers,
            slots,
            seqs,
            eager,
        )

    def _network_calls(self, calls: int, *, moe: bool) -> int:
        """Of a layer's collective calls, those whose group leaves the NVLink domain."""
        topo, gpu = self.topology, self.gpu
        if moe and topo.dp > 1:
            ep_calls = 2 if gpu.crosses_network(topo.expert_shards) else 0
            tp_calls = (calls - 2) if gpu.crosses_network(topo.tp) else 0
            return ep_calls + tp_calls
        return calls if gpu.crosses_network(topo.tp) else 0

    @cached_property
    def _stage_info(self) -> tuple[_StageInfo, ...]:
        c = self.costs
        out = []
        for stage in self.stages:
            layers = [c.layers[i] for i in stage]
            out.append(
                _StageInfo(
                    attention=sum(
                        1 for layer in layers if layer.kind in (LayerKind.FULL_ATTENTION, LayerKind.MLA)
                    ),
                    sliding=sum(1 for layer in layers if layer.kind is LayerKind.SLIDING_ATTENTION),
                    recurrent=sum(1 for layer in layers if layer.kind.is_recurrent),
                    moe=sum(1 for layer in layers if layer.moe),
                    layers=len(layers),
                    dense_params=sum(layer.dense_params for layer in layers),
                    dense_bytes=sum(layer.dense_bytes for layer in layers),
                )
            )
        return tuple(out)

    def _stage_work(self, index: int, batch: Batch,
                    window_override: tuple[float, float, float] | None = None) -> dict[str, Work]:
        """FLOPs (by math format) and HBM bytes of each kind of work on one GPU of stage ``index``."""
        c, tp = self.costs, self.topology.tp
        info = self._stage_info[index]
        last = index == len(self.stages) - 1
        work: dict[str, Work] = {}
        # Dense matmuls: every weight read once per step, every token multiplied through it.
        work["dense"] = Work(
            {c.dense_dtype: 2 * info.dense_params * batch.tokens / tp}, info.dense_bytes / tp
        )
        if info.moe:
            work["experts"] = self._experts_work(batch.ep_tokens).scaled(info.moe)
        if (info.attention or info.sliding) and self.kv_bytes_per_token:
            # Pair FLOPs over the TP-sharded heads; the KV cache read and the new tokens written, per TP rank.
            # A step with prefill runs its prompt tokens through the prefill kernels (MLA un-absorbed) and its
            # decode tokens, if any, through the decode kernels.
            if batch.prefill_tokens:
                pre_pairs, dec_pairs = batch.attn_pairs - batch.decode_pairs, batch.decode_pairs
            else:
                pre_pairs, dec_pairs = 0.0, batch.attn_pairs
            pair_flops = c.attn_pair_flops_prefill * pre_pairs + c.attn_pair_flops_decode * dec_pairs
            kv = (batch.kv_tokens_read + batch.tokens) * self.kv_bytes_per_token
            full = Work({"bf16": pair_flops / tp}, kv)
            # A sliding-window layer sees at most its window of each token's context (window_fields).
            window = self.spec.attention.sliding_window if self.spec.attention else None
            pre_window, dec_share, kv_share = window_override or window_fields(  # a given tuple is never empty
                window, batch.seqs, batch.prefill_tokens, batch.attn_pairs, batch.decode_pairs,
                batch.kv_tokens_read)
            sliding = Work(
                {"bf16": (c.attn_pair_flops_prefill * pre_window + c.attn_pair_flops_decode * dec_share) / tp},
                (kv_share + batch.tokens) * self.kv_bytes_per_token,
            )
            work["attention"] = full.scaled(info.attention) + sliding.scaled(info.sliding)
        if info.recurrent:
            # Linear-time recurrence; the state is read once and written state_writes times per sequence.
            flops = (
                batch.prefill_tokens * c.recurrent_flops_prefill
                + batch.decode_tokens * c.recurrent_flops_decode
            ) / tp
            state = batch.seqs * self.state_bytes * (1 + batch.state_writes)
            work["recurrent"] = Work({"bf16": flops}, state).scaled(info.recurrent)
        if last and batch.logits:
            work["lm_head"] = Work({"bf16": 2 * c.lm_head_params * batch.logits / tp}, c.lm_head_bytes / tp)
        if last and batch.draft_passes:
            work["mtp_draft"] = self._draft_pass_work(batch).scaled(batch.draft_passes)
        return work

    def _experts_work(self, ep_tokens: float) -> Work:
        """One MoE layer: ``k`` experts' FLOPs per token; the bytes of the experts some token touches on the busiest
        EP rank (the all-to-all waits for it: :mod:`pdtune.perfmodel.expert_load`), sliced over ``moe_tp``."""
        c, topo = self.costs, self.topology
        if ep_tokens <= 0 or c.num_experts == 0:
            return Work({}, 0.0)
        flops = 2 * c.expert_params * ep_tokens * c.experts_per_token / topo.expert_shards
        read = busiest_rank(c.num_experts, c.experts_per_token, float(ep_tokens), topo.ep)
        return Work({c.expert_dtype: flops}, read * c.expert_bytes / topo.moe_tp)

    def _draft_pass_work(self, batch: Batch) -> Work:
        """One MTP draft pass: the MTP layer (and its experts) and the lm_head over one token per sequence."""
        c, tp = self.costs, self.topology.tp
        work = Work({c.dense_dtype: 2 * c.mtp_dense_params * batch.seqs / tp}, c.mtp_dense_bytes / tp)
        if c.mtp_moe:
            work = work + self._experts_work(batch.seqs * self.topology.dp)
        if self.kv_bytes_per_token:
            work = work + Work(
                {"bf16": c.attn_pair_flops_decode * batch.kv_tokens_read / tp},
                batch.kv_tokens_read * self.kv_bytes_per_token,
            )
        return work + Work({"bf16": 2 * c.lm_head_params * batch.seqs / tp}, c.lm_head_bytes / tp)

    # ------------------------------------------------------------------------------------ communication

    def _comm_times(self, batch: Batch, index: int, eff: Efficiency) -> dict[str, float]:
        info = self._stage_info[index]
        tp_time = ep_time = latency = network = 0.0
        for moe, count in ((True, info.moe), (False, info.layers - info.moe)):
            if not count:
                continue
            t, e, n = self._layer_comm_parts(batch.tokens, batch.ep_tokens, moe=moe, eff=eff)
            tp_time += count * t
            ep_time += count * e
            latency += count * n * eff.collective_latency_s
            network += count * self._network_calls(n, moe=moe) * scale_out_latency(self.gpu.name)
        out = {}
        if tp_time:
            out["tp_comm"] = tp_time
        if ep_time:
            out["ep_comm"] = ep_time
        if latency:
            out["collective_latency"] = latency
        if network:
            out["network_latency"] = network
        return out

    def _layer_comm(self, tokens: float, ep_tokens: float, *, moe: bool, eff: Efficiency) -> float:
        t, e, n = self._layer_comm_parts(tokens, ep_tokens, moe=moe, eff=eff)
        total = t + e + n * eff.collective_latency_s
        network = self._network_calls(n, moe=moe)
        return total + network * scale_out_latency(self.gpu.name) if network else total

    def _layer_comm_parts(
        self, tokens: float, ep_tokens: float, *, moe: bool, eff: Efficiency
    ) -> tuple[float, float, int]:
        """(TP seconds, EP seconds, collective calls) of one layer for one GPU (bytes from
        :meth:`_layer_comm_bytes` over each group's achieved bandwidth)."""
        tp_bytes, ep_bytes, calls = self._layer_comm_bytes(tokens, ep_tokens, moe=moe)
        topo = self.topology
        tp_link = group_bandwidth(self.gpu, topo.tp, eff)
        ep_link = group_bandwidth(self.gpu, topo.expert_shards, eff)
        return tp_bytes / tp_link, ep_bytes / ep_link, calls

    def _layer_comm_bytes(self, tokens: float, ep_tokens: float, *, moe: bool) -> tuple[float, float, int]:
        """(TP bytes, EP bytes, collective calls) of one layer for one GPU.

        * DP = 1: two all-reduces over TP (after the mixer, after the FFN/MoE): ``2 (t-1)/t`` of the
          activations each, one or two calls (:func:`~pdtune.perfmodel.network.allreduce_calls`).
        * DP > 1, MoE layer: the experts of the whole ``TP x DP`` group exchange tokens by all-gather
          (dispatch, in the experts' activation format) and reduce-scatter (combine, bf16): each GPU moves
          ``(G-1)/G`` of all the group's tokens each way. With TP > 1 vLLM runs the MoE sequence-parallel:
          the mixer output is reduce-scattered over TP and all-gathered again (one all-reduce's bytes).
        * DP > 1, dense layer: the TP all-reduces only.
        """
        c, topo, h = self.costs, self.topology, self.costs.hidden
        t, d = topo.tp, topo.dp
        tp_bytes, ep_bytes, calls = 0.0, 0.0, 0
        if moe and d > 1:
            g = topo.expert_shards
            dispatch = float(_activation_bytes(c.expert_dtype))
            ep_bytes = (g - 1) / g * ep_tokens * h * (dispatch + ACTIVATION_BYTES)
            calls += 2
            if t > 1:
                tp_bytes = 2 * (t - 1) / t * tokens * h * ACTIVATION_BYTES
                calls += 2
        elif t > 1:
            tp_bytes = 2 * 2 * (t - 1) / t * tokens * h * ACTIVATION_BYTES
            padded = graph_tokens(tokens, self.capture_limit, self.config.max_num_batched_tokens, self.config.vllm)
            calls += 2 * allreduce_calls(self.gpu, t, padded * h * ACTIVATION_BYTES)
        return tp_bytes, ep_bytes, calls


def window_fields(window: int | None, seqs: float, prefill_tokens: float, attn_pairs: float, decode_pairs: float,
                  kv_tokens_read: float) -> tuple[float, float, float]:
    """A sliding-window layer's share of a step's attention: (prompt pairs, decode pairs, KV tokens read inside the
    window). A decode token sees ``window / context`` of the batch's mean context (``kv_tokens_read / seqs``), a
    prompt token at most ``window`` positions before it; without a window every field is the full one."""
    if prefill_tokens:
        pre_pairs, dec_pairs = attn_pairs - decode_pairs, decode_pairs
    else:
        pre_pairs, dec_pairs = 0.0, attn_pairs
    if not window:
        return pre_pairs, dec_pairs, kv_tokens_read
    context = kv_tokens_read / seqs if seqs else 0.0
    share = min(1.0, window / context) if context > window else 1.0
    return min(pre_pairs, prefill_tokens * window), dec_pairs * share, kv_tokens_read * share


def _activation_bytes(expert_dtype: str) -> Fraction:
    """Bytes per element of the activations vLLM dispatches to the experts: quantised like the weights."""
    return {"fp4": Fraction(9, 16), "fp8": Fraction(1) + Fraction(1, 32), "bf16": Fraction(2)}[expert_dtype]


# ------------------------------------------------------------------------------------------ building


def stage_weights(spec: ModelSpec, topology: Topology, mtp: bool) -> int:
    """Weight bytes on one GPU of the heaviest pipeline stage (the whole model's share without PP)."""
    full = weights_per_gpu(spec, tp=topology.tp, ep=topology.expert_shards, mtp=mtp)
    if topology.pp == 1:
        return full.total
    costs = model_costs(spec)
    per_layer = [
        layer.dense_bytes + (costs.num_experts * costs.expert_bytes if layer.moe else 0)
        for layer in costs.layers
    ]
    layer_total = sum(per_layer)
    comps = dict(full.by_component)
    # Layer-resident components split with the layers; the embedding and lm_head sit on the first and
    # last stage; the MTP module (and the final norm) on the last.
    vocab = comps.pop("embedding", 0)
    if mtp:
        no_mtp = weights_per_gpu(spec, tp=topology.tp, ep=topology.expert_shards, mtp=False).total
        mtp_bytes = full.total - no_mtp
    else:
        mtp_bytes = 0
    layer_resident = sum(comps.values()) - mtp_bytes
    tied = spec.tie_word_embeddings
    heaviest = 0
    for i, stage in enumerate(stage_layers(spec.num_layers, topology.pp)):
        share = sum(per_layer[j] for j in stage) / layer_total
        total = layer_resident * share
        if i == 0:
            total += vocab if tied else vocab / 2
        if i == topology.pp - 1:
            total += (vocab if tied else vocab / 2) + mtp_bytes
        heaviest = max(heaviest, math.ceil(total))
    return heaviest


def build_engine(
    spec: ModelSpec,
    gpu: GpuSpec,
    topology: Topology,
    *,
    isl: int,
    osl: int,
    mtp_tokens: int = 0,
    config: EngineConfig | None = None,
) -> Engine:
    """Lay ``spec`` out as ``topology`` on ``gpu`` for requests of ``isl + osl`` tokens; check it fits."""
    config = config or EngineConfig()
    source = f"topology {topology.name}"
    if isl < 1 or osl < 1:
        raise InputError("--isl/--osl", "isl", f"must be positive, got {isl}/{osl}")
    if mtp_tokens < 0:
        raise InputError("--mtp", "mtp_tokens", "must not be negative")
    if mtp_tokens and spec.num_mtp_layers == 0:
        raise InputError(spec.source, "num_nextn_predict_layers", "the model has no MTP module for --mtp")
    from pdtune.scenario import layout_rules

    problem = layout_rules(spec, topology)  # the rules every command applies (+EP needs experts, ...)
    if problem:
        raise InputError(source, "topology", problem)
    if spec.moe is not None and spec.moe.num_experts % topology.ep:
        raise InputError(source, "ep", f"{spec.moe.num_experts} experts do not split over EP={topology.ep}")
    costs = model_costs(spec)
    plan = plan_state(
        spec,
        max_model_len=isl + osl + config.template_tokens,
        tp=topology.tp,
        kv_cache_dtype=config.kv_cache_dtype,
        num_speculative_tokens=mtp_tokens or config.num_speculative_tokens,
        vllm=config.vllm,
        prefix_caching=False,
        speculative_model=config.speculative_model,
        decode_context_parallel_size=config.decode_context_parallel_size,
        block_size=config.block_size,
    )
    weights = stage_weights(spec, topology, mtp=mtp_tokens > 0)
    overheads = engine_overheads(topology, mtp_tokens > 0, config)
    waterfall = Waterfall(
        total=gpu.memory_total,
        gpu_memory_utilization=config.gpu_memory_utilization,
        weights=weights,
        activation_peak=overheads.activation_peak,
        non_torch=overheads.non_torch,
        cudagraph_estimate=overheads.cudagraph_estimate,
        source=source,
        version=config.vllm,
    )
    kv = waterfall.kv_cache()
    stages = tuple(stage_layers(spec.num_layers, topology.pp))
    # A stage keeps the state of its own layers only: capacity grows by layers / heaviest stage's layers.
    per_stage = max(len(s) for s in stages)
    capacity = 0
    if kv > 0:
        capacity = math.floor(plan.capacity(kv).max_concurrency * spec.num_layers / per_stage)
    if config.max_num_seqs is not None:
        capacity = min(capacity, config.max_num_seqs)
    if capacity < 1:
        raise InputError(
            source,
            "kv_cache",
            f"does not fit on {gpu.name}: {weights / GiB:.1f} GiB of weights per GPU leave "
            f"{kv / GiB:.1f} GiB of KV cache, less than one {isl}+{osl}-token request "
            f"({plan.bytes_per_request / GiB:.2f} GiB per TP rank)",
        )
    return Engine(
        spec, gpu, topology, costs, plan, weights, overheads, kv, capacity, mtp_tokens, config, stages
    )
