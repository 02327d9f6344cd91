"""What a simulated run reports: per request TTFT, TPOT, ITL, E2E; per run their median, p90, p99, throughput;
the timeline; and the same row as a measured result in pdtune's tidy schema, labelled modeled.

The statistics are computed the way ``vllm bench serve`` computes them (``vllm/benchmarks/serve.py``,
``calculate_metrics``): TTFT from the request's send to its first token, TPOT per request as
``(E2E - TTFT) / (output tokens - 1)`` over requests with more than one output token, ITL as every gap between
two consecutive streamed chunks (a speculative step's tokens arrive as one chunk), percentiles by
``numpy.percentile``'s linear interpolation, throughput over the measured phase's duration (first send to
last token). ``tps_per_user`` is ``1000 / median TPOT`` (design.md's schema). Every number is **modeled**.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pdtune.sim.engine import Timeline

SOURCE = "pdtune-sim"
PERCENTILES = (50, 90, 99)

#: Columns of the per-request CSV (``pdtune simulate --csv``), every time in milliseconds.
REQUEST_COLUMNS = ("request", "engine", "isl", "osl", "send_ms", "arrive_ms", "ttft_ms", "tpot_ms", "e2e_ms",
                   "itl_ms_mean", "itl_ms_max", "chunks", "preemptions", "kv_transfer_ms", "modeled")


@dataclass(frozen=True)
class RequestRecord:
    """One measured-phase request of a simulated run (seconds)."""

    index: int
    engine: int  # the DP rank or pool engine that decoded it
    isl: int
    osl: int
    t_send: float
    t_arrive: float
    t_first: float
    t_last: float
    chunks: tuple[float, ...]  # when each streamed chunk of tokens arrived
    preemptions: int
    kv_transfer_s: float = 0.0
    chunk_tokens: tuple[int, ...] = ()  # tokens in each chunk (more than 1 with speculative decoding)
    front_scale: float = 1.0  # this request's front-end time over the mean (SimConfig.overhead_cv's draw)

    @property
    def ttft(self) -> float:
        return self.t_first - self.t_send

    @property
    def e2e(self) -> float:
        return self.t_last - self.t_send

    @property
    def tpot(self) -> float:
        """``(E2E - TTFT) / (OSL - 1)``; NaN for a one-token request (vLLM bench leaves those out)."""
        return (self.t_last - self.t_first) / (self.osl - 1) if self.osl > 1 else math.nan

    @property
    def itls(self) -> np.ndarray:
        return np.diff(np.asarray(self.chunks)) if len(self.chunks) > 1 else np.zeros(0)


@dataclass
class SimResult:
    """A simulated benchmark run (modeled)."""

    records: list[RequestRecord]
    duration_s: float
    gpus: int
    timelines: dict[str, Timeline]
    preemptions: int
    steps: int
    meta: dict[str, Any] = field(default_factory=dict)
    warmup_requests: int = 0
    notes: list[str] = field(default_factory=list)
    cost: Any = field(default=None, repr=False)  # the StepCost used (reuse it: its cached terms stay valid)

    # ------------------------------------------------------------------------------- statistics

    def values(self, metric: str) -> np.ndarray:
        """Seconds of ``ttft``, ``tpot``, ``e2e`` per request, or every ``itl`` gap."""
        if metric == "itl":
            # Every request's gaps at once: one diff over all chunk times, less the gaps between requests.
            records = self.records
            if not records:
                return np.zeros(0)
            times = np.fromiter(itertools.chain.from_iterable(r.chunks for r in records), dtype=float)
            ends = np.cumsum([len(r.chunks) for r in records])
            return np.delete(np.diff(times), ends[:-1] - 1)
        if metric == "tpot":
            return np.asarray([r.tpot for r in self.records if r.osl > 1], dtype=float)
        return np.asarray([getattr(r, metric) for r in self.records], dtype=float)

    def percentile_ms(self, metric: str, p: float) -> float:
        v = self.values(metric)
        return float(np.percentile(v, p)) * 1e3 if v.size else math.nan

    @property
    def output_tokens(self) -> int:
        return sum(r.osl for r in self.records)

    @property
    def input_tokens(self) -> int:
        return sum(r.isl for r in self.records)

    def stats(self, *, itl: bool = True) -> dict[str, float]:
        """Median, p90, p99 (and mean) of TTFT, TPOT, ITL and E2E in ms; throughputs in tokens/s (computed once
        per set of records: a row's summary and its tidy row both read them). ``itl=False`` leaves the ITL keys
        out: their percentiles sort every token's gap (42 million in a 4,000-client plan row, 2 of its 11 s)."""
        key = (id(self.records), len(self.records), self.duration_s, itl)
        cached = self.__dict__.get("_stats")
        if cached is not None and cached[0] == key:
            return dict(cached[1])
        out: dict[str, float] = {"requests": float(len(self.records)), "duration_s": self.duration_s}
        for metric in ("ttft", "tpot", "itl", "e2e") if itl else ("ttft", "tpot", "e2e"):
            v = self.values(metric)
            out[f"{metric}_ms_mean"] = float(v.mean()) * 1e3 if v.size else math.nan
            qs = np.percentile(v, PERCENTILES) if v.size else [math.nan] * len(PERCENTILES)
            for p, q in zip(PERCENTILES, qs, strict=True):
                out[f"{metric}_ms_p{p}"] = float(q) * 1e3
        d = self.duration_s
        out["output_tps"] = self.output_tokens / d if d > 0 else math.nan
        out["total_tps"] = (self.output_tokens + self.input_tokens) / d if d > 0 else math.nan
        out["request_rate"] = len(self.records) / d if d > 0 else math.nan
        out["tps_per_gpu"] = out["total_tps"] / self.gpus
        out["output_tps_per_gpu"] = out["output_tps"] / self.gpus
        out["tps_per_user"] = 1000.0 / out["tpot_ms_p50"] if out["tpot_ms_p50"] > 0 else math.nan
        out["preemptions"] = float(self.preemptions)
        out["steps"] = float(self.steps)
        self.__dict__["_stats"] = (key, dict(out))
        return out

    # -------------------------------------------------------------------------------- outputs

    def to_row(self) -> dict[str, Any]:
        """The run as one row of pdtune's tidy results schema (:data:`pdtune.results.schema.TIDY_COLUMNS`),
        ``modeled`` True and ``source`` ``pdtune-sim``."""
        s = self.stats()
        m = self.meta
        return {
            "source": SOURCE,
            "path": m.get("label", ""),
            "model": m.get("model"),
            "mode": m.get("mode", "agg"),
            "topology": m.get("topology"),
            "prefill_topology": m.get("prefill_topology"),
            "decode_topology": m.get("decode_topology"),
            "n_prefill_workers": m.get("n_prefill_workers"),
            "n_decode_workers": m.get("n_decode_workers"),
            "gpus_prefill": int(m.get("gpus_prefill", 0)),
            "gpus_decode": int(m.get("gpus_decode", self.gpus)),
            "gpus_total": int(self.gpus),
            "mtp_tokens": m.get("mtp_tokens", 0),
            "isl": m.get("isl"),
            "osl": m.get("osl"),
            "concurrency": int(m.get("concurrency") or len(self.records)),
            "total_tps": s["total_tps"],
            "output_tps": s["output_tps"],
            "ttft_ms_p50": s["ttft_ms_p50"],
            "ttft_ms_p99": s["ttft_ms_p99"],
            "tpot_ms_p50": s["tpot_ms_p50"],
            "tpot_ms_mean": s["tpot_ms_mean"],
            "tpot_ms_p99": s["tpot_ms_p99"],
            "tps_per_gpu": s["tps_per_gpu"],
            "tps_per_user": s["tps_per_user"],
            "accuracy": None,
            "output_tps_per_decode_gpu": (s["output_tps"] / int(m.get("gpus_decode", self.gpus))
                                          if m.get("gpus_decode", self.gpus) else math.nan),
            "modeled": True,
        }

    def to_frame(self) -> pd.DataFrame:
        """:meth:`to_row` as a one-row frame with the schema's columns and dtypes."""
        from pdtune.results.schema import frame

        return frame([self.to_row()])

    def request_frame(self) -> pd.DataFrame:
        """One row per measured request (:data:`REQUEST_COLUMNS`), times in ms, ``modeled`` True."""
        rows = []
        for r in self.records:
            itl = r.itls
            rows.append((r.index, r.engine, r.isl, r.osl, r.t_send * 1e3, r.t_arrive * 1e3, r.ttft * 1e3,
                         r.tpot * 1e3, r.e2e * 1e3, float(itl.mean()) * 1e3 if itl.size else math.nan,
                         float(itl.max()) * 1e3 if itl.size else math.nan, len(r.chunks), r.preemptions,
                         r.kv_transfer_s * 1e3, True))
        return pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))

    def timeline_frame(self) -> pd.DataFrame:
        """Every engine's steps: end time (s), running and waiting requests, KV blocks used, tokens."""
        frames = []
        for name, tl in self.timelines.items():
            frames.append(pd.DataFrame({"engine": name, "t_s": tl.t, "running": tl.running, "waiting": tl.waiting,
                                        "kv_blocks_used": tl.kv_used, "tokens": tl.tokens,
                                        "prefill_tokens": tl.prefill_tokens, "step_s": tl.seconds}))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def summary(self) -> dict[str, Any]:
        """What ``pdtune simulate`` prints: the run's statistics, the timeline in a few numbers, the notes."""
        s = self.stats()
        out: dict[str, Any] = {"modeled": True, **{k: v for k, v in self.meta.items() if k != "kv"}, **s}
        for name, tl in self.timelines.items():
            if not tl.t:
                continue
            run = np.asarray(tl.running)
            wait = np.asarray(tl.waiting)
            used = np.asarray(tl.kv_used)
            total = self.meta.get("kv_blocks", {}).get(name) if isinstance(self.meta.get("kv_blocks"), dict) else None
            out.setdefault("timeline", {})[name] = {
                "steps": len(tl.t),
                "running_mean": float(run.mean()),
                "running_max": int(run.max()),
                "waiting_mean": float(wait.mean()),
                "waiting_max": int(wait.max()),
                "kv_blocks_used_max": int(used.max()),
                "kv_blocks": total,
                "prefill_steps": int(np.count_nonzero(np.asarray(tl.prefill_tokens))),
            }
        out["notes"] = list(self.notes)
        return out
