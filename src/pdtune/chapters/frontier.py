"""Chapter 7, the disaggregated frontier (three pages): the frames it shows and the few sentences whose
wording depends on the scenario.

The dense example's isolated sweeps (:func:`dense_isolated`), the accuracy gate's outcome
(:func:`gate_summary`), the envelope's ends beside the article's headline numbers, the SLA pick in words,
rate matching of the isolated sweeps beside the disaggregated sweep (:func:`predict`), InferenceX's measured
GB200 points and aiconfigurator's vLLM disaggregated runs with the performance model's error, and where its
time to first token stands against the measured one (:func:`ttft_gap`). The rules are in
:mod:`pdtune.frontier` (envelope, rate matching with the KV-room check, SLA pick, gate) and
:mod:`pdtune.capacity` (KV room).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pdtune.capacity import room_lookup
from pdtune.frontier import accuracy_gate, frontier_matches_brute_force, predicted_vs_measured, rate_match
from pdtune.frontier import upper_envelope
from pdtune.results.schema import empty_frame
from pdtune.sweep import KIND_WORDS, Sweep, canonical_topologies, label, load_sweep


@dataclass(frozen=True, eq=False)
class Gate:
    """The accuracy gate's outcome for the chapter: the rows kept and a sentence saying what happened."""

    kept: pd.DataFrame
    excluded: tuple[str, ...]
    unmeasured: tuple[str, ...]
    measured: tuple[str, ...]
    threshold: float
    sentence: str


def gate_summary(sweep: Sweep, threshold: float) -> Gate:
    """:func:`pdtune.frontier.accuracy_gate` on a disaggregated sweep, and the sentence the chapter prints."""
    if not sweep.available:
        return Gate(sweep.frame, (), (), (), threshold, "without a sweep there is nothing to gate.")
    result = accuracy_gate(sweep.frame, threshold)
    excluded = tuple(result.excluded["deployment"])
    unmeasured = tuple(result.unmeasured)
    measured = tuple(d for d in sweep.deployments if d not in unmeasured)
    pct = f"{threshold:.0%}"
    if excluded:
        lows = ", ".join(f"{r.deployment} ({r.accuracy:.1%})" for r in result.excluded.itertuples())
        text = f"The gate at {pct} excludes {len(excluded)} of {len(sweep.deployments)} deployments: {lows}."
    else:
        text = f"The gate at {pct} excludes none of the {len(sweep.deployments)} deployments."
    if measured and not excluded:
        text += f" All {len(measured)} with a recorded accuracy pass."
    if unmeasured:
        text += (f" {len(unmeasured)} record no accuracy and are kept unchecked: "
                 f"{', '.join(unmeasured)}.")
    kept = label(result.kept) if len(result.kept) else result.kept
    return Gate(kept, excluded, unmeasured, measured, threshold, text)


def envelope(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`pdtune.frontier.upper_envelope` (columns with provenance first), or an empty frame."""
    if len(df) == 0:
        return empty_frame(["deployment", "concurrency", "tps_per_user", "tps_per_gpu"])
    return upper_envelope(df)


def envelope_with_status(pred_env: pd.DataFrame, measured: Sweep) -> pd.DataFrame:
    """The predicted envelope's points with whether their deployment was part of the disaggregated sweep."""
    columns = ["deployment", "concurrency", "tps_per_user", "tps_per_gpu", "bottleneck", "decode_concurrency",
               "decode_room", "in_sweep"]
    if len(pred_env) == 0:
        return empty_frame(columns)
    swept = set(measured.frame["deployment"].astype(str)) if measured.available else set()
    out = pred_env.assign(deployment=pred_env["deployment"].astype(str),
                          bottleneck=pred_env["bottleneck"].astype(str))
    out["in_sweep"] = out["deployment"].isin(swept)
    return out[[c for c in columns if c in out.columns]].reset_index(drop=True)


@dataclass(frozen=True)
class FrontierEnds:
    """The envelope's two ends beside the article's headline numbers."""

    throughput_deployment: str | None
    throughput_concurrency: float | None
    tps_per_gpu: float | None
    latency_deployment: str | None
    latency_concurrency: float | None
    tps_per_user: float | None
    article_tps_per_gpu: float
    article_tps_per_user: float

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([
            {"end": "throughput: most total tokens/s per GPU", "article": self.article_tps_per_gpu,
             "this_data": self.tps_per_gpu, "deployment": self.throughput_deployment,
             "concurrency": self.throughput_concurrency},
            {"end": "latency: most output tokens/s per user", "article": self.article_tps_per_user,
             "this_data": self.tps_per_user, "deployment": self.latency_deployment,
             "concurrency": self.latency_concurrency},
        ])


def frontier_ends(env: pd.DataFrame) -> FrontierEnds:
    from pdtune import article

    c = article.constants()
    if len(env) == 0:
        return FrontierEnds(None, None, None, None, None, None,
                            c["headline_tps_per_gpu"], c["headline_tps_per_user"])
    top = env.loc[env["tps_per_gpu"].astype(float).idxmax()]
    fast = env.loc[env["tps_per_user"].astype(float).idxmax()]
    return FrontierEnds(str(top["deployment"]), float(top["concurrency"]), float(top["tps_per_gpu"]),
                        str(fast["deployment"]), float(fast["concurrency"]), float(fast["tps_per_user"]),
                        c["headline_tps_per_gpu"], c["headline_tps_per_user"])


def pick_sentence(pick: Any, unit: str = "tokens/s per user") -> str:
    """:class:`pdtune.frontier.SlaPick` as one sentence."""
    if pick is None:
        return "There is no disaggregated sweep to pick from."
    floor = f"{pick.minimum:,.0f}" if pick.minimum >= 10 else f"{pick.minimum:g}"
    if not pick.met:
        best = "no data" if math.isnan(pick.best_available) else f"{pick.best_available:,.1f}"
        return f"No point reaches {floor} {unit}; the best in the data is {best}."
    return (f"{pick.deployment} at concurrency {pick.concurrency:,.0f}: {pick.tps_per_gpu:,.0f} total "
            f"tokens/s per GPU at {pick.tps_per_user:,.1f} tokens/s per user.")


@dataclass(frozen=True, eq=False)
class Prediction:
    """Rate matching from the isolated sweeps beside the disaggregated sweep (chapter 7)."""

    rows: pd.DataFrame  # every rate-matched x:y of every (prefill, decode) pair, with ``fits_kv``
    same: pd.DataFrame  # the rows of the deployments the disaggregated sweep measured
    comparison: pd.DataFrame  # predicted_vs_measured, one row per measured point
    summary: pd.DataFrame  # per measured deployment: points compared, median ratio, within 10 %
    envelope: pd.DataFrame  # the upper envelope of the rate-matched rows whose decode fits its KV room
    unchecked_envelope: pd.DataFrame  # the same without the KV-room check
    note: str = ""

    @property
    def available(self) -> bool:
        return len(self.rows) > 0

    @property
    def infeasible(self) -> int:
        """Rate-matched rows whose decode point runs more requests than its KV room at the real workload."""
        return int((~self.rows["fits_kv"]).sum()) if self.available else 0


def predict(prefill: Sweep, decode: Sweep, measured: pd.DataFrame, *, osl: int, isl: int | None = None,
            max_workers: int = 4, room: pd.DataFrame | None = None) -> Prediction:
    """:func:`pdtune.frontier.rate_match` of the isolated sweeps (topologies named canonically), and
    :func:`pdtune.frontier.predicted_vs_measured` against ``measured`` (the gated disaggregated rows).

    ``room`` (a :func:`pdtune.capacity.kv_room` frame) is the KV-room check of
    :func:`~pdtune.frontier.rate_match`: every rate-matched row gets ``decode_room`` (the decode
    deployment's ``room_at_workload``) and ``fits_kv``, and the predicted envelope leaves out the points
    whose decode worker runs more requests than that (rows of unknown room are kept). Without a
    prefill-only or a decode-only sweep nothing is predicted and :attr:`Prediction.note` says why.
    """
    empty = empty_frame(["deployment", "concurrency", "tps_per_user", "tps_per_gpu"])
    summary_cols = ["deployment", "points", "predicted_points", "median_ratio", "within_10pct"]
    missing = [s for s in (prefill, decode) if not s.available]
    if missing:
        what = " and ".join(f"no {KIND_WORDS[s.kind]} sweep" for s in missing)
        note = f"This scenario has {what}, so rate matching has nothing to combine and is skipped."
        rows = empty.assign(fits_kv=pd.Series(dtype=bool))
        return Prediction(rows, empty, empty, empty_frame(summary_cols), empty, empty, note)
    p = canonical_topologies(prefill.frame.drop(columns=["layout", "mtp"]))
    d = canonical_topologies(decode.frame.drop(columns=["layout", "mtp"]))
    rows = rate_match(p, d, osl, max_workers, isl=isl, decode_room=room_lookup(room))
    rows = rows.assign(deployment=rows["deployment"].astype(str))
    if len(measured):
        meas = label(canonical_topologies(measured))
        same = rows[rows["deployment"].isin(set(meas["deployment"]))]
        comparison = predicted_vs_measured(same, meas) if len(same) else empty
    else:
        same, comparison = rows.iloc[:0], empty
    summary = []
    if len(comparison):
        for dep, g in comparison.groupby("deployment", sort=False):
            ratio = g["predicted_over_measured"].dropna()
            summary.append({"deployment": dep, "points": len(g), "predicted_points": len(ratio),
                            "median_ratio": float(ratio.median()) if len(ratio) else math.nan,
                            "within_10pct": int(((ratio - 1).abs() <= 0.10).sum())})
    note = ""
    if len(measured) and not len(same):
        note = ("None of the measured deployments can be predicted: their prefill or decode layouts are not "
                "in the isolated sweeps.")
    feasible = rows[rows["fits_kv"]]
    return Prediction(rows, same, comparison, pd.DataFrame(summary, columns=summary_cols), envelope(feasible),
                      envelope(rows), note)


def prediction_sentence(pred: Prediction, *, modeled: bool = False) -> str:
    """How close rate matching gets to the disaggregated sweep, in one sentence. When that sweep is
    ``modeled`` the sentence compares two predictions and never calls either measured."""
    if not pred.available:
        return pred.note
    if len(pred.summary) == 0:
        return pred.note or "No configuration of the disaggregated sweep could be compared with its prediction."
    total = int(pred.summary["predicted_points"].sum())
    close = int(pred.summary["within_10pct"].sum())
    ratio = float(pred.comparison["predicted_over_measured"].median())
    if modeled:
        return (f"Across {len(pred.summary)} configurations, rate matching is within 10 % of the modeled "
                f"disaggregated sweep's throughput per GPU at {close} of {total} points; the median ratio of "
                f"rate-matched to modeled is {ratio:.3f}. Both are the performance model's predictions.")
    return (f"Across {len(pred.summary)} configurations, the prediction is within 10 % of the measured "
            f"throughput per GPU at {close} of {total} points; the median ratio of predicted to measured is "
            f"{ratio:.3f}.")


def check_sentence(pred: Prediction) -> str:
    """What the KV-room check removed, or that there was nothing to check (no isolated sweeps)."""
    if not pred.available:
        return "Without both isolated sweeps there are no rate-matched points for the check to weigh."
    return f"Of the {len(pred.rows):,} rate-matched points, the check removes {pred.infeasible:,}."


def prediction_ends_sentence(pred: Prediction) -> str:
    """The predicted envelope's two ends (after the KV-room check)."""
    if not pred.available or len(pred.envelope) == 0:
        return pred.note or "Nothing was predicted."
    top = pred.envelope.loc[pred.envelope["tps_per_gpu"].idxmax()]
    fast = pred.envelope.loc[pred.envelope["tps_per_user"].idxmax()]
    return (f"The predicted envelope reaches {top['tps_per_gpu']:,.0f} total tokens/s per GPU "
            f"({top['deployment']}) and {fast['tps_per_user']:,.1f} tokens/s per user "
            f"({fast['deployment']}).")


@dataclass(frozen=True)
class PacedExample:
    """One prefill-bound rate-matched row and what counting its clients by hand takes (chapter 7's page)."""

    deployment: str
    rate: float  # requests/s of the whole deployment (the prefill engines')
    decode_engines: int
    ttft_ms: float
    point_tpot_ms: float  # the decode point's TPOT: the row's TPOT
    points: tuple[tuple[float, float], ...]  # the decode deployment's sweep: (requests, TPOT ms), by requests
    concurrency: float  # the row's, as rate matching gives it


def paced_example(pred: Prediction, decode: Sweep, osl: int) -> PacedExample | None:
    """The prefill-bound row with the most tokens/s per GPU on the predicted envelope, else among the rows that
    fit their KV room; None when no row is prefill-bound."""
    if not pred.available:
        return None
    for frame in (pred.envelope, pred.rows[pred.rows["fits_kv"]]):
        bound = frame[frame["bottleneck"].astype(str) == "prefill"] if "bottleneck" in frame else frame.iloc[:0]
        if len(bound):
            break
    else:
        return None
    row = bound.loc[bound["tps_per_gpu"].idxmax()]
    d = canonical_topologies(decode.frame)
    d = d[(d["topology"] == row["decode_topology"]) & (d["mtp_tokens"] == row["mtp_tokens"])]
    points = sorted(zip(d["concurrency"].astype(float).tolist(), d["tpot_ms_p50"].astype(float).tolist()))
    return PacedExample(str(row["deployment"]), float(row["total_tps"]) / float(row["isl"] + row["osl"]),
                        int(row["n_decode_workers"]), float(row["ttft_ms_p50"]), float(row["tpot_ms_p50"]),
                        tuple(points), float(row["concurrency"]))


def paced_sentence(pred: Prediction, ex: PacedExample | None, tpot_r: float, clients: float, naive: float) -> str:
    """The worked count of :func:`paced_example`, in words (without sweeps to rate-match, why nothing was)."""
    if not pred.available:
        return pred.note
    if ex is None:
        return ("No rate-matched point of these sweeps is prefill-bound, so every row runs at its decode "
                "point's TPOT.")
    per_engine = ex.rate / ex.decode_engines
    return (f"{ex.deployment} is prefill-bound: its prefill engines deliver {ex.rate:,.2f} requests/s, "
            f"{per_engine:,.2f} to each decode engine, whose sweep reads {tpot_r:,.1f} ms at that rate against "
            f"{ex.point_tpot_ms:,.1f} ms at its point. It runs {clients:,.0f} clients; the point's TPOT would "
            f"give {naive:,.0f}, and the {max(naive - clients, 0):,.0f} more would wait in the prefill queue.")


@dataclass(frozen=True, eq=False)
class RealData:
    """InferenceX's measured GB200 DeepSeek-R1 points, their envelope and the performance model's error."""

    sweep: Sweep
    envelope: pd.DataFrame
    check: pd.DataFrame  # inferencex_check, the columns the chapter prints
    brute_force_ok: bool
    source: str = field(default="")

    @property
    def median_abs_error(self) -> dict[str, float]:
        return {k: float(self.check[f"{k}_error"].abs().median()) for k in ("tps_per_gpu", "tps_per_user")}

    @property
    def throughput_end(self) -> dict[str, Any]:
        """The measured point with the most tokens/s per GPU and the model's error there."""
        top = self.check.loc[self.check["measured_tps_per_gpu"].astype(float).idxmax()]
        return {"concurrency": int(top["concurrency"]), "measured": float(top["measured_tps_per_gpu"]),
                "predicted": float(top["predicted_tps_per_gpu"]), "error": float(top["tps_per_gpu_error"]),
                "user_error": float(top["tps_per_user_error"])}


INFERENCEX_SOURCE = "InferenceX (SemiAnalysis, Apache-2.0): DeepSeek-R1-0528, GB200 NVL72, Dynamo + TRT-LLM"


def inferencex_points(path: str | Path | None = None) -> RealData:
    """The bundled InferenceX file (or ``path``): loaded, labelled, its envelope, and
    :func:`pdtune.perfmodel.inferencex.inferencex_check` (nothing fitted to it)."""
    from pdtune.perfmodel.inferencex import inferencex_check, inferencex_file

    target = Path(path) if path is not None else inferencex_file()
    sweep = load_sweep("disagg", [str(target)])
    check = inferencex_check(target)
    cols = ["concurrency", "deployment", "measured_tps_per_gpu", "predicted_tps_per_gpu", "tps_per_gpu_error",
            "measured_tps_per_user", "predicted_tps_per_user", "tps_per_user_error", "measured_ttft_ms",
            "predicted_ttft_ms", "kv_limited"]
    check = check[cols].rename(columns={"deployment": "deployment_as_assumed"})
    return RealData(sweep, envelope(sweep.frame), check, frontier_matches_brute_force(sweep.frame),
                    INFERENCEX_SOURCE)


# --- what the chapter says, for its data or for none ---------------------------------------------------


def accuracy_note(sweep: Sweep, *, article_data: bool) -> str:
    """Where the accuracy the gate reads comes from."""
    if not sweep.available:
        return ""
    if article_data:
        return ("The modeled data carries the article's reported GSM8K result on every configuration, copied "
                "onto each file: it is the article's measurement, not something the performance model predicts.")
    return "The accuracy is whatever the result files record; a deployment that records none is kept and listed."


def ends_sentence(ends: FrontierEnds, *, article_data: bool, points: int = 0) -> str:
    """The frontier's size and two ends in words, against the article's headline only for the article's
    data."""
    if ends.tps_per_gpu is None:
        return "Without a disaggregated sweep there is no frontier to read."
    text = (f"The envelope has {points} points (hover over the staircase for each one's deployment and "
            f"concurrency); its throughput end is {ends.tps_per_gpu:,.0f} total tokens/s per GPU "
            f"({ends.throughput_deployment}), its latency end {ends.tps_per_user:,.1f} tokens/s per user "
            f"({ends.latency_deployment})")
    if article_data:
        text += (f", against the article's {ends.article_tps_per_gpu:,.0f} and {ends.article_tps_per_user:,.0f}")
    return text + "."


def prediction_caveat(prefill: Sweep, decode: Sweep, disagg: Sweep) -> str:
    """What an agreement between rate matching and the disaggregated sweep can mean for this data."""
    if not (prefill.available and decode.available and disagg.available):
        return ("Rate matching needs both isolated sweeps; checking it needs the disaggregated sweep as well.")
    if prefill.modeled and decode.modeled and disagg.modeled:
        return ("All three sweeps come from the same performance model, so agreement checks rate matching's "
                "arithmetic against the model's own balance of prefill and decode, not against a cluster. What rate "
                "matching leaves out is visible where the two part: the KV transfer between the sides, and the "
                "longer context a decode step reads in the disaggregated workload than in a decode-only sweep.")
    return ("Where prediction and measurement part, look first at what rate matching leaves out: the KV transfer "
            "between the sides, and the longer context a decode step reads in the disaggregated workload than in "
            "a decode-only sweep.")


# --- a measured frontier of real vLLM disaggregated runs --------------------------------------------------

SILICON_SOURCE = "aiconfigurator's silicon measurements (ai-dynamo/aiconfigurator, Apache-2.0), vLLM disaggregated"


@dataclass(frozen=True, eq=False)
class SiliconFrontier:
    """aiconfigurator's measured vLLM disaggregated rows, each predicted at its own deployment with the GPU's
    default factors (:func:`pdtune.perfmodel.validation.validate_rows`), and their measured frontier."""

    points: pd.DataFrame  # one per row: measured, predicted, error; unpredicted rows kept with their reason
    frontier: pd.DataFrame  # measured_frontier: the measured Pareto points with predicted/measured ratios
    predicted_frontier: pd.DataFrame  # the Pareto points of the predictions of the same rows
    defaults: pd.DataFrame  # per GPU: where its default factors came from
    skipped: dict[str, int]

    @property
    def available(self) -> bool:
        return len(self.points) > 0


def silicon_frontier(path: str | Path | None = None) -> SiliconFrontier:
    """Every vLLM disaggregated row of the silicon file whose model is bundled, predicted and scored."""
    from pdtune.frontier.pareto import pareto_frontier
    from pdtune.gpus import load_gpu
    from pdtune.model import bundled_models, load_model
    from pdtune.perfmodel.defaults import gpu_defaults, silicon_file
    from pdtune.perfmodel.validation import measured_frontier, model_key, select_rows, validate_rows
    from pdtune.results import load_results

    df = load_results(path or silicon_file())
    rows = df[(df["mode"] == "disagg") & (df["backend"].astype(str).str.lower() == "vllm")]
    bundled = {name.lower(): name for name in bundled_models()}
    frames, skipped, defaults = [], {}, []
    for (name, gpu), _group in rows.groupby([rows["model"].map(model_key), "gpu"], sort=True):
        if name not in bundled:
            skipped[f"{name}: not bundled in data/models/"] = skipped.get(name, 0) + len(_group)
            continue
        sel = select_rows(rows, name, str(gpu))
        found = gpu_defaults(str(gpu))
        defaults.append({"gpu": str(gpu), "factors": found.source, "note": found.note})
        frames.append(validate_rows(sel.rows, load_model(bundled[name]), load_gpu(str(gpu)), found.efficiency)
                      .assign(model=name))
    points = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not len(points):
        return SiliconFrontier(points, points, points, pd.DataFrame(defaults), skipped)
    # One frontier per model and GPU (measured_frontier itself splits by ISL/OSL only).
    front = pd.concat([measured_frontier(g) for _, g in points.groupby(["model", "gpu"], sort=True)],
                      ignore_index=True)
    usable = points[points["predicted"] & points["predicted_tps_per_gpu"].notna()].copy()
    usable["predicted_tps_per_user"] = 1000 / usable["predicted_tpot_ms_p50"]
    predicted = []
    for _, group in usable.groupby(["model", "gpu", "isl", "osl"], sort=True):
        keep = pareto_frontier(group["predicted_tps_per_user"].to_numpy(), group["predicted_tps_per_gpu"].to_numpy())
        predicted.append(group.iloc[keep])
    return SiliconFrontier(points, front, pd.concat(predicted, ignore_index=True), pd.DataFrame(defaults), skipped)


def silicon_frontier_table(sf: SiliconFrontier) -> pd.DataFrame:
    """The measured frontier's points, each with its prediction and the predicted/measured ratios."""
    columns = ["run_on", "workload", "topology", "concurrency", "measured_tps_per_user", "tps_per_user_ratio",
               "measured_tps_per_gpu", "predicted_tps_per_gpu", "tps_per_gpu_ratio"]
    if not len(sf.frontier):
        return empty_frame(columns)
    f = _labelled(sf.frontier).sort_values(["run_on", "workload", "measured_tps_per_user"], kind="stable")
    return f[columns].reset_index(drop=True)


def _labelled(points: pd.DataFrame) -> pd.DataFrame:
    """``run_on`` ("kimi-k2.5 on GB200") and ``workload`` ("1024/1024"): two short columns instead of four."""
    return points.assign(run_on=points["model"] + " on " + points["gpu"].astype(str).str.upper(),
                         workload=points["isl"].astype(int).astype(str) + "/" + points["osl"].astype(int).astype(str))


def silicon_frontier_sentence(sf: SiliconFrontier) -> str:
    if not sf.available:
        return "The silicon file has no vLLM disaggregated row of a bundled model."
    table = silicon_frontier_table(sf)
    unpredicted = int((~sf.points["predicted"]).sum())
    ratio = table["tps_per_gpu_ratio"].astype(float)
    worst = table.loc[(ratio - 1).abs().idxmax()]
    text = (f"Of {len(sf.points)} measured rows, {len(table)} are on a measured frontier (per model, GPU and "
            "ISL/OSL); "
            f"there the model's tokens/s per GPU is a median {ratio.median():.2f} times the measured, from "
            f"{ratio.min():.2f} to {ratio.max():.2f}, furthest off at {worst['topology']}, concurrency "
            f"{int(worst['concurrency']):,} ({worst['tps_per_gpu_ratio']:.2f}).")
    no_gpu = int(sf.points["measured_tps_per_gpu"].isna().sum())
    if no_gpu:
        text += (f" {no_gpu} rows record no worker counts, hence no tokens/s per GPU, and draw no frontier point; "
                 "they stay in the table of every row.")
    if unpredicted:
        text += f" {unpredicted} rows could not be predicted; they are listed with their reason."
    return text


def silicon_rows_table(sf: SiliconFrontier) -> pd.DataFrame:
    """Every measured disaggregated row, frontier or not, with the model's ratios (unpredicted rows kept)."""
    columns = ["run_on", "workload", "topology", "concurrency", "measured_tpot_ms_p50", "predicted_tpot_ms_p50",
               "measured_ttft_ms_p50", "predicted_ttft_ms_p50"]
    if not sf.available:
        return empty_frame(columns)
    if not sf.points["predicted"].all():
        columns.append("reason")  # why a row has no prediction; it stays in the table
    f = _labelled(sf.points).sort_values(["run_on", "workload", "concurrency"], kind="stable")
    return f[columns].reset_index(drop=True)


def silicon_defaults_sentence(sf: SiliconFrontier) -> str:
    """Which factors predicted the rows, and what they were fitted on."""
    if not len(sf.defaults):
        return ""
    parts = []
    for r in sf.defaults.drop_duplicates("gpu").itertuples():
        where = ("the article-tuned factors, fitted on none of these rows" if r.factors == "article" else
                 "fitted on aiconfigurator's vLLM aggregated rows of that GPU, not on these disaggregated rows")
        parts.append(f"{str(r.gpu).upper()}: {where}")
    return "Default factors, uncalibrated: " + "; ".join(parts) + "."


# --- the dense example the chapter opens on ---------------------------------------------------------------


def dense_isolated(cases: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Chapters 5 and 6's dense example as the two isolated sweeps rate matching takes: Llama-3.1-70B (FP8) on
    H200 at ISL/OSL 8192/1024, aiconfigurator's measured runs of each TP width. The prefill side is each
    width's lowest-concurrency TTFT with one prompt at a time (chapter 5's B = 1), the decode side its TPOT
    at every concurrency. Both are an aggregated server's latencies standing in for isolated sweeps."""
    from pdtune.chapters.prefill import DENSE_GPU, DENSE_MODEL, DENSE_WORKLOAD
    from pdtune.chapters.trust import sweep_cases

    cases = sweep_cases() if cases is None else cases
    isl, osl = DENSE_WORKLOAD
    mine = cases[(cases["model"] == DENSE_MODEL) & (cases["gpu"] == DENSE_GPU)
                 & cases["case"].str.endswith(f"ISL/OSL {isl}/{osl}")]
    source = "aiconfigurator's silicon runs of vLLM (measured, aggregated)"

    def frame(rows: pd.DataFrame, mode: str) -> pd.DataFrame:
        return pd.DataFrame({
            "source": source, "path": rows["source_id"].to_numpy(), "model": DENSE_MODEL, "mode": mode,
            "topology": rows["topology"].to_numpy(), "gpus_total": rows["gpus_total"].to_numpy(),
            "mtp_tokens": 0, "isl": isl, "osl": osl,
            "concurrency": 1 if mode == "prefill" else rows["concurrency"].to_numpy(),
            "ttft_ms_p50": rows["measured_ttft_ms_p50"].to_numpy(),
            "tpot_ms_p50": rows["measured_tpot_ms_p50"].to_numpy(),
        })

    low = mine[mine["concurrency"] == mine["concurrency"].min()]
    return frame(low, "prefill"), frame(mine, "decode")


def ttft_gap(check: pd.DataFrame, measured: str = "measured_ttft_ms", predicted: str = "predicted_ttft_ms",
             limited: str | None = "kv_limited") -> dict[str, float]:
    """Where the steady-state model's time to first token stands against the measured one: the range of each
    over the points whose decode side has KV room, and the point that has none (NaN when every point has
    room). The model charges one prompt's prefill and its KV transfer and no queueing, so the measured TTFT
    of a loaded deployment is far above it."""
    room = check if limited is None else check[~check[limited].astype(bool)]
    full = check.iloc[0:0] if limited is None else check[check[limited].astype(bool)]
    out = {"predicted-min": float(room[predicted].min()), "predicted-max": float(room[predicted].max()),
           "measured-min": float(room[measured].min()), "measured-max": float(room[measured].max()),
           "ratio-min": float((room[measured] / room[predicted]).min()),
           "ratio-max": float((room[measured] / room[predicted]).max()),
           "ratio-median": float((room[measured] / room[predicted]).median()),
           "above-twice": int((room[measured] > 2 * room[predicted]).sum()), "points": len(room)}
    if len(full):
        top = full.iloc[0]
        out |= {"full-predicted": float(top[predicted]), "full-measured": float(top[measured])}
    return out
