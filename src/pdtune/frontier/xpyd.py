"""xPyD rate matching: disaggregated deployments predicted from isolated prefill and decode sweeps.

``x`` prefill workers feed ``y`` decode workers; the system runs at the slower side's rate. Every ratio of
every pair of isolated deployments is evaluated (:func:`rate_match`), optionally with the KV-room check
(a decode point can only be used if its engine holds that many requests at the disaggregated workload),
and a prediction is scored against the measured disaggregated sweep (:func:`predicted_vs_measured`).
Everything rate matching returns is modeled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.frontier.envelope import envelope_at
from pdtune.frontier.labels import disagg_label, is_present, with_deployment
from pdtune.frontier.pareto import X_AXIS, Y_AXIS, column_values, first_source, row_source

#: Columns of a rate-matched frame, in order: the tidy schema (with ``output_tps_per_decode_gpu`` and
#: ``modeled``, as :mod:`pdtune.results` loads it), then the deployment label and the provenance that only a
#: prediction has (which isolated points were combined, and which side limits the rate).
RATE_MATCH_COLUMNS: tuple[str, ...] = (
    "source", "path", "model", "mode", "topology", "prefill_topology", "decode_topology",
    "n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "mtp_tokens",
    "isl", "osl", "concurrency", "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99",
    "tpot_ms_p50", "tpot_ms_mean", "tpot_ms_p99", "tps_per_gpu", "tps_per_user", "accuracy",
    "output_tps_per_decode_gpu", "modeled", "deployment", "prefill_concurrency", "decode_concurrency", "bottleneck",
    "paced_tpot_ms",
)

#: What the KV-room check adds to a rate-matched frame (see :func:`rate_match`'s ``decode_room``).
ROOM_COLUMNS: tuple[str, ...] = ("decode_room", "fits_kv")


def rate_match(prefill_df: pd.DataFrame, decode_df: pd.DataFrame, osl: int, max_workers: int = 32, *,
               isl: int | None = None,
               decode_room: Callable[[str, float], float] | None = None) -> pd.DataFrame:
    """Predict disaggregated deployments ``x`` prefill : ``y`` decode workers from isolated sweeps.

    For a prefill point at concurrency ``B_p`` and a decode point at ``B_d`` (requests/s):

    * prefill capacity ``P = B_p * 1000 / TTFT_p``; decode capacity ``D = B_d * 1000 / (TPOT * (OSL - 1))``;
    * system rate ``R = min(x * P, y * D)``; tokens/s ``R * (ISL + OSL)`` over ``x * g_p + y * g_d`` GPUs;
    * tokens/s per user ``1000 / TPOT``; concurrency by Little's law ``R * (TTFT_p + TPOT_R * (OSL - 1)) / 1000``,
      where ``TPOT_R`` (``paced_tpot_ms``) is the decode side's TPOT at the rate it is fed: the point's own TPOT
      when decode sets ``R``; when prefill does, each decode worker runs ``R / y`` requests/s, below the point's
      capacity, so it holds fewer requests and steps faster: the decode sweep's TPOT at ``R / y``
      (:func:`paced_tpot`), never above the point's. With the point's TPOT instead, a closed loop at that
      concurrency has more clients than the system holds, and the rest wait in the prefill queue (pdtune.sim
      shows it; DeepSeek-V3 on 72 GB200, 4xDP8+EP : 1xDP16+EP: 2,779 clients and a median TTFT of 10.9 s).
      The row's TPOT stays the point's, a bound on ``TPOT_R``.

    Every ``x, y`` in ``1..max_workers`` is evaluated for every pair of prefill and decode deployments
    (an isolated deployment is a ``topology``, with ``mtp_tokens`` on the decode side).
    Within one prefill deployment all its points share GPUs and tokens/s per user, so for each decode point
    only the best rate can reach any frontier: the row kept uses the lightest prefill point (lowest TTFT)
    that still delivers ``R``; the others are dominated. Hence one row per (prefill deployment, decode
    deployment, x, y, decode point), ordered so. ``k*x : k*y`` is computed from ``x : y`` so that its
    per-GPU numbers are bit-identical (the frontier then keeps the smaller deployment).

    The rows are modeled (``modeled=True``, ``mode="disagg"``); ``source`` names the isolated sweeps;
    ``prefill_concurrency``/``decode_concurrency`` name the isolated points combined and ``bottleneck``
    the side that limits ``R`` (``prefill``, ``decode`` or ``balanced``). Not modeled: KV transfer time,
    and the context length of the isolated runs (decode sweeps run at a short ISL). ``isl`` defaults to
    the prefill sweep's ISL. Text columns are pandas categoricals (categories sorted), to keep a large
    frame small and fast.

    ``decode_room`` adds the KV-room check. A decode sweep run at a short ISL holds far more requests than
    the same engine can at the disaggregated workload, so a predicted point whose decode worker runs more
    requests than its KV cache holds at ``isl + osl`` tokens cannot be run. Given a decode deployment's
    topology and MTP tokens, ``decode_room`` returns the requests one decode worker holds (NaN when
    unknown; :func:`pdtune.capacity.room_lookup` builds it from a :func:`pdtune.capacity.kv_room` frame);
    every row then also carries :data:`ROOM_COLUMNS`: ``decode_room`` and ``fits_kv``, False when
    ``decode_concurrency`` exceeds the room (a row of unknown room fits).
    """
    _check_osl(osl)
    if isinstance(max_workers, bool) or not isinstance(max_workers, (int, np.integer)) or max_workers < 1:
        raise InputError("rate_match", "max_workers", f"expected a whole number >= 1, got {max_workers!r}")
    pairs = RatePairs.of(prefill_df, decode_df, osl, isl=isl)
    grid = np.arange(1, int(max_workers) + 1)
    x, y = (a.ravel() for a in np.meshgrid(grid, grid, indexing="ij"))
    selection = []
    for _, d in pairs.pairs:
        n_points = d.concurrency.size
        selection.append((np.repeat(x, n_points), np.repeat(y, n_points), np.tile(np.arange(n_points), x.size)))
    frame = pairs.frame(selection)
    if decode_room is not None:
        # one room per decode deployment, asked once per pair
        room = np.array([float(decode_room(d.topology, d.mtp_tokens)) for _, d in pairs.pairs], dtype=np.float64)
        pair_of = np.repeat(np.arange(len(pairs.pairs)), [s[0].size for s in selection])
        rooms = room[pair_of] if pairs.pairs else np.full(len(frame), np.nan)
        frame["decode_room"] = rooms
        frame["fits_kv"] = ~(frame["decode_concurrency"].to_numpy() > rooms)
    return frame


@dataclass(frozen=True)
class RatePairs:
    """Every (prefill deployment, decode deployment) pair of two isolated sweeps, ready to be rate-matched at
    any worker counts: :meth:`frame` evaluates the rows asked for, :func:`rate_match` every ``x, y`` up to a
    bound, and ``pdtune plan`` only the worker ratios that can reach a frontier within its budget."""

    pairs: list[tuple[IsolatedSweep, IsolatedSweep]]
    isl: int
    osl: int

    @classmethod
    def of(cls, prefill_df: pd.DataFrame, decode_df: pd.DataFrame, osl: int, *,
           isl: int | None = None) -> RatePairs:
        """The pairs of ``prefill_df`` x ``decode_df`` (ordered by prefill, then decode deployment), each side
        with its capacity per worker (requests/s) at every point."""
        _check_osl(osl)
        osl = int(osl)
        isl = _target_isl(prefill_df, isl)
        prefills = _isolated_groups(prefill_df, "ttft_ms_p50", role="prefill")
        decodes = _isolated_groups(decode_df, "tpot_ms_p50", role="decode")
        for p in prefills:
            p.capacity = p.concurrency * 1000.0 / p.latency
        for d in decodes:
            d.capacity = d.concurrency * 1000.0 / (d.latency * (osl - 1))
        return cls([(p, d) for p in prefills for d in decodes], isl, osl)

    def frame(self, selection: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> pd.DataFrame:
        """The rate-matched rows of ``selection``: per pair (in :attr:`pairs` order) the arrays ``x``, ``y``
        and ``point`` (the decode point's position in its deployment), one row each, in that order."""
        pairs, isl, osl = self.pairs, self.isl, self.osl
        if len(selection) != len(pairs):
            raise ValueError("one selection per pair")
        sizes = [int(s[0].size) for s in selection]
        n_rows = sum(sizes)
        # One preallocated buffer per dtype, filled pair by pair: no concatenation, no block consolidation.
        floats = np.empty((len(_RM_FLOAT), n_rows))
        ints = np.empty((len(_RM_INT), n_rows), dtype=np.int64)
        pair_of = np.repeat(np.arange(len(pairs), dtype=np.int64), sizes)
        bottleneck = np.empty(n_rows, dtype=np.int8)
        deployment = np.empty(n_rows, dtype=np.int64)
        labels: list[str] = []
        start = 0
        for (p, d), (x, y, point), size in zip(pairs, selection, sizes, strict=True):
            stop = start + size
            x, y, point = (np.asarray(a, dtype=np.int64) for a in (x, y, point))
            _match_pair(p, d, x, y, point, isl, osl, floats[:, start:stop], ints[:, start:stop],
                        bottleneck[start:stop])
            # one label per (x, y) of this pair, in order of first appearance
            ratio, codes = np.unique(np.column_stack([x, y]), axis=0, return_inverse=True) if size else (
                np.empty((0, 2), dtype=np.int64), np.empty(0, dtype=np.int64))
            suffix = "+MTP" if d.mtp_tokens > 0 else ""
            deployment[start:stop] = len(labels) + codes.ravel()
            labels += [disagg_label(int(a), p.topology, int(b), d.topology, suffix) for a, b in ratio]
            start = stop

        frame = pd.DataFrame(floats.T, columns=list(_RM_FLOAT), copy=False)
        models = [" / ".join(sorted({m for m in (p.model, d.model) if m})) or None for p, d in pairs]
        text = {
            "source": _categorical(pair_of, [f"predicted by rate matching: prefill sweep [{p.source or p.path}] "
                                             f"+ decode sweep [{d.source or d.path}]" for p, d in pairs]),
            "path": _categorical(pair_of, [" + ".join(s for s in (p.path, d.path) if s) or None
                                           for p, d in pairs]),
            "model": _categorical(pair_of, models),
            "mode": _categorical(np.zeros(n_rows, dtype=np.int64), ["disagg"]),
            "topology": _categorical(np.zeros(n_rows, dtype=np.int64), [None]),
            "prefill_topology": _categorical(pair_of, [p.topology for p, _ in pairs]),
            "decode_topology": _categorical(pair_of, [d.topology for _, d in pairs]),
            "deployment": _categorical(deployment, labels),
            "bottleneck": _categorical(bottleneck.astype(np.int64), list(_BOTTLENECK)),
        }
        columns: dict[str, Any] = {**text, **dict(zip(_RM_INT, ints)),
                                   "modeled": np.ones(n_rows, dtype=bool)}
        for position, name in enumerate(RATE_MATCH_COLUMNS):
            if name not in frame.columns:
                frame.insert(position, name, columns[name])
        return frame


def _check_osl(osl: Any) -> None:
    if isinstance(osl, bool) or not isinstance(osl, (int, np.integer)) or osl < 2:
        raise InputError("rate_match", "osl", f"expected a whole number >= 2 (decode makes OSL - 1 steps), got {osl!r}")


# Column groups of a rate-matched frame by dtype (each group filled as one buffer).
_RM_FLOAT = tuple(c for c in RATE_MATCH_COLUMNS if c in (
    "mtp_tokens", "concurrency", "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
    "tpot_ms_mean", "tpot_ms_p99", "tps_per_gpu", "tps_per_user", "accuracy", "output_tps_per_decode_gpu",
    "prefill_concurrency", "decode_concurrency", "paced_tpot_ms"))
_RM_INT = ("n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "isl", "osl")
_BOTTLENECK = ("prefill", "decode", "balanced")


def _categorical(codes: np.ndarray, values: list[str | None]) -> pd.Categorical:
    """Rows pointing into ``values`` by ``codes`` as a categorical whose categories sort like strings."""
    present = sorted({v for v in values if v is not None})
    lookup = {v: i for i, v in enumerate(present)}
    code_of = np.array([lookup[v] if v is not None else -1 for v in values], dtype=np.int64)
    return pd.Categorical.from_codes(code_of[codes], categories=pd.Index(present, dtype=object))


@dataclass
class IsolatedSweep:
    """One isolated deployment's points (arrays in row order) with what rate matching needs."""

    topology: str
    gpus: int
    mtp_tokens: float
    concurrency: np.ndarray
    latency: np.ndarray  # TTFT for prefill, TPOT for decode (ms)
    extra: dict[str, np.ndarray]
    source: str
    path: str
    model: str | None
    capacity: np.ndarray | None = None  # requests/s of one worker at each point

    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        """A prefill sweep's capacities in ascending order and, per position, the point rate matching runs
        when a rate per worker needs that capacity or more: the lightest (lowest TTFT, then concurrency, then
        row) among that position and all above it, i.e. among the points that keep up."""
        assert self.capacity is not None
        n_p = self.capacity.size
        rows = np.arange(n_p)
        by_capacity = np.lexsort((rows, self.concurrency, self.latency, self.capacity))
        lightness = np.empty(n_p, dtype=np.int64)
        lightness[np.lexsort((rows, self.concurrency, self.latency))] = rows
        lightest_from = np.minimum.accumulate(lightness[by_capacity][::-1])[::-1]
        return self.capacity[by_capacity], np.argsort(lightness)[lightest_from]


def _target_isl(prefill_df: pd.DataFrame, isl: int | None) -> int:
    if isl is not None:
        if isinstance(isl, bool) or not isinstance(isl, (int, np.integer)) or isl < 1:
            raise InputError("rate_match", "isl", f"expected a whole number >= 1, got {isl!r}")
        return int(isl)
    if "isl" not in prefill_df.columns or prefill_df["isl"].dropna().nunique() != 1:
        raise InputError(first_source(prefill_df), "isl",
                         "the prefill sweep does not have exactly one ISL; pass isl= explicitly")
    return int(prefill_df["isl"].dropna().iloc[0])


def _isolated_groups(df: pd.DataFrame, latency_col: str, *, role: str) -> list[IsolatedSweep]:
    if len(df) == 0:
        return []
    conc = column_values(df, "concurrency", positive=True)
    latency = column_values(df, latency_col, positive=True)
    gpus = column_values(df, "gpus_total", positive=True)
    whole = np.flatnonzero(gpus != np.round(gpus))
    if whole.size:
        raise InputError(row_source(df, int(whole[0])), "gpus_total", f"expected whole GPUs, got {gpus[whole[0]]}")
    if "topology" not in df.columns:
        raise InputError(first_source(df), "topology", f"rate matching needs the {role} sweep's topology")
    topo = df["topology"].to_numpy(dtype=object)
    for i, t in enumerate(topo):
        if not (is_present(t) and str(t).strip()):
            raise InputError(row_source(df, i), "topology", f"rate matching needs the {role} sweep's topology")
    mtp = np.zeros(len(df))
    if role == "decode" and "mtp_tokens" in df.columns:
        mtp = pd.to_numeric(df["mtp_tokens"], errors="coerce").fillna(0).to_numpy(dtype=np.float64)
    extra_cols = ("ttft_ms_p99",) if role == "prefill" else ("tpot_ms_mean", "tpot_ms_p99")
    extras = {c: (pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
                  if c in df.columns else np.full(len(df), np.nan)) for c in extra_cols}
    keys = pd.DataFrame({"topology": [str(t).strip() for t in topo], "mtp": mtp})
    groups: list[IsolatedSweep] = []
    for (name, mtp_tokens), rows in sorted(keys.groupby(["topology", "mtp"]).indices.items()):
        rows = np.sort(rows)
        if np.unique(gpus[rows]).size != 1:
            raise InputError(row_source(df, int(rows[0])), "gpus_total",
                             f"{role} deployment {name} has several GPU counts {sorted(set(gpus[rows]))}")
        groups.append(IsolatedSweep(
            topology=name, gpus=int(gpus[rows[0]]), mtp_tokens=float(mtp_tokens),
            concurrency=conc[rows], latency=latency[rows], extra={c: v[rows] for c, v in extras.items()},
            source=_joined(df, "source", rows), path=_joined(df, "path", rows),
            model=_joined(df, "model", rows) or None,
        ))
    return groups


def _joined(df: pd.DataFrame, column: str, rows: np.ndarray) -> str:
    if column not in df.columns:
        return ""
    values = sorted({str(v) for v in df[column].to_numpy(dtype=object)[rows] if is_present(v)})
    return ", ".join(values)


def _match_pair(p: IsolatedSweep, d: IsolatedSweep, x: np.ndarray, y: np.ndarray, point: np.ndarray, isl: int,
                osl: int, floats: np.ndarray, ints: np.ndarray, bottleneck: np.ndarray) -> None:
    """Fill one (prefill deployment, decode deployment) block: one row per ``(x[i], y[i], point[i])``."""
    assert d.capacity is not None
    capacity_sorted, point_from = p.levels()
    n_p = capacity_sorted.size

    # Everything on the reduced ratio x/g : y/g, then scaled by g: per-GPU numbers equal for multiples.
    g = np.gcd(x, y)
    xr, yr = x // g, y // g
    prefill_rate = xr * capacity_sorted[-1]  # requests/s
    decode_rate = yr * d.capacity[point]
    rate_r = np.minimum(prefill_rate, decode_rate)
    # The first prefill position whose x * P reaches the rate (x * P_max always does): how many x * P fall
    # short of it (x * P is sorted, so this is a left search; products as a search over x * P would form).
    pos = np.zeros(x.size, dtype=np.int64)
    for k in range(n_p):
        pos += xr * capacity_sorted[k] < rate_r
    chosen = point_from[pos]
    limit = np.where(prefill_rate < decode_rate, 0, np.where(prefill_rate > decode_rate, 1, 2))
    tokens = float(isl + osl)
    per_gpu = rate_r * tokens / (xr * p.gpus + yr * d.gpus)

    pp = chosen
    rate = rate_r * g.astype(np.float64)
    tpot = d.latency[point]
    ttft = p.latency[pp]
    paced = np.where(limit == 0, np.minimum(paced_tpot(d, rate_r / yr, osl), tpot), tpot)
    values = {
        "mtp_tokens": d.mtp_tokens,
        "concurrency": rate * (ttft + paced * (osl - 1)) / 1000.0,
        "total_tps": rate * tokens,
        "output_tps": rate * osl,
        "ttft_ms_p50": ttft,
        "ttft_ms_p99": p.extra["ttft_ms_p99"][pp],
        "tpot_ms_p50": tpot,
        "tpot_ms_mean": d.extra["tpot_ms_mean"][point],
        "tpot_ms_p99": d.extra["tpot_ms_p99"][point],
        "tps_per_gpu": per_gpu,
        "tps_per_user": 1000.0 / tpot,
        "accuracy": np.nan,
        "output_tps_per_decode_gpu": rate * osl / (y * d.gpus),
        "prefill_concurrency": p.concurrency[pp],
        "decode_concurrency": d.concurrency[point],
        "paced_tpot_ms": paced,
    }
    for j, name in enumerate(_RM_FLOAT):
        floats[j] = values[name]
    whole = {"n_prefill_workers": x, "n_decode_workers": y, "gpus_prefill": x * p.gpus,
             "gpus_decode": y * d.gpus, "gpus_total": x * p.gpus + y * d.gpus, "isl": isl, "osl": osl}
    for j, name in enumerate(_RM_INT):
        ints[j] = whole[name]
    bottleneck[:] = limit


def paced_tpot(d: IsolatedSweep, rate: np.ndarray, osl: int) -> np.ndarray:
    """The TPOT of one decode worker of sweep ``d`` fed ``rate`` requests/s. Between the two points (by requests in
    flight) whose capacities bracket the rate, a decode step's time grows in proportion to the requests it holds,
    ``TPOT = a + b n`` (the weights once, then each request's KV and compute), and the worker holds
    ``n = rate TPOT (OSL - 1) / 1000`` of them; both hold at ``TPOT = a / (1 - b rate (OSL - 1) / 1000)``, kept
    within the two points' TPOTs. Below the lightest point's capacity its TPOT, above the heaviest's that one's."""
    assert d.capacity is not None
    order = np.lexsort((d.latency, d.concurrency))
    n, t, cap = d.concurrency[order], d.latency[order], d.capacity[order]
    out = np.where(rate < cap[0], t[0], t[-1])
    found = np.zeros(np.shape(rate), dtype=bool)
    for k in range(n.size - 1):
        if not n[k + 1] > n[k]:
            continue
        inside = ~found & (cap[k] <= rate) & (rate < cap[k + 1])
        slope = (t[k + 1] - t[k]) / (n[k + 1] - n[k])
        den = 1 - slope * rate * (osl - 1) / 1000
        # no fixed point within the bracket when den <= 0 (TPOT rising faster than the requests): its top TPOT
        held = np.where(den > 0, (t[k] - slope * n[k]) / np.where(den > 0, den, 1.0), np.inf)
        lo, hi = min(t[k], t[k + 1]), max(t[k], t[k + 1])
        out = np.where(inside, np.minimum(np.maximum(held, lo), hi), out)
        found |= inside
    return out


def predicted_vs_measured(predicted: pd.DataFrame, measured: pd.DataFrame, *,
                          same_deployment: bool = True) -> pd.DataFrame:
    """Each measured point beside the predicted throughput at its tokens/s per user.

    The prediction is read off the predicted staircase (:func:`envelope_at`) of the same deployment label
    (``same_deployment=True``) or of all predicted deployments. Columns: ``deployment, concurrency,
    tps_per_user, tps_per_gpu`` (measured), ``predicted_tps_per_gpu`` (NaN where the prediction never
    reaches that interactivity or the deployment was not predicted) and ``predicted_over_measured``.
    """
    meas = with_deployment(measured)
    pred = with_deployment(predicted)
    mx = column_values(meas, X_AXIS)
    my = column_values(meas, Y_AXIS)
    column_values(pred, X_AXIS)
    column_values(pred, Y_AXIS)
    out = pd.DataFrame({
        "deployment": meas["deployment"].to_numpy(dtype=object),
        "concurrency": meas["concurrency"].to_numpy() if "concurrency" in meas.columns else np.nan,
        X_AXIS: mx,
        Y_AXIS: my,
    }, index=meas.index)
    predicted_y = np.full(len(meas), np.nan)
    if same_deployment:
        for label, rows in meas.groupby("deployment", sort=True).indices.items():
            mine = pred[pred["deployment"] == label]
            if len(mine):
                predicted_y[rows] = envelope_at(mine, mx[rows])
    elif len(pred):
        predicted_y = envelope_at(pred, mx)
    out["predicted_tps_per_gpu"] = predicted_y
    out["predicted_over_measured"] = predicted_y / my
    return out
