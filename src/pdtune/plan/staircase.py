"""The rows of the plan's search an SLA can pick, and the counts of every row they stand for.

Within a budget of ``N`` GPUs a prefill/decode pair can run ``x : y`` workers for every ``g_p x + g_d y <= N``:
``O(N^2)`` rows per decode point (half a million pairs at 1,024 GPUs), too many to build. They need not be
built. For one pair and one decode point, every row shares tokens/s per user and TPOT; what differs is the
ratio ``r = y / x``, and with it:

* tokens/s per GPU, ``min(P, r D) (ISL + OSL) / (g_p + r g_d)``: rising while the decode side limits the rate
  (``r < P / D``), falling after;
* TTFT: the prefill point that keeps up with a rate per worker of ``min(P, r D)``, which can only get heavier
  as ``r`` grows (a step at each prefill capacity ``c``, where ``r = c / D``), plus the KV transfer over the
  link of the deployment's size (NVLink within one domain, else the NIC: slower, so never better);
* whether the KV stream fits the link: a band ``r_lo <= r <= r_hi`` per link;
* the multiples ``k x : k y``, whose numbers equal those of ``x : y`` (the frontier keeps the smaller).

So a row can be picked by the frontier, by an SLA pick under any TTFT or TPOT limit, or as the closest row to
an SLA, only if no row of the same pair and point has at most its TTFT and more tokens/s per GPU: the
staircase of TTFT against throughput. Its steps are the ratios nearest a step target from below (the last
ratio before TTFT grows, or before the link saturates) or above (the first past the balance ``P / D``), one
set per link, each found with :func:`pdtune.frontier.ratios.nearest_ratios` in ``O(log N)`` steps; the
neighbours of a ratio that lands within rounding of its target are added, so the float rule rate matching
applies decides. These candidates (a few dozen per pair and point, whatever ``N``) are rate-matched and given
their KV transfer like any row, and those off the staircase dropped: the plan's ``rows``. The plan's
table, picks and closest rows are those of every row, the same rows the full enumeration gives.

What the plan counts (rows within the budget, over KV room, over the link, meeting an SLA) is counted over
every row, by :func:`pdtune.frontier.ratios.count_pairs` on the same bands, never by building them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pdtune.frontier.ratios import count_pairs, nearest_ratios, quotient
from pdtune.frontier.xpyd import IsolatedSweep, RatePairs
from pdtune.plan.inputs import Sla
from pdtune.transfer import NVLINK, SCALE_OUT

#: A ratio within 1 / _NEAR of its target (relative) may fall on either side of it in floating point: its next
#: neighbour outward is a candidate too.
_NEAR = 10**9
#: An exact rational as an unreduced (numerator, denominator) pair (pdtune.frontier.ratios).
Ratio = tuple[int, int]


def _less(a: Ratio, b: Ratio) -> bool:
    return a[0] * b[1] < b[0] * a[1]


@dataclass(frozen=True)
class LinkTerms:
    """What every row of one pair shares over one link: the KV transfer's time and the load it puts on it."""

    ms: float  # KV transfer per request
    send: float  # bytes the busiest prefill GPU sends per request
    recv: float  # bytes one decode rank receives per request
    bandwidth: float  # achieved bytes/s of the link
    p_dp: int  # DP ranks per prefill engine
    d_dp: int


@dataclass(frozen=True)
class PairTerms:
    """One pair's links (those a deployment of the budget can use), its decode room and TPOT p90 rule."""

    links: dict[str, LinkTerms]
    room: float  # requests one decode engine holds after the block-size fix (NaN: unknown)
    measured_p99: bool  # a measured decode sweep: its own p99 TPOT bounds the p90


@dataclass(frozen=True)
class _Band:
    """The rows of one pair, decode point and link: the GPU range, the ratio band the link carries, the steps
    of TTFT and what the point's rows share."""

    gp: int
    gd: int
    gpus_above: int  # rows with more GPUs than this (0, or the NVLink domain for the NIC's rows) ...
    gpus_upto: int  # ... and at most this many
    r_lo: Ratio | None  # the KV stream fits the link for r_lo <= y / x <= r_hi (None: no bound)
    r_hi: Ratio | None
    steps: tuple[Ratio, ...]  # per prefill position k: rows with y / x <= steps[k] run at most that point
    ttft: np.ndarray  # per position: TTFT with the transfer (ms)
    tps_per_user: float
    tpot_ms_p90: float

    def count(self, hi: Ratio | None = None) -> int:
        top = self.r_hi if hi is None else (hi if self.r_hi is None or _less(hi, self.r_hi) else self.r_hi)
        inside = count_pairs(self.gp, self.gd, self.gpus_upto, self.r_lo, top)
        if self.gpus_above:
            inside -= count_pairs(self.gp, self.gd, self.gpus_above, self.r_lo, top)
        return inside


@dataclass
class Staircase:
    """The search's row space within ``budget`` GPUs: candidates per pair, the staircase filter, the counts.

    ``domain`` is the GPUs of one NVLink domain joining both pools (0 for two GPU kinds: no NVLink between
    them); ``tpot_p90_factor`` the plan's TPOT p90 rule for modeled rows.
    """

    budget: int
    domain: int
    tpot_p90_factor: float
    counts: dict[str, int] = field(default_factory=lambda: {
        "rate_matched_rows": 0, "rows_over_kv_room_after_block_size": 0, "rows_link_saturated": 0,
        "feasible_rows": 0, "rows_network_charged": 0})
    _bands: list[_Band] = field(default_factory=list)

    def links(self, gp: int, gd: int) -> dict[str, tuple[int, int]]:
        """The links rows of a ``g_p``/``g_d`` pair cross within the budget, each with its GPU range
        ``(above, up to]``: NVLink up to the domain, the NIC beyond it (only those that hold a row)."""
        out = {}
        inner = min(self.budget, self.domain)
        if count_pairs(gp, gd, inner):
            out[NVLINK] = (0, inner)
        if count_pairs(gp, gd, self.budget) - count_pairs(gp, gd, inner):
            out[SCALE_OUT] = (inner, self.budget)
        return out

    def candidates(self, pairs: RatePairs, terms: Callable[[IsolatedSweep, IsolatedSweep], PairTerms],
                   charged: Callable[[IsolatedSweep, IsolatedSweep], bool],
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per pair of ``pairs``: the ``(x, y, point)`` rows on the staircase's candidate list, ordered by
        ``(x, y, point)`` as the full enumeration orders them; the pair's rows are counted on the way."""
        selection = []
        for p, d in pairs.pairs:
            gp, gd = p.gpus, d.gpus
            links = self.links(gp, gd)
            t = terms(p, d)
            if not links:
                selection.append(tuple(np.empty(0, dtype=np.int64) for _ in range(3)))
                continue
            n_points = d.concurrency.size
            everything = count_pairs(gp, gd, self.budget)
            self.counts["rate_matched_rows"] += n_points * everything
            capacity, point_from = p.levels()
            ttft_at = p.latency[point_from]
            top = float(capacity[-1])
            tpot_p90 = self._tpot_p90(d, t.measured_p99)
            rows: set[tuple[int, int, int]] = set()
            for j in range(n_points):
                if int(d.concurrency[j]) > t.room:  # the whole point is over KV room (NaN room: never)
                    self.counts["rows_over_kv_room_after_block_size"] += everything
                    continue
                rate = float(d.capacity[j])
                steps = tuple(quotient(c, rate) for c in capacity.tolist())
                for scope, (above, upto) in links.items():
                    link = t.links[scope]
                    r_lo, r_hi = _link_band(link, top, rate)
                    band = _Band(gp, gd, above, upto, r_lo, r_hi, steps, ttft_at + link.ms,
                                 float(1000.0 / d.latency[j]), float(tpot_p90[j]))
                    self._bands.append(band)
                    fits = band.count()
                    self.counts["rows_link_saturated"] += count_pairs(gp, gd, upto) - (
                        count_pairs(gp, gd, above) if above else 0) - fits
                    self.counts["feasible_rows"] += fits
                    if charged(p, d):
                        self.counts["rows_network_charged"] += fits
                    targets = {*steps, *(r for r in (r_lo, r_hi) if r is not None)}
                    for target in targets:
                        for x, y in _around(target, gp, gd, upto):
                            rows.add((x, y, j))
            ordered = np.array(sorted(rows), dtype=np.int64).reshape(-1, 3)
            selection.append((ordered[:, 0], ordered[:, 1], ordered[:, 2]))
        return selection

    def _tpot_p90(self, d: IsolatedSweep, measured: bool) -> np.ndarray:
        # The plan's rule, as its rows apply it (pdtune.plan.search._finish): a measured p99, else TPOT x factor.
        p99 = d.extra["tpot_ms_p99"]
        return np.where(measured & np.isfinite(p99), p99, d.latency * self.tpot_p90_factor)

    def meeting(self, sla: Sla) -> int:
        """Rows (of every row within the budget, not only the staircase's) that meet ``sla``."""
        total = 0
        for band in self._bands:
            if band.tps_per_user < (sla.min_tps_per_user or 0.0):
                continue
            if sla.max_tpot_ms_p90 is not None and not band.tpot_ms_p90 <= sla.max_tpot_ms_p90:
                continue
            hi = None
            if sla.max_ttft_ms is not None:
                ok = int(np.count_nonzero(band.ttft <= sla.max_ttft_ms))  # TTFT rises with the position
                if ok == 0:
                    continue
                if ok < band.ttft.size and _less(band.steps[ok - 1], band.steps[-1]):
                    hi = band.steps[ok - 1]
            total += band.count(hi)
        return total


def _link_band(link: LinkTerms, top: float, rate: float) -> tuple[Ratio | None, Ratio | None]:
    """Ratios whose KV stream fits the link: per prefill rank ``min(P, r D) / dp_p * send`` and per decode rank
    ``min(P / r, D) / dp_d * recv`` at most the bandwidth (exact in the floats' own values)."""
    bw_n, bw_d = float(link.bandwidth).as_integer_ratio()
    send_n, send_d = float(link.send).as_integer_ratio()
    recv_n, recv_d = float(link.recv).as_integer_ratio()
    top_n, top_d = float(top).as_integer_ratio()
    rate_n, rate_d = float(rate).as_integer_ratio()
    r_hi = r_lo = None
    # P * send > dp_p * bw: the prefill side saturates past r = dp_p * bw / (D * send)
    if send_n > 0 and top_n * send_n * bw_d > link.p_dp * bw_n * top_d * send_d:
        r_hi = (link.p_dp * bw_n * rate_d * send_d, bw_d * rate_n * send_n)
    # D * recv > dp_d * bw: the decode side saturates below r = P * recv / (dp_d * bw)
    if recv_n > 0 and rate_n * recv_n * bw_d > link.d_dp * bw_n * rate_d * recv_d:
        r_lo = (top_n * recv_n * bw_d, top_d * recv_d * link.d_dp * bw_n)
    return r_lo, r_hi


def _around(target: Ratio, gp: int, gd: int, budget: int) -> list[tuple[int, int]]:
    """The ratios within ``budget`` nearest ``target`` on each side, and the next ones out when a nearest lies
    within rounding of the target (the float comparison may put it on the other side)."""
    below, above = nearest_ratios(target, gp, gd, budget)
    out = [r for r in (below, above) if r is not None]
    p, q = target
    # y / x within target / _NEAR of p / q: |p x - q y| * _NEAR <= p x
    if below is not None and (p * below[0] - q * below[1]) * _NEAR <= p * below[0]:
        further = nearest_ratios((below[1], below[0]), gp, gd, budget, side=-1)[0]
        if further is not None:
            out.append(further)
    if above is not None and (q * above[1] - p * above[0]) * _NEAR <= p * above[0]:
        further = nearest_ratios((above[1], above[0]), gp, gd, budget, side=1)[1]
        if further is not None:
            out.append(further)
    return out


def on_staircase(rows: pd.DataFrame, group: np.ndarray) -> np.ndarray:
    """Which ``rows`` no row of the same ``group`` (pair and decode point) beats with at most its TTFT and more
    tokens/s per GPU."""
    if not len(rows):
        return np.zeros(0, dtype=bool)
    frame = pd.DataFrame({"g": group, "t": rows["ttft_ms_p50"].to_numpy(dtype=float),
                          "f": rows["tps_per_gpu"].to_numpy(dtype=float)})
    ordered = frame.sort_values(["g", "t"], kind="stable")
    best_so_far = ordered.groupby("g", sort=False)["f"].cummax()
    # rows of equal TTFT see each other's throughput
    best = best_so_far.groupby([ordered["g"], ordered["t"]], sort=False).transform("max")
    return (frame["f"] >= best.reindex(frame.index)).to_numpy()
