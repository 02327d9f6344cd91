"""The memory waterfall of one GPU, from what is on the box down to the KV cache.

vLLM sizes the KV cache from what is left once everything else has been measured (``gpu_worker.py``,
``determine_available_memory``)::

    requested    = total * gpu_memory_utilization
    available_kv = requested - weights - activation_peak - non_torch - cudagraph_estimate

``total`` is what torch reports for the device (276.62 GiB on a GB300), not the box's marketing
capacity (279 GB). The CUDA context is already in use when vLLM takes its first memory snapshot, so it
sits inside the ``1 - gpu_memory_utilization`` reserve and is *not* subtracted: that is how the article's
table 3 adds up. The article's prose subtracts it anyway; :meth:`Waterfall.kv_cache` shows both.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cache

from pdtune.errors import InputError
from pdtune.limits import MAX_NUM_SEQS, MAX_SPECULATIVE_TOKENS, MAX_TOKENS_PER_STEP, bound
from pdtune.model import LayerKind, ModelSpec
from pdtune.paramcount import count_parameters, weight_bytes
from pdtune.units import GiB, MiB, cdiv


class Accounting(StrEnum):
    """Which arithmetic turns the parts into a KV cache size."""

    VLLM = "vllm"  # vLLM's own: the CUDA context lives inside the reserve (article table 3)
    ARTICLE_PROSE = "article-prose"  # the article's text: the CUDA context subtracted on top


@dataclass(frozen=True)
class WaterfallStep:
    """One bar of the waterfall: ``label`` takes ``bytes`` away from what was left before it."""

    key: str
    label: str
    bytes: int
    remaining_after: int


@dataclass(frozen=True)
class Waterfall:
    """Memory of one GPU (one vLLM worker), every part in bytes.

    ``capacity`` and ``driver`` only explain where ``total`` comes from; vLLM never sees them.
    """

    total: int
    gpu_memory_utilization: float
    weights: int
    activation_peak: int
    non_torch: int
    cudagraph_estimate: int
    cuda_context: int = 0
    capacity: int | None = None
    driver: int | None = None
    source: str = field(default="", compare=False)
    version: str = "0.26"  # vLLM line whose rounding of ``requested`` applies (the article ran 0.26.1)

    def __post_init__(self) -> None:
        for name in ("total", "weights", "activation_peak", "non_torch", "cudagraph_estimate", "cuda_context"):
            value = getattr(self, name)
            if value < 0:
                raise InputError(self.source or "waterfall", name, f"must not be negative, got {value}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InputError(
                self.source or "waterfall",
                "gpu_memory_utilization",
                f"must be in (0, 1], got {self.gpu_memory_utilization}",
            )

    @property
    def requested(self) -> int:
        """``total * gpu_memory_utilization``: rounded up where the line does (``request_memory``, from 0.20:
        ``rule:requested_memory_rounded_up``), truncated in 0.11."""
        from pdtune import switches

        exact = self.total * self.gpu_memory_utilization
        return math.ceil(exact) if switches.rule("requested_memory_rounded_up", self.version) else int(exact)

    @property
    def reserve(self) -> int:
        """The ``1 - gpu_memory_utilization`` share vLLM leaves alone (activation spikes, graph overrun)."""
        return self.total - self.requested

    @property
    def overhead(self) -> int:
        """Everything vLLM subtracts from ``requested`` besides the weights."""
        return self.activation_peak + self.non_torch + self.cudagraph_estimate

    def kv_cache(self, accounting: Accounting | str = Accounting.VLLM) -> int:
        """Bytes left for the KV cache; negative means the engine would refuse to start."""
        kv = self.requested - self.weights - self.overhead
        if Accounting(accounting) is Accounting.ARTICLE_PROSE:
            kv -= self.cuda_context
        return kv

    def steps(self, accounting: Accounting | str = Accounting.VLLM) -> list[WaterfallStep]:
        """The bars of the waterfall, top to bottom, ending with the KV cache."""
        parts: list[tuple[str, str, int]] = []
        if self.capacity is not None and self.driver is not None:
            parts.append(("driver", "driver and firmware", self.capacity - self.total))
        parts.append(("reserve", f"reserve (1 - {self.gpu_memory_utilization:g})", self.reserve))
        if Accounting(accounting) is Accounting.ARTICLE_PROSE:
            parts.append(("cuda_context", "CUDA context", self.cuda_context))
        parts += [
            ("non_torch", "non-torch (NCCL, allocator)", self.non_torch),
            ("weights", "weights", self.weights),
            ("activation_peak", "activation peak", self.activation_peak),
            ("cudagraph_estimate", "CUDA-graph estimate", self.cudagraph_estimate),
        ]
        left = self.capacity if self.capacity is not None and self.driver is not None else self.total
        steps = []
        for key, label, size in parts:
            left -= size
            steps.append(WaterfallStep(key, label, size, left))
        return steps

    def with_utilization(self, gpu_memory_utilization: float) -> Waterfall:
        return replace(self, gpu_memory_utilization=gpu_memory_utilization)

    def to_dict(self, accounting: Accounting | str = Accounting.VLLM) -> dict[str, float | int | str | None]:
        """GiB at the edge, for JSON and tables."""
        return {
            "total_gib": self.total / GiB,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "requested_gib": self.requested / GiB,
            "reserve_gib": self.reserve / GiB,
            "cuda_context_gib": self.cuda_context / GiB,
            "non_torch_gib": self.non_torch / GiB,
            "weights_gib": self.weights / GiB,
            "activation_peak_gib": self.activation_peak / GiB,
            "cudagraph_estimate_gib": self.cudagraph_estimate / GiB,
            "kv_cache_gib": self.kv_cache(accounting) / GiB,
            "accounting": str(Accounting(accounting)),
            "source": self.source,
        }


# ------------------------------------------------------------------------------------- CUDA graphs


class CUDAGraphMode(StrEnum):
    """``compilation_config.cudagraph_mode`` values that decide which graphs are captured."""

    FULL_DECODE_ONLY = "FULL_DECODE_ONLY"  # what the article measured: full graphs of pure-decode batches
    FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"  # vLLM's default: the above plus piecewise graphs of mixed batches
    PIECEWISE = "PIECEWISE"
    NONE = "NONE"


@dataclass(frozen=True)
class GraphPlan:
    """The graphs one engine captures; their count drives vLLM's memory estimate."""

    capture_sizes: tuple[int, ...]  # compilation_config.cudagraph_capture_sizes, after spec rounding
    full_sizes: tuple[int, ...]  # FULL graphs of uniform decode batches (tokens per graph)
    piecewise_sizes: tuple[int, ...]  # PIECEWISE graphs of mixed batches
    max_capture_size: int
    decode_query_len: int

    @property
    def count(self) -> int:
        return len(self.full_sizes) + len(self.piecewise_sizes)

    def to_dict(self) -> dict[str, object]:
        return {
            "count": self.count,
            "sizes": list(self.full_sizes or self.piecewise_sizes),
            "full": len(self.full_sizes),
            "piecewise": len(self.piecewise_sizes),
            "capture_sizes": list(self.capture_sizes),
            "max_capture_size": self.max_capture_size,
            "decode_query_len": self.decode_query_len,
        }


def capture_sizes(max_capture_size: int, max_num_batched_tokens: int, vllm: str = "0.33") -> list[int]:
    """vLLM's default capture list below ``max_capture_size``: 1, 2, 4, then every 8 to 248, every 16 from 256
    (0.11: every 8 throughout).

    ``max_num_batched_tokens`` caps the list and, from 0.21, is added when it fits (``_set_cudagraph_sizes``).
    The strides and the rule are the switches table's (``value:cudagraph.capture_sizes.*``,
    ``rule:cudagraph.capture_sizes_include_max_num_batched_tokens``).
    """
    from pdtune import switches

    small = switches.number("value:cudagraph.capture_sizes.step_below_256", vllm)
    large = switches.number("value:cudagraph.capture_sizes.step_from_256", vllm) or small
    assert isinstance(small, int) and isinstance(large, int)
    ceiling = min(max_capture_size, max_num_batched_tokens)
    sizes = [n for n in (1, 2, 4) if n <= ceiling]
    sizes += list(range(8, min(ceiling + 1, 256), small))
    sizes += list(range(256, ceiling + 1, large)) if large != small else list(range(256, ceiling + 1, small))
    if (switches.rule("cudagraph.capture_sizes_include_max_num_batched_tokens", vllm)
            and max_num_batched_tokens <= ceiling and max_num_batched_tokens not in sizes):
        sizes.append(max_num_batched_tokens)
    return sorted(set(sizes))


@cache
def _sizes(max_capture_size: int, max_num_batched_tokens: int, vllm: str) -> tuple[int, ...]:
    return tuple(capture_sizes(max_capture_size, max_num_batched_tokens, vllm))


def graph_tokens(tokens: float, max_capture_size: int, max_num_batched_tokens: int, vllm: str = "0.33") -> float:
    """The tokens a step of ``tokens`` runs with: up to the largest of :func:`capture_sizes` vLLM pads the batch
    to the next captured size (``CudagraphDispatcher``; a mean over ranks is rounded up to whole tokens first); a
    larger step runs eagerly as it is."""
    sizes = _sizes(max_capture_size, max_num_batched_tokens, vllm)
    i = bisect_left(sizes, max(1, math.ceil(tokens - 1e-9)))
    return float(sizes[i]) if i < len(sizes) else tokens


def default_max_num_batched_tokens(max_num_seqs: int, num_speculative_tokens: int = 0) -> int:
    """The article's ``max-num-batched-tokens``: one full decode step of every sequence, plus 16 tokens."""
    return max_num_seqs * (1 + num_speculative_tokens) + 16



def vllm_batch_defaults(gpu_memory_bytes: int | None, *, vllm: str, device_name: str = "",
                        usage: str = "serve") -> tuple[int, int]:
    """vLLM's ``max_num_batched_tokens`` and ``max_num_seqs`` defaults for one GPU, before the adjustments of
    :func:`vllm_default_max_num_batched_tokens`: ``EngineArgs.get_batch_defaults``' tiers, read from the switches
    table (``batch:*`` rows of data/vllm/switches.csv). Each tier has a memory threshold and device names kept
    off it (A100; GB10 from 0.33); the first tier the GPU reaches gives the value for the usage context
    (``serve``: the OpenAI server, ``llm``: the ``LLM`` class). A device that cannot be queried (memory None)
    takes the smallest tier."""
    from pdtune import switches

    if usage not in ("serve", "llm"):
        raise InputError("--usage", "usage", f"use serve or llm, got {usage!r}")
    name = device_name.lower()
    memory = gpu_memory_bytes or 0
    for tier in ("large", "medium", "small"):
        threshold = switches.number(f"batch:{tier}.min_memory_gib", vllm)
        if threshold is None:
            continue  # the line has no such tier (the 160 GiB tier is 0.28+)
        kept_off = switches.value(f"batch:{tier}.excluded_devices", vllm).split()
        if memory >= threshold * GiB and not any(device in name for device in kept_off):
            tokens = switches.number(f"batch:{tier}.max_num_batched_tokens.{usage}", vllm)
            seqs = switches.number(f"batch:{tier}.max_num_seqs.{usage}", vllm)
            assert isinstance(tokens, int) and isinstance(seqs, int)
            return tokens, seqs
    raise AssertionError("the smallest tier has no threshold")  # its threshold is 0: never reached


def vllm_default_max_num_batched_tokens(
    gpu_memory_bytes: int | None,
    *,
    vllm: str,
    device_name: str = "",
    max_model_len: int | None = None,
    usage: str = "serve",
    throughput_mode: bool = False,
    chunked_prefill: bool = True,
    max_num_seqs: int | None = None,
) -> int:
    """vLLM's default ``--max-num-batched-tokens`` when none is given, by GPU memory (one GPU, as torch sees it).

    ``EngineArgs.get_batch_defaults`` and ``_set_default_max_num_seqs_and_batched_tokens_args``
    (vllm/engine/arg_utils.py), every value and boundary from the switches table (:func:`vllm_batch_defaults`):

    * >= 160 GiB (0.28+: B200/B300, GB300): 16384 for ``vllm serve`` and the ``LLM`` class;
    * >= 70 GiB and not an A100 (and, 0.33, not a GB10): serve 8192, ``LLM`` 16384;
    * otherwise, or when the device cannot be queried (``gpu_memory_bytes`` None): serve 2048, ``LLM`` 8192;
    * ``--performance-mode throughput`` (where the line has it, ``arg:performance_mode``) doubles it; without
      chunked prefill the line takes ``max_model_len`` (0.11,
      ``rule:batch_default_without_chunked_prefill_is_max_model_len``) or ``max(max_model_len, default)``; the
      default is then capped at ``max_num_seqs x max_model_len`` where the line does
      (``rule:batch_default_capped_by_max_num_seqs_x_max_model_len``).
    """
    from pdtune import switches

    tokens, seqs = vllm_batch_defaults(gpu_memory_bytes, vllm=vllm, device_name=device_name, usage=usage)
    if switches.rule("batch_default_without_chunked_prefill_is_max_model_len", vllm):
        return max_model_len if not chunked_prefill and max_model_len is not None else tokens
    if throughput_mode and switches.value("arg:performance_mode", vllm) != switches.ABSENT:
        tokens *= 2
        seqs *= 2
    if max_model_len is not None:
        if not chunked_prefill:
            tokens = max(max_model_len, tokens)
        if switches.rule("batch_default_capped_by_max_num_seqs_x_max_model_len", vllm):
            tokens = min((max_num_seqs or seqs) * max_model_len, tokens)
    return tokens

def cudagraph_plan(
    max_num_seqs: int,
    *,
    num_speculative_tokens: int = 0,
    max_capture_size: int | None = None,
    max_num_batched_tokens: int | None = None,
    mode: CUDAGraphMode | str = CUDAGraphMode.FULL_DECODE_ONLY,
) -> GraphPlan:
    """Which CUDA graphs an engine captures (vLLM 0.33 ``_set_cudagraph_sizes`` and the graph dispatcher).

    Defaults follow the article's decode test runs: ``max_capture_size = max_num_seqs * (1 + spec)``
    (set with ``max-cudagraph-capture-size``) and ``max_num_batched_tokens = max_num_seqs * (1 + spec) + 16``.
    With speculative decoding every size is rounded up to a multiple of ``1 + spec`` (a decode batch is
    that many tokens per request); FULL decode graphs cover ``1 + spec`` to ``max_num_seqs * (1 + spec)``.
    """
    if max_num_seqs <= 0:
        raise InputError("--max-num-seqs", "max_num_seqs", f"must be positive, got {max_num_seqs}")
    bound(max_num_seqs, MAX_NUM_SEQS, "--max-num-seqs", "max_num_seqs", "sequences per engine pdtune accepts")
    if num_speculative_tokens < 0:
        raise InputError("--num-speculative-tokens", "num_speculative_tokens", "must not be negative")
    bound(num_speculative_tokens, MAX_SPECULATIVE_TOKENS, "--num-speculative-tokens", "num_speculative_tokens")
    q = 1 + num_speculative_tokens
    max_capture = max_capture_size if max_capture_size is not None else max_num_seqs * q
    mnbt = (max_num_batched_tokens if max_num_batched_tokens is not None
            else default_max_num_batched_tokens(max_num_seqs, num_speculative_tokens))
    for flag, value in (("--max-capture-size", max_capture), ("--max-num-batched-tokens", mnbt)):
        name = flag.lstrip("-").replace("-", "_")
        if value <= 0:
            raise InputError(flag, name, f"must be positive, got {value}")
        # the capture list holds one size per 16 tokens up to this: bounded, so is the list
        bound(value, MAX_TOKENS_PER_STEP, flag, name, "tokens per step pdtune accepts")
    sizes = capture_sizes(max_capture, mnbt)
    ceiling = sizes[-1]
    if q > 1:  # adjust_cudagraph_sizes_for_spec_decode
        rounded = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= ceiling})
        sizes = rounded or ([q] if q <= ceiling else [])
        if not sizes:
            raise InputError("--max-capture-size", "max_capture_size",
                             f"no capture size is a multiple of {q} (1 + speculative tokens) below {ceiling}")
    graph_mode = CUDAGraphMode(mode)
    full: tuple[int, ...] = ()
    piecewise: tuple[int, ...] = ()
    if graph_mode in (CUDAGraphMode.FULL_DECODE_ONLY, CUDAGraphMode.FULL_AND_PIECEWISE):
        full = tuple(s for s in sizes if q <= s <= q * max_num_seqs)
    if graph_mode in (CUDAGraphMode.FULL_AND_PIECEWISE, CUDAGraphMode.PIECEWISE):
        piecewise = tuple(sizes)
    return GraphPlan(tuple(sizes), full, piecewise, sizes[-1], q)


def max_utilization(total: float, cuda_context: float, graph_overrun: float) -> float:
    """The highest ``gpu_memory_utilization`` a run tolerates (any one unit for all three).

    vLLM starts only when ``total x utilization`` is free once the CUDA context exists, and graph memory beyond
    the estimate spills into what the reserve leaves: ``(total - context - overrun) / total``.
    """
    if total <= 0:
        raise InputError("--total-gib", "total_gib", f"must be positive, got {total}")
    return (total - cuda_context - graph_overrun) / total


def cudagraph_estimate(first_capture: int, per_graph: int, count: int) -> int:
    """vLLM's reservation for ``count`` graphs: the largest graph's memory plus ``count - 1`` increments.

    The increment is what the second-largest capture added; vLLM floors it at 1 MiB of driver overhead.
    """
    if count <= 0:
        return 0
    return first_capture + (count - 1) * max(per_graph, MiB)


def implied_increment(estimate: int, first_capture: int, count: int) -> float:
    """Invert :func:`cudagraph_estimate`: the per-graph increment a logged estimate implies."""
    return (estimate - first_capture) / (count - 1) if count > 1 else 0.0


# ------------------------------------------------------------------------------------- weights per GPU


@dataclass(frozen=True)
class WeightsPerGpu:
    """Weight bytes one GPU holds under a parallel layout, by component."""

    by_component: dict[str, int]
    tp: int
    expert_shards: int
    mtp: bool

    @property
    def total(self) -> int:
        return sum(self.by_component.values())

    def gib(self) -> dict[str, float]:
        return {k: v / GiB for k, v in self.by_component.items()}


def weights_per_gpu(spec: ModelSpec, *, tp: int, ep: int | None = None, mtp: bool = False) -> WeightsPerGpu:
    """Bytes of weights on one GPU when attention runs TP-``tp`` and experts split ``ep`` ways.

    ``ep=None`` means no expert parallelism: each expert is itself TP-sharded, which costs the same bytes
    per GPU as ``ep=tp``. Routers and norms are replicated on every rank; GQA k/v projections stop
    shrinking once TP exceeds the KV heads (vLLM replicates the heads). ``mtp`` adds the draft layers.
    """
    if tp <= 0:
        raise InputError("--tp", "tp", f"must be positive, got {tp}")
    shards = ep if ep is not None else tp
    if shards <= 0:
        raise InputError("--ep", "ep", f"must be positive, got {shards}")
    params = count_parameters(spec)
    count = params.main + params.mtp if mtp else params.main
    full = weight_bytes(spec, count).by_component
    kv_split = tp
    if spec.attention is not None and spec.attention.num_kv_heads < tp:
        kv_split = spec.attention.num_kv_heads
    divisor = {
        "embedding": tp,
        "attention": tp,
        "attention_kv": kv_split,
        "gdn": tp,
        "mamba": tp,
        "dense_mlp": tp,
        "shared_experts": tp,
        "experts": shards,
        "router": 1,
        "norms": 1,
    }
    per_gpu = {name: cdiv(size, divisor[name]) for name, size in full.items()}
    if spec.attention is not None and spec.sliding_attention is not None:
        per_gpu["attention_kv"] = _kv_projections_per_gpu(spec, full["attention_kv"], tp, mtp)
    return WeightsPerGpu(per_gpu, tp, shards, mtp)


def _kv_projections_per_gpu(spec: ModelSpec, total: int, tp: int, mtp: bool) -> int:
    """k/v projection bytes on one rank when full and sliding layers have their own KV heads (MiMo-V2-Flash:
    4 and 8): each layer's share of ``total`` shrinks with TP until TP reaches that layer's KV heads."""
    shares: dict[int, int] = {}
    kinds = list(spec.layer_kinds) + [spec.attention_kind] * (spec.num_mtp_layers if mtp else 0)
    for kind in kinds:
        a = spec.attention_for(kind)
        if a is None or kind not in (LayerKind.FULL_ATTENTION, LayerKind.SLIDING_ATTENTION):
            continue
        split = min(tp, a.num_kv_heads)
        shares[split] = shares.get(split, 0) + a.num_kv_heads * (a.head_dim + a.v_head_dim)
    whole = sum(shares.values())
    if not whole:
        return 0
    return sum(cdiv(total * share, whole * split) for split, share in shares.items())
