"""Workloads as the benchmark harnesses drive a server: closed loops of clients, arrivals at a rate, traces.

A :class:`Workload` is a list of *phases* run one after the other (each one's requests all finish before the
next starts, as a warm-up run finishes before the measured one); only the last phase is measured. A phase is
its requests (prompt and output tokens), the time each becomes ready to send, and a cap on requests in
flight (the harness's ``--max-concurrency``; none for a pure open loop).

How each harness draws lengths and starts clients, read from its source:

* ``vllm bench serve`` (vLLM 0.33, ``vllm/benchmarks/serve.py`` and ``datasets/utils.py:get_sampling_params``):
  the random dataset draws input lengths uniformly from the integers ``[floor(n (1 - r)), ceil(n (1 + r))]``
  (``n`` the input length less the tokenizer's special tokens, ``r`` ``--random-range-ratio``), then output
  lengths likewise (at least 1), from ``numpy.random.default_rng(seed)`` (``--seed`` 0). Before the run an
  initial test request (the first prompt) checks the endpoint, then ``--num-warmups`` copies of it run under the
  same semaphore; then every request is released at once (``--request-rate inf``) behind an
  ``asyncio.Semaphore(max_concurrency)``: a closed loop of ``C`` clients. With a rate, send times are
  gamma-distributed gaps (shape ``--burstiness``, 1 = Poisson) rescaled so the last one is at
  ``num_prompts / rate``. The test and warm-up requests repeat the first prompt, so with prefix caching the
  first measured request finds its prompt cached (simulated: they share its content).
* srt-slurm's sa-bench (srtctl 0.3.0's ``srtctl/benchmarks/scripts/sa-bench/bench.sh`` and its
  ``benchmark_serving.py``): ``--random-range-ratio 0.8`` by default and the older rule, lengths uniform on
  ``[int(n r), n]`` from ``numpy.random.seed(seed)``'s ``randint``; ``10 x C`` prompts, after a separate
  warm-up run of ``2 x C`` prompts at the same concurrency; ``--ignore-eos``.
* AIPerf's concurrency mode (``--concurrency``, ``--synthetic-input-tokens-mean/-stddev``,
  ``--output-tokens-mean/-stddev``, ``--warmup-request-count``, ``--request-count``): lengths from a normal
  distribution, rounded and kept at least 1; the warm-up requests run first.

Every harness here sets ``ignore_eos``: a request produces exactly its output length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pdtune import limits
from pdtune.errors import InputError


@dataclass(frozen=True)
class RequestSpec:
    """One request: prompt tokens, output tokens, and the shared prefix it starts with (if any)."""

    isl: int
    osl: int
    prefix_id: int | None = None  # requests with the same prefix_id share their first prefix_len tokens
    prefix_len: int = 0


@dataclass(frozen=True)
class Phase:
    """Requests sent under one cap on requests in flight; ``ready`` is when each may be sent (seconds after the
    phase starts), in order."""

    requests: tuple[RequestSpec, ...]
    ready: tuple[float, ...]
    concurrency: int | None  # None: no cap (an open loop)
    name: str = "main"

    def __post_init__(self) -> None:
        if len(self.ready) != len(self.requests):
            raise InputError("workload", "ready", f"{len(self.ready)} send times for {len(self.requests)} requests")
        if not self.requests:
            raise InputError("workload", "num_prompts", "a phase needs at least one request")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError("--concurrency", "concurrency", "must be at least 1")


@dataclass(frozen=True)
class Workload:
    """Phases run in turn; the last one is measured."""

    phases: tuple[Phase, ...]
    label: str = ""

    @property
    def main(self) -> Phase:
        return self.phases[-1]

    @property
    def max_len(self) -> int:
        """The longest request (prompt + output) of any phase: what ``max_model_len`` must hold."""
        return max(r.isl + r.osl for p in self.phases for r in p.requests)

    @property
    def concurrency(self) -> int | None:
        return self.main.concurrency


def _check_lengths(isl: int, osl: int) -> None:
    for name, value in (("--isl", isl), ("--osl", osl)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(name, name[2:], f"must be a whole number of tokens >= 1, got {value!r}")
        limits.bound(int(value), limits.MAX_MODEL_LEN, name, name[2:])


def _check_count(value: int, flag: str) -> None:
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(flag, flag[2:].replace("-", "_"), f"must be a whole number >= 1, got {value!r}")
    limits.bound(int(value), limits.MAX_CONCURRENCY, flag, flag[2:].replace("-", "_"))


def _ratio(range_ratio: float, upper: float = 1.0) -> float:
    if not (isinstance(range_ratio, (int, float)) and math.isfinite(range_ratio) and 0 <= range_ratio < upper):
        raise InputError("--range-ratio", "range_ratio", f"must be in [0, {upper:g}), got {range_ratio!r}")
    return float(range_ratio)


def vllm_bench_lengths(num: int, isl: int, osl: int, range_ratio: float = 0.0, seed: int = 0,
                       special_tokens: int = 0) -> list[tuple[int, int]]:
    """``get_sampling_params`` of vLLM 0.33's random dataset (see the module); ``special_tokens`` is the
    tokenizer's ``num_special_tokens_to_add`` (added back to each prompt: BOS and the like)."""
    r = _ratio(range_ratio)
    real = max(0, isl - special_tokens)
    rng = np.random.default_rng(seed)
    lo, hi = math.floor(real * (1 - r)), math.ceil(real * (1 + r))
    olo, ohi = max(math.floor(osl * (1 - r)), 1), max(math.ceil(osl * (1 + r)), 1)
    inputs = rng.integers(lo, hi + 1, size=num)
    outputs = rng.integers(olo, ohi + 1, size=num)
    return [(max(1, int(i) + special_tokens), int(o)) for i, o in zip(inputs, outputs, strict=True)]


def sa_bench_lengths(num: int, isl: int, osl: int, range_ratio: float = 0.8, seed: int = 0) -> list[tuple[int, int]]:
    """sa-bench's ``sample_random_requests``: ``randint(int(n r), n + 1)`` after ``numpy.random.seed(seed)``."""
    r = _ratio(range_ratio, 1.0 + 1e-12)
    state = np.random.RandomState(seed)
    inputs = state.randint(int(isl * r) if isl > 1 else 1, isl + 1, size=num)
    outputs = state.randint(int(osl * r) if osl > 1 else 1, osl + 1, size=num)
    return [(max(1, int(i)), max(1, int(o))) for i, o in zip(inputs, outputs, strict=True)]


def normal_lengths(num: int, isl: int, osl: int, isl_stddev: float = 0.0, osl_stddev: float = 0.0,
                   seed: int = 0) -> list[tuple[int, int]]:
    """AIPerf's synthetic lengths: normal around the means, rounded, at least 1."""
    for name, value in (("--isl-stddev", isl_stddev), ("--osl-stddev", osl_stddev)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(name, name[2:].replace("-", "_"), f"must be >= 0, got {value!r}")
    rng = np.random.default_rng(seed)
    inputs = np.rint(rng.normal(isl, isl_stddev, size=num)) if isl_stddev else np.full(num, isl)
    outputs = np.rint(rng.normal(osl, osl_stddev, size=num)) if osl_stddev else np.full(num, osl)
    return [(max(1, int(i)), max(1, int(o))) for i, o in zip(inputs, outputs, strict=True)]


def _specs(lengths: list[tuple[int, int]]) -> tuple[RequestSpec, ...]:
    return tuple(RequestSpec(i, o) for i, o in lengths)


def closed_loop(concurrency: int, isl: int, osl: int, *, num_prompts: int | None = None,
                range_ratio: float | None = None, warmups: int | None = None, seed: int = 0, harness: str = "vllm-bench", isl_stddev: float = 0.0,
                osl_stddev: float = 0.0, special_tokens: int = 0, ready_check: bool | None = None) -> Workload:
    """``concurrency`` clients, each sending its next request when the last one finishes, as ``harness``
    drives them (``vllm-bench``, ``sa-bench`` or ``aiperf``; see the module). ``num_prompts`` defaults to the
    harness's (vLLM bench 1000, sa-bench ``10 x C``, AIPerf ``10 x C``); ``warmups`` to its (0, ``2 x C``, 0)."""
    _check_count(concurrency, "--concurrency")
    _check_lengths(isl, osl)
    if harness == "sa-bench":
        n = num_prompts if num_prompts is not None else 10 * concurrency
        _check_count(n, "--num-prompts")
        ratio = 0.8 if range_ratio is None else range_ratio
        main = sa_bench_lengths(n, isl, osl, ratio, seed)
        w = 2 * concurrency if warmups is None else warmups
        check = ready_check is not False
        phases = []
        if w:  # a separate benchmark_serving.py run: its own test request, then 2 x C prompts
            warm = sa_bench_lengths(w, isl, osl, ratio, seed)
            phases += _vllm_style_warmup(warm, concurrency, check, 0, "warmup run")
            phases.append(_main(warm, concurrency, shared_first=check, name="warmup run"))
        phases += _vllm_style_warmup(main, concurrency, check, 0, "ready check", prefix_id=1)
        phases.append(_main(main, concurrency, shared_first=check, prefix_id=1))
        return Workload(tuple(phases), f"sa-bench closed loop C={concurrency} ISL={isl} OSL={osl} r={ratio:g}")
    if harness == "aiperf":
        n = num_prompts if num_prompts is not None else 10 * concurrency
        _check_count(n, "--num-prompts")
        lengths = normal_lengths(n + (warmups or 0), isl, osl, isl_stddev, osl_stddev, seed)
        phases = []
        if warmups:
            phases.append(Phase(_specs(lengths[:warmups]), (0.0,) * warmups, concurrency, "warmup"))
        main = lengths[warmups or 0:]
        phases.append(Phase(_specs(main), (0.0,) * len(main), concurrency))
        return Workload(tuple(phases), f"AIPerf concurrency {concurrency} ISL={isl} OSL={osl}")
    if harness != "vllm-bench":
        raise InputError("--harness", "harness", f"unknown harness {harness!r}; known: vllm-bench, sa-bench, aiperf")
    n = num_prompts if num_prompts is not None else 1000
    _check_count(n, "--num-prompts")
    lengths = vllm_bench_lengths(n, isl, osl, range_ratio or 0.0, seed, special_tokens)
    check = ready_check is not False
    phases = _vllm_style_warmup(lengths, concurrency, check, warmups or 0, "warmup")
    phases.append(_main(lengths, concurrency, shared_first=check or bool(warmups)))
    return Workload(tuple(phases), f"vllm bench serve --max-concurrency {concurrency} ISL={isl} OSL={osl}")


def _vllm_style_warmup(lengths: list[tuple[int, int]], concurrency: int, ready_check: bool, warmups: int,
                       name: str, prefix_id: int = 0) -> list[Phase]:
    """The initial test request and the warm-ups: copies of the first prompt (``test_input``)."""
    isl, osl = lengths[0]
    first = RequestSpec(isl, osl, prefix_id=prefix_id, prefix_len=isl)
    phases = []
    if ready_check:
        phases.append(Phase((first,), (0.0,), 1, "ready check"))
    if warmups:
        phases.append(Phase((first,) * warmups, (0.0,) * warmups, concurrency, name))
    return phases


def _main(lengths: list[tuple[int, int]], concurrency: int | None, *, shared_first: bool,
          ready: tuple[float, ...] | None = None, name: str = "main", prefix_id: int = 0) -> Phase:
    specs = list(_specs(lengths))
    if shared_first:
        isl, osl = lengths[0]
        specs[0] = RequestSpec(isl, osl, prefix_id=prefix_id, prefix_len=isl)
    return Phase(tuple(specs), ready if ready is not None else (0.0,) * len(specs), concurrency, name)


def open_loop(rate: float, isl: int, osl: int, *, num_prompts: int = 1000, range_ratio: float = 0.0,
              burstiness: float = 1.0, seed: int = 0, max_concurrency: int | None = None,
              special_tokens: int = 0) -> Workload:
    """``vllm bench serve --request-rate R [--burstiness B] [--max-concurrency C]``: gamma-distributed gaps
    (Poisson for ``B = 1``), rescaled so the last request is sent at ``num_prompts / R``."""
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise InputError("--rate", "request_rate", f"must be a positive number of requests/s, got {rate!r}")
    if not (isinstance(burstiness, (int, float)) and burstiness > 0):
        raise InputError("--burstiness", "burstiness", f"must be positive, got {burstiness!r}")
    _check_lengths(isl, osl)
    _check_count(num_prompts, "--num-prompts")
    if max_concurrency is not None:
        _check_count(max_concurrency, "--max-concurrency")
    lengths = vllm_bench_lengths(num_prompts, isl, osl, range_ratio, seed, special_tokens)
    rng = np.random.default_rng(seed + 1)
    if math.isinf(burstiness):
        gaps = np.full(num_prompts, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=num_prompts)
    times = np.cumsum(gaps)
    if times[-1] > 0:
        times *= (num_prompts / rate) / times[-1]
    phases = [Phase((RequestSpec(*lengths[0], prefix_id=0, prefix_len=lengths[0][0]),), (0.0,), 1, "ready check"),
              _main(lengths, max_concurrency, shared_first=True, ready=tuple(float(t) for t in times))]
    return Workload(tuple(phases), f"open loop {rate:g} req/s ISL={isl} OSL={osl}")


def trace(rows: list[tuple[float, int, int]], *, source: str = "--trace", max_concurrency: int | None = None) -> Workload:
    """A trace: (arrival seconds, ISL, OSL) per request, sent at their arrival times."""
    if not rows:
        raise InputError(source, "rows", "the trace has no requests")
    out = []
    last = 0.0
    for i, (t, isl, osl) in enumerate(rows):
        if not (math.isfinite(t) and t >= 0):
            raise InputError(source, f"row {i + 1}: arrival_s", f"must be a time >= 0, got {t!r}")
        if t < last:
            raise InputError(source, f"row {i + 1}: arrival_s", "arrival times must not decrease")
        last = t
        try:
            _check_lengths(isl, osl)
        except InputError as exc:
            raise InputError(source, f"row {i + 1}: {exc.field}", exc.message) from None
        out.append((float(t), int(isl), int(osl)))
    phase = Phase(tuple(RequestSpec(i, o) for _, i, o in out), tuple(t for t, _, _ in out), max_concurrency)
    return Workload((phase,), f"trace of {len(out)} requests")


TRACE_COLUMNS = ("arrival_s", "isl", "osl")


def read_trace(path: str | Path) -> Workload:
    """A trace CSV with columns ``arrival_s,isl,osl`` (one row per request), read by the guarded reader."""
    from pdtune.guarded import read_csv_table

    source = str(path)
    table = read_csv_table(Path(path), TRACE_COLUMNS)
    rows = []
    for i, record in enumerate(table, start=1):
        values = []
        for col in TRACE_COLUMNS:
            value = record[col]
            if len(str(value)) > 64:
                raise InputError(source, f"row {i}: {col}", f"expected a number, got {len(str(value)):,} characters")
            try:
                x = float(value)
            except (TypeError, ValueError):
                raise InputError(source, f"row {i}: {col}", f"expected a number, got {value!r}") from None
            if not math.isfinite(x):
                raise InputError(source, f"row {i}: {col}", f"expected a finite number, got {value!r}")
            if col != "arrival_s" and x != int(x):
                raise InputError(source, f"row {i}: {col}", f"expected a whole number of tokens, got {value!r}")
            values.append(x)
        rows.append((values[0], int(values[1]), int(values[2])))
    return trace(rows, source=source)
