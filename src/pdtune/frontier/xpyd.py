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
    * tokens/s per user ``1000 / TPOT``; concurrency by Little's law ``R * (TTFT_p + TPOT * (OSL - 1)) / 1000``.

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
    if isinstance(osl, bool) or not isinstance(osl, (int, np.integer)) or osl < 2:
        raise InputError("rate_match", "osl",
                         f"expected a whole number >= 2 (decode makes OSL - 1 steps), got {osl!r}")
    if isinstance(max_workers, bool) or not isinstance(max_workers, (int, np.integer)) or max_workers < 1:
        raise InputError("rate_match", "max_workers", f"expected a whole number >= 1, got {max_workers!r}")
    osl, max_workers = int(osl), int(max_workers)
    isl = _target_isl(prefill_df, isl)
    prefills = _isolated_groups(prefill_df, "ttft_ms_p50", role="prefill")
    decodes = _isolated_groups(decode_df, "tpot_ms_p50", role="decode")
    for p in prefills:
        p.capacity = p.concurrency * 1000.0 / p.latency
    for d in decodes:
        d.capacity = d.concurrency * 1000.0 / (d.latency * (osl - 1))
    ratios = _Ratios(max_workers)
    pairs = [(p, d) for p in prefills for d in decodes]
    n_rows = sum(ratios.count * d.capacity.size for _, d in pairs)  # type: ignore[union-attr]

    # One preallocated buffer per dtype, filled pair by pair: no concatenation, no block consolidation.
    floats = np.empty((len(_RM_FLOAT), n_rows))
    ints = np.empty((len(_RM_INT), n_rows), dtype=np.int64)
    pair_of = np.empty(n_rows, dtype=np.int64)
    ratio_of = np.empty(n_rows, dtype=np.int64)
    bottleneck = np.empty(n_rows, dtype=np.int8)
    start = 0
    for k, (p, d) in enumerate(pairs):
        stop = start + ratios.count * d.capacity.size  # type: ignore[union-attr]
        _match_pair(p, d, ratios, isl, osl, floats[:, start:stop], ints[:, start:stop],
                    ratio_of[start:stop], bottleneck[start:stop])
        pair_of[start:stop] = k
        start = stop

    frame = pd.DataFrame(floats.T, columns=list(_RM_FLOAT), copy=False)
    models = [" / ".join(sorted({m for m in (p.model, d.model) if m})) or None for p, d in pairs]
    mtp = ["+MTP" if d.mtp_tokens > 0 else "" for _, d in pairs]
    labels = [disagg_label(x, p.topology, y, d.topology, suffix) for (p, d), suffix in zip(pairs, mtp)
              for x, y in ratios.xy]
    text = {
        "source": _categorical(pair_of, [f"predicted by rate matching: prefill sweep [{p.source or p.path}] "
                                         f"+ decode sweep [{d.source or d.path}]" for p, d in pairs]),
        "path": _categorical(pair_of, [" + ".join(s for s in (p.path, d.path) if s) or None for p, d in pairs]),
        "model": _categorical(pair_of, models),
        "mode": _categorical(np.zeros(n_rows, dtype=np.int64), ["disagg"]),
        "topology": _categorical(np.zeros(n_rows, dtype=np.int64), [None]),
        "prefill_topology": _categorical(pair_of, [p.topology for p, _ in pairs]),
        "decode_topology": _categorical(pair_of, [d.topology for _, d in pairs]),
        "deployment": _categorical(pair_of * ratios.count + ratio_of, labels),
        "bottleneck": _categorical(bottleneck.astype(np.int64), list(_BOTTLENECK)),
    }
    columns: dict[str, Any] = {**text, **dict(zip(_RM_INT, ints)),
                               "modeled": np.ones(n_rows, dtype=bool)}
    for position, name in enumerate(RATE_MATCH_COLUMNS):
        if name not in frame.columns:
            frame.insert(position, name, columns[name])
    if decode_room is not None:
        # one room per decode deployment, asked once per pair
        room = np.array([float(decode_room(d.topology, d.mtp_tokens)) for _, d in pairs], dtype=np.float64)
        rooms = room[pair_of] if pairs else np.full(n_rows, np.nan)
        frame["decode_room"] = rooms
        frame["fits_kv"] = ~(frame["decode_concurrency"].to_numpy() > rooms)
    return frame


# Column groups of a rate-matched frame by dtype (each group filled as one buffer).
_RM_FLOAT = tuple(c for c in RATE_MATCH_COLUMNS if c in (
    "mtp_tokens", "concurrency", "total_tps", "output_tps", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
    "tpot_ms_mean", "tpot_ms_p99", "tps_per_gpu", "tps_per_user", "accuracy", "output_tps_per_decode_gpu",
    "prefill_concurrency", "decode_concurrency"))
_RM_INT = ("n_prefill_workers", "n_decode_workers", "gpus_prefill", "gpus_decode", "gpus_total", "isl", "osl")
_BOTTLENECK = ("prefill", "decode", "balanced")


def _categorical(codes: np.ndarray, values: list[str | None]) -> pd.Categorical:
    """Rows pointing into ``values`` by ``codes`` as a categorical whose categories sort like strings."""
    present = sorted({v for v in values if v is not None})
    lookup = {v: i for i, v in enumerate(present)}
    code_of = np.array([lookup[v] if v is not None else -1 for v in values], dtype=np.int64)
    return pd.Categorical.from_codes(code_of[codes], categories=pd.Index(present, dtype=object))


class _Ratios:
    """Every x : y with x, y in 1..max_workers, each with its reduced form x/g : y/g and g = gcd(x, y)."""

    def __init__(self, max_workers: int) -> None:
        grid = np.arange(1, max_workers + 1)
        x, y = (a.ravel() for a in np.meshgrid(grid, grid, indexing="ij"))
        g = np.gcd(x, y)
        self.xy: list[tuple[int, int]] = list(zip(x.tolist(), y.tolist()))
        self.count = x.size
        self.x, self.y, self.scale = x, y, g
        self.reduced, inverse = np.unique(np.column_stack([x // g, y // g]), axis=0, return_inverse=True)
        self.base = inverse.ravel()
        self._rows: dict[int, _RatioRows] = {}

    def rows(self, n_points: int) -> _RatioRows:
        """Per-row indices for ``n_points`` decode points under every ratio (cached: pairs share them)."""
        if n_points not in self._rows:
            ratio = np.repeat(np.arange(self.count), n_points)
            point = np.tile(np.arange(n_points), self.count)
            self._rows[n_points] = _RatioRows(
                ratio=ratio, point=point, flat_base_point=self.base[ratio] * n_points + point,
                scale=self.scale[ratio].astype(np.float64), x=self.x[ratio], y=self.y[ratio])
        return self._rows[n_points]


@dataclass(frozen=True)
class _RatioRows:
    ratio: np.ndarray  # row -> index of x : y
    point: np.ndarray  # row -> decode point
    flat_base_point: np.ndarray  # row -> flat index into (reduced ratio, decode point) arrays
    scale: np.ndarray  # row -> gcd(x, y)
    x: np.ndarray
    y: np.ndarray


@dataclass
class _Sweep:
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


def _target_isl(prefill_df: pd.DataFrame, isl: int | None) -> int:
    if isl is not None:
        if isinstance(isl, bool) or not isinstance(isl, (int, np.integer)) or isl < 1:
            raise InputError("rate_match", "isl", f"expected a whole number >= 1, got {isl!r}")
        return int(isl)
    if "isl" not in prefill_df.columns or prefill_df["isl"].dropna().nunique() != 1:
        raise InputError(first_source(prefill_df), "isl",
                         "the prefill sweep does not have exactly one ISL; pass isl= explicitly")
    return int(prefill_df["isl"].dropna().iloc[0])


def _isolated_groups(df: pd.DataFrame, latency_col: str, *, role: str) -> list[_Sweep]:
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
    groups: list[_Sweep] = []
    for (name, mtp_tokens), rows in sorted(keys.groupby(["topology", "mtp"]).indices.items()):
        rows = np.sort(rows)
        if np.unique(gpus[rows]).size != 1:
            raise InputError(row_source(df, int(rows[0])), "gpus_total",
                             f"{role} deployment {name} has several GPU counts {sorted(set(gpus[rows]))}")
        groups.append(_Sweep(
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


def _match_pair(p: _Sweep, d: _Sweep, ratios: _Ratios, isl: int, osl: int, floats: np.ndarray,
                ints: np.ndarray, ratio_of: np.ndarray, bottleneck: np.ndarray) -> None:
    """Fill one (prefill deployment, decode deployment) block: rows ordered by (x, y, decode point)."""
    assert p.capacity is not None and d.capacity is not None
    # Prefill points by capacity; for each position the lightest point (lowest TTFT, then concurrency,
    # then row) among it and all with more capacity, i.e. among those that can keep up with a given rate.
    n_p = p.capacity.size
    by_capacity = np.lexsort((np.arange(n_p), p.concurrency, p.latency, p.capacity))
    capacity_sorted = p.capacity[by_capacity]
    lightness = np.empty(n_p, dtype=np.int64)
    lightness[np.lexsort((np.arange(n_p), p.concurrency, p.latency))] = np.arange(n_p)
    lightest_from = np.minimum.accumulate(lightness[by_capacity][::-1])[::-1]
    row_of_lightness = np.argsort(lightness)

    # Everything on the reduced ratio x/g : y/g, then scaled by g: per-GPU numbers equal for multiples.
    xr = ratios.reduced[:, 0:1]
    yr = ratios.reduced[:, 1:2]
    prefill_rate = xr * capacity_sorted[-1]  # (m, 1) requests/s
    decode_rate = yr * d.capacity  # (m, n_d)
    rate_r = np.minimum(prefill_rate, decode_rate)
    chosen = np.empty(rate_r.shape, dtype=np.int64)
    for x_val in np.unique(ratios.reduced[:, 0]):
        sel = ratios.reduced[:, 0] == x_val
        # the first prefill position whose x * P reaches the rate (x * P_max always does)
        pos = np.searchsorted(x_val * capacity_sorted, rate_r[sel], side="left")
        chosen[sel] = row_of_lightness[lightest_from[pos]]
    limit = np.where(prefill_rate < decode_rate, 0, np.where(prefill_rate > decode_rate, 1, 2))
    tokens = float(isl + osl)
    per_gpu_r = rate_r * tokens / (xr * p.gpus + yr * d.gpus)

    rows = ratios.rows(d.capacity.size)
    flat = rows.flat_base_point
    point = rows.point
    pp = chosen.ravel()[flat]
    rate = rate_r.ravel()[flat] * rows.scale
    tpot = d.latency[point]
    ttft = p.latency[pp]
    values = {
        "mtp_tokens": d.mtp_tokens,
        "concurrency": rate * (ttft + tpot * (osl - 1)) / 1000.0,
        "total_tps": rate * tokens,
        "output_tps": rate * osl,
        "ttft_ms_p50": ttft,
        "ttft_ms_p99": p.extra["ttft_ms_p99"][pp],
        "tpot_ms_p50": tpot,
        "tpot_ms_mean": d.extra["tpot_ms_mean"][point],
        "tpot_ms_p99": d.extra["tpot_ms_p99"][point],
        "tps_per_gpu": per_gpu_r.ravel()[flat],
        "tps_per_user": 1000.0 / tpot,
        "accuracy": np.nan,
        "output_tps_per_decode_gpu": rate * osl / (rows.y * d.gpus),
        "prefill_concurrency": p.concurrency[pp],
        "decode_concurrency": d.concurrency[point],
    }
    for j, name in enumerate(_RM_FLOAT):
        floats[j] = values[name]
    x, y = rows.x, rows.y
    whole = {"n_prefill_workers": x, "n_decode_workers": y, "gpus_prefill": x * p.gpus,
             "gpus_decode": y * d.gpus, "gpus_total": x * p.gpus + y * d.gpus, "isl": isl, "osl": osl}
    for j, name in enumerate(_RM_INT):
        ints[j] = whole[name]
    ratio_of[:] = rows.ratio
    bottleneck[:] = limit.ravel()[flat]


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
