"""Chapter 8, how far to trust a prediction: the performance model scored on real vLLM measurements.

Every number here is read from the scorecard (:mod:`pdtune.scorecard`, ``data/perfmodel/validation/``, made by
``python -m pdtune.scorecard``) and aiconfigurator 0.12.0's cached estimates of the same rows
(``data/peers/aiconfigurator-0.12.0/``): the validation table per model x GPU, the errors by regime
(:func:`pdtune.perfmodel.validation.error_table`), what calibration buys on held-out deployments
(:func:`pdtune.perfmodel.heldout.heldout_summary`), both tools on the rows both predicted, and every row either
could not predict. Chapters 5 and 6 draw the same rows against concurrency (:func:`sweep_cases`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from pdtune.errors import InputError
from pdtune.perfmodel.heldout import heldout_summary
from pdtune.perfmodel.replicates import LEVELS, replicate_table
from pdtune.perfmodel.validation import error_percentiles, error_table, model_key
from pdtune.scorecard import COMMAND, load_scorecard, lomo_models, repeats, scored, with_peer

SOURCE = "aiconfigurator's public silicon measurements (ai-dynamo/aiconfigurator, Apache-2.0)"
PEER = "aiconfigurator 0.12.0"
METRICS = ("ttft_ms_p50", "tpot_ms_p50")
#: Architecture of the scored models: the MoE ones route each token through a few experts.
MOE = {"gpt-oss-120b": True, "minimax-m2.5": True, "kimi-k2.5": True, "qwen3-235b-a22b-fp8": True,
       "llama-3.1-70b": False, "qwen3-32b": False}


def _pct(x: Any) -> float:
    return float("nan") if x is None else float(x)


@dataclass(frozen=True, eq=False)
class Scorecard:
    """The shipped table, its LOMO and calibrated views, and aiconfigurator's estimates beside it."""

    rows: pd.DataFrame  # load_scorecard with the peer columns

    @property
    def lomo(self) -> pd.DataFrame:
        return scored(self.rows, "lomo")

    @property
    def calibrated(self) -> pd.DataFrame:
        return scored(self.rows, "calibrated")


def scorecard() -> Scorecard:
    return Scorecard(with_peer(load_scorecard()))


def _stats(errors: pd.Series) -> tuple[float, float]:
    """Median and p90 |error| (%), NaN where there is none (the tables' empty cell)."""
    median, p90 = error_percentiles(errors)
    return (math.nan if median is None else median, math.nan if p90 is None else p90)


def validation_table(card: Scorecard) -> pd.DataFrame:
    """Per model x GPU and over all rows: rows, predicted, median and p90 |error| (%) of TTFT and TPOT with
    the leave-one-model-out defaults (uncalibrated)."""
    table = error_table(card.lomo, ["model_key", "gpu_name"])
    overall = error_table(card.lomo.assign(model_key="all", gpu_name="all"), ["model_key", "gpu_name"])
    out = pd.concat([table, overall], ignore_index=True)
    out = out.rename(columns={"model_key": "model", "gpu_name": "gpu"})
    keep = ["model", "gpu", "rows", "predicted"] + [f"{m}_{s}" for m in METRICS for s in ("median", "p90")]
    return out[keep].rename(columns=_PCT_NAMES)


_PCT_NAMES = {f"{m}_{s}": f"{m.split('_')[0]}_{s}_error_pct" for m in METRICS for s in ("median", "p90")}
_PCT_NAMES |= {"tps_per_gpu_median": "tps_per_gpu_median_error_pct"}


def simulated_headline() -> dict[str, float]:
    """The same rows leave one model out by the scheduler simulation, factors fitted through it
    (:func:`pdtune.scorecard.load_simulated_scorecard`): rows, predicted, median and p90 |error| (%)."""
    from pdtune.scorecard import load_simulated_scorecard

    frame = load_simulated_scorecard()
    mine = frame[frame["predicted"]]
    out: dict[str, float] = {"rows": len(frame), "predicted": len(mine)}
    for m in METRICS:
        out[f"{m.split('_')[0]}-median"], out[f"{m.split('_')[0]}-p90"] = _stats(mine[f"lomo_{m}_error"])
    return out


def headline(card: Scorecard) -> dict[str, float]:
    """Overall median and p90 |error| (%), uncalibrated and calibrated, and the row counts."""
    lomo, cal = card.lomo, card.calibrated
    out: dict[str, float] = {"rows": len(card.rows), "predicted": int(lomo["predicted"].sum()),
                             "unpredicted": int((~lomo["predicted"]).sum()),
                             "calibrated": int(cal["predicted"].sum())}
    for kind, frame in (("lomo", lomo), ("calibrated", cal)):
        for m in METRICS:
            med, p90 = _stats(frame.loc[frame["predicted"], f"{m}_error"])
            out[f"{kind}-{m.split('_')[0]}-median"], out[f"{kind}-{m.split('_')[0]}-p90"] = med, p90
    out["models"] = card.rows["model_key"].nunique()
    out["pairs"] = len(card.rows.groupby(["model_key", "gpu_name"]))
    out["repeats"] = len(repeats())
    return out


def prior_sentence(path: str | None = None) -> str:
    """Where the fit's pull comes from, and which factors the rows decide, per architecture, read from
    ``data/perfmodel/prior_sensitivity.csv`` (written by ``data/perfmodel/fit_defaults.py``)."""
    from pdtune.paths import data_dir
    from pdtune.perfmodel.prior import HAND_SET

    table = pd.read_csv(path or data_dir() / "perfmodel" / "prior_sensitivity.csv")
    parts = []
    for gpus, frame in table.groupby("gpus", sort=False):
        by_data = frame.loc[frame["set_by"] == "data", "factor"].tolist()
        names = ", ".join(f"`{f}`" for f in by_data) or "no factor"
        parts.append(f"{names} of {len(frame)} on {gpus.upper().replace(' ', ' and ')}")
    hand = ", ".join(f"`{f}`" for f in sorted(HAND_SET))
    return ("The fit pulls each factor towards a value taken from a published kernel or library benchmark (the "
            "eager-step cost from another model's decode step timed with and without CUDA graphs), never from the "
            "rows scored here (`pdtune.perfmodel.prior`, the folded table below). For " + hand + " no such number "
            "was found, and their values are set by hand; fitting them on the rows alone instead predicts the "
            "left-out models worse (`benchmarks/bench_prior.py`). The measurements decide only " + "; ".join(parts)
            + " (they remove at least half of the prior's uncertainty); every other factor stays near its prior "
            "value (`data/perfmodel/prior_sensitivity.csv`). The pull's width per factor is set by hand too.")


def prior_table() -> pd.DataFrame:
    """The prior as the fit uses it: each factor's value, how closely its source measures pdtune's quantity, and
    the source (empty for the factors the fit does not pull)."""
    from pdtune.perfmodel.prior import PRIOR_VALUES

    return pd.DataFrame([{"factor": name, "value": _prior_value(name, p.value),
                          "match": p.confidence or "none: set by hand", "source": p.source or "none found",
                          "what it rests on": p.numbers} for name, p in PRIOR_VALUES.items()])


def _prior_value(name: str, value: float) -> str:
    """A factor's value as a reader takes it in: a time (``*_s``) in us or ms, not "3e-05"; a share to 3 digits."""
    if not name.endswith("_s"):
        return f"{value:.3g}"
    return f"{value * 1e6:,.3g} us" if value < 1e-3 else f"{value * 1e3:,.3g} ms"


def worked_row(card: Scorecard) -> dict[str, Any]:
    """One row for the worked number: Llama-3.1-70B on H200 at TP4, concurrency 32 when it is there, else the
    first predicted row."""
    lomo = card.lomo[card.lomo["predicted"]]
    pick = lomo[(lomo["model_key"] == "llama-3.1-70b") & (lomo["gpu_name"] == "h200") & (lomo["topology"] == "TP4")
                & (lomo["concurrency"] == 32)]
    row = (pick if len(pick) else lomo).iloc[0]
    return {"model": row["model_key"], "gpu": row["gpu_name"], "topology": row["topology"],
            "concurrency": int(row["concurrency"]), "isl": int(row["isl"]), "osl": int(row["osl"]),
            "measured": float(row["measured_tpot_ms_p50"]), "predicted": float(row["predicted_tpot_ms_p50"]),
            "error_pct": float(row["tpot_ms_p50_error"]) * 100}


def row_of(card: Scorecard, worked: dict[str, Any]) -> pd.Series:
    """The scorecard row of :func:`worked_row` (its deployment, concurrency and workload)."""
    r = card.rows
    keep = ((r["model_key"] == worked["model"]) & (r["gpu_name"] == worked["gpu"])
            & (r["topology"] == worked["topology"]) & (r["concurrency"] == worked["concurrency"])
            & (r["isl"] == worked["isl"]) & (r["osl"] == worked["osl"]))
    return r[keep].iloc[0]


# ----------------------------------------------------------------------------------------------- regimes


def _tp(topology: object) -> int:
    from pdtune.topology import parse_topology

    try:
        return parse_topology(str(topology)).tp
    except InputError:
        return 0  # a layout the grammar cannot read is its own group


def concurrency_band(concurrency: int) -> str:
    """The concurrency regime a row belongs to: 1-4, 8-32, 64-256, 512 and more."""
    for hi, name in ((4, "1-4"), (32, "8-32"), (256, "64-256")):
        if concurrency <= hi:
            return name
    return "512 and more"


REGIMES = {
    "concurrency": "concurrent requests",
    "workload": "ISL/OSL",
    "tp": "tensor-parallel size",
    "architecture": "dense or MoE",
    "gpu_name": "GPU",
}


def regime_frame(card: Scorecard) -> pd.DataFrame:
    lomo = card.lomo.copy()
    lomo["concurrency_band"] = lomo["concurrency"].map(concurrency_band)
    lomo["workload"] = lomo["isl"].astype(int).astype(str) + "/" + lomo["osl"].astype(int).astype(str)
    lomo["tp"] = lomo["topology"].map(_tp)
    lomo["architecture"] = lomo["model_key"].map(lambda m: "MoE" if MOE.get(m) else "dense")
    return lomo


def regime_table(card: Scorecard, regime: str) -> pd.DataFrame:
    """:func:`~pdtune.perfmodel.validation.error_table` over one regime: rows, predicted, median and p90 |error|."""
    frame = regime_frame(card)
    by = "concurrency_band" if regime == "concurrency" else regime
    table = error_table(frame, [by])
    bias = frame[frame["predicted"]].groupby(by)["tpot_ms_p50_error"].median() * 100
    table["tpot_median_signed_error_pct"] = table[by].map(bias)
    if regime == "concurrency":
        order = {"1-4": 0, "8-32": 1, "64-256": 2, "512 and more": 3}
        table = table.sort_values(by, key=lambda s: s.map(order)).reset_index(drop=True)
    keep = [by, "rows", "predicted"] + [f"{m}_{s}" for m in METRICS for s in ("median", "p90")]
    keep.append("tpot_median_signed_error_pct")
    return table[keep].rename(columns=_PCT_NAMES | {"concurrency_band": "concurrency", "gpu_name": "gpu"})


def worst_sentence(table: pd.DataFrame, what: str) -> str:
    """Where in one regime table the model misses most and least on TPOT and TTFT (median |error|)."""
    key = table.columns[0]
    rows = table.dropna(subset=["tpot_median_error_pct"])
    if len(rows) < 2:
        return f"The rows do not span more than one {what}."
    worst = rows.loc[rows["tpot_median_error_pct"].idxmax()]
    best = rows.loc[rows["tpot_median_error_pct"].idxmin()]
    ttft = rows.loc[rows["ttft_median_error_pct"].idxmax()]
    side = "too slow" if worst["tpot_median_signed_error_pct"] > 0 else "too fast"
    return (f"By {what}, TPOT is furthest off at {_key(worst[key])} ({worst['tpot_median_error_pct']:.0f} % median, "
            f"the model mostly {side} there) and closest at {_key(best[key])} ({best['tpot_median_error_pct']:.0f} %); "
            f"TTFT is furthest off at {_key(ttft[key])} ({ttft['ttft_median_error_pct']:.0f} %).")


def _key(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{int(value)}"
    return str(value)


def largest_miss_sentence(card: Scorecard) -> str:
    """The model x GPU with the largest uncalibrated TTFT error, what its defaults were fitted on, and what
    calibration on its own other deployments makes of it."""
    table = calibration_table(card)
    table = table[table["model"] != "all"].dropna(subset=["uncalibrated_ttft_median_error_pct"])
    r = table.loc[table["uncalibrated_ttft_median_error_pct"].idxmax()]
    fits = lomo_models()
    fit = fits[(fits["model_key"] == r["model"]) & (fits["gpu_name"] == r["gpu"])]
    others = str(fit["fitted_on"].iloc[0]).split() if len(fit) else []
    kinds = {"MoE" if MOE.get(m, True) else "dense" for m in others}
    what = f"{len(others)} {'MoE' if kinds == {'MoE'} else 'other'} models" if others else "no other model"
    text = (f"The largest TTFT miss is {r['model']} on {str(r['gpu']).upper()}: "
            f"{r['uncalibrated_ttft_median_error_pct']:.0f} % (median) uncalibrated, its defaults fitted on "
            f"{what} ({', '.join(others)}).")
    cal = r["calibrated_ttft_median_error_pct"]
    if isinstance(cal, float) and not math.isnan(cal):
        share = 1 - cal / r["uncalibrated_ttft_median_error_pct"]
        if share >= 0.5:  # calibration takes most of it away: the factors were off
            text += (f" Calibrated on its own other deployments it is {cal:.0f} % off: most of the miss is in the "
                     "fitted factors, which calibration moves, not in the structure of the model.")
        else:
            text += (f" Calibrated on its own other deployments it is still {cal:.0f} % off, {share * 100:.0f} % of the miss "
                     "removed: most of it is in the structure of the model, which no factor moves.")
    return text


# ---------------------------------------------------------------------------------------------- calibration


def calibration_table(card: Scorecard) -> pd.DataFrame:
    """:func:`~pdtune.perfmodel.heldout.heldout_summary`: uncalibrated beside calibrated, per model x GPU."""
    summary = heldout_summary(card.rows)
    names = {"model_key": "model", "gpu_name": "gpu"}
    for kind, word in (("lomo", "uncalibrated"), ("calibrated", "calibrated")):
        for m in METRICS:
            for s in ("median", "p90"):
                names[f"{kind}_{m}_{s}"] = f"{word}_{m.split('_')[0]}_{s}_error_pct"
    summary = summary.rename(columns=names)
    held = card.rows.groupby(["model_key", "gpu_name"])["calibrated_tpot_ms_p50"].apply(lambda s: int(s.notna().sum()))
    summary["calibrated_rows"] = [int(held.get((m, g), 0)) if m != "all" else int(held.sum())
                                  for m, g in zip(summary["model"], summary["gpu"], strict=True)]
    keep = ["model", "gpu", "rows", "calibrated_rows"] + [
        f"{w}_{m.split('_')[0]}_median_error_pct" for m in METRICS for w in ("uncalibrated", "calibrated")]
    return summary[keep]


def calibration_gains(card: Scorecard) -> dict[str, int]:
    """How many model x GPU pairs calibration brings closer (a lower held-out median |error|), per metric, and
    how many pairs have a calibrated score at all."""
    table = calibration_table(card)
    table = table[(table["model"] != "all") & table["calibrated_rows"].gt(0)]
    out = {"scored": len(table)}
    for m in METRICS:
        short = m.split("_")[0]
        out[short] = int((table[f"calibrated_{short}_median_error_pct"]
                          < table[f"uncalibrated_{short}_median_error_pct"]).sum())
    return out


def uncalibrated_reasons(card: Scorecard) -> pd.DataFrame:
    """Rows a calibrated prediction does not exist for, and why (counted, never dropped)."""
    rows = card.rows[card.rows["predicted"] & card.rows["calibrated_tpot_ms_p50"].isna()]
    if not len(rows):
        return pd.DataFrame(columns=["model", "gpu", "rows", "reason"])
    out = rows.groupby(["model_key", "gpu_name", rows["calibrated_reason"].fillna("the fit did not predict it")]
                       ).size().reset_index(name="rows")
    return out.rename(columns={"model_key": "model", "gpu_name": "gpu", "calibrated_reason": "reason"})[
        ["model", "gpu", "rows", "reason"]]


# ------------------------------------------------------------------------------------------- aiconfigurator


def both_mask(card: Scorecard) -> pd.Series:
    r = card.rows
    return r["predicted"] & r["calibrated_tpot_ms_p50"].notna() & (r["aic_status"] == "ok")


def peer_table(card: Scorecard, metric: str | None = None) -> pd.DataFrame:
    """Per model x GPU and overall, on the rows both tools predicted: median |error| (%) of pdtune uncalibrated,
    pdtune calibrated (held out) and aiconfigurator 0.12.0, for TTFT and TPOT (or only ``metric``, with the
    three columns named for the tools)."""
    r = card.rows.assign(both=both_mask(card))
    groups = [*r.groupby(["model_key", "gpu_name"], sort=True), (("all", "all"), r)]
    out = []
    for (model, gpu), frame in groups:
        sel = frame[frame["both"]]
        rec: dict[str, Any] = {"model": model, "gpu": gpu, "rows": len(frame), "both_predicted": len(sel)}
        for m in METRICS if metric is None else (metric,):
            short = "" if metric else "_" + m.split("_")[0]
            for kind, word in (("lomo", "pdtune_uncalibrated"), ("calibrated", "pdtune_calibrated"),
                               ("aic", "aiconfigurator")):
                rec[f"{word}{short}_median_error_pct"] = _stats(sel[f"{kind}_{m}_error"])[0]
        out.append(rec)
    return pd.DataFrame(out)


def peer_numbers(card: Scorecard) -> dict[str, float]:
    both = card.rows[both_mask(card)]
    out: dict[str, float] = {"both": len(both), "aic-failed": int((card.rows["aic_status"] != "ok").sum())}
    for m in METRICS:
        short = m.split("_")[0]
        for kind in ("lomo", "calibrated", "aic"):
            out[f"{kind}-{short}-median"], out[f"{kind}-{short}-p90"] = _stats(both[f"{kind}_{m}_error"])
    return out


def peer_sentence(card: Scorecard) -> str:
    n = peer_numbers(card)
    verdicts = []
    for short, word in (("tpot", "TPOT"), ("ttft", "TTFT")):
        ours, theirs = n[f"calibrated-{short}-median"], n[f"aic-{short}-median"]
        verdicts.append(f"on {word} pdtune calibrated is {'at or below' if ours <= theirs else 'above'} "
                        f"{PEER} ({ours:.1f} % against {theirs:.1f} %)")
    return (f"On the {int(n['both']):,} rows both tools predicted, " + "; ".join(verdicts) + ". Uncalibrated, "
            f"pdtune is {n['lomo-tpot-median']:.1f} % off on TPOT and {n['lomo-ttft-median']:.1f} % on TTFT.")


def unpredicted_table(card: Scorecard) -> pd.DataFrame:
    """Every row a tool could not predict, per tool, model, GPU and reason: counted, kept in every table."""
    r = card.rows
    ours = r[~r["predicted"]]
    rows = [{"tool": "pdtune", "model": m, "gpu": g, "reason": str(reason), "rows": int(n)}
            for (m, g, reason), n in ours.groupby(["model_key", "gpu_name", ours["reason"].fillna("?")]).size().items()]
    theirs = r[r["aic_status"] != "ok"]
    text = theirs["aic_error_text"].fillna(theirs["aic_status"]).astype(str).map(_short_error)
    rows += [{"tool": PEER, "model": m, "gpu": g, "reason": reason, "rows": int(n)}
             for (m, g, reason), n in theirs.groupby(["model_key", "gpu_name", text]).size().items()]
    return pd.DataFrame(rows, columns=["tool", "model", "gpu", "reason", "rows"])


def _short_error(text: str) -> str:
    import re

    line = text.strip().splitlines()[0] if text.strip() else "no estimate"
    line = re.sub(r"'/[^']*/([^'/]+)'", r"'\1'", line)  # the machine's paths say nothing about the row
    return line if len(line) <= 100 else line[:97] + "..."


def unpredicted_numbers(card: Scorecard) -> dict[str, int]:
    """How many rows each tool could not predict, and both: counted, never dropped."""
    r = card.rows
    ours, theirs = ~r["predicted"], r["aic_status"] != "ok"
    return {"rows": len(r), "pdtune": int(ours.sum()), "peer": int(theirs.sum()), "neither": int((ours & theirs).sum())}


# ---------------------------------------------------------------------------------------------- your model


def table_if_any(frame: pd.DataFrame) -> Any:
    """The frame styled for the page, or nothing at all when it is empty (the prose already says why)."""
    from pdtune.chapters.display import styled

    return styled(frame, precision=1) if len(frame) else None


def shown_name(model: str) -> str:
    """The model as a sentence names it: a bundled name, or a path's folder (never the path)."""
    return model_key(str(model).removesuffix("config.json").rstrip("/"))


def _shape(spec: Any) -> tuple[str, str, str]:
    """What decides a model's step costs most: its attention, MoE or dense, recurrent state or none."""
    return ("MLA" if spec.mla is not None else "per-head attention", "MoE" if spec.moe is not None else "dense",
            "hybrid" if spec.is_hybrid else "attention only")


def nearest_scored(model: str, keys: list[str]) -> tuple[str, str] | None:
    """The scored model most like ``model`` (a name, a folder or a config.json) and why: the fewest differences
    in :func:`_shape`, then the nearest total parameter count (by ratio). None when ``model`` cannot be read."""
    from pdtune.model import bundled_models, load_model
    from pdtune.paramcount import count_parameters

    try:
        spec = load_model(model)
    except (InputError, OSError):
        return None
    bundled = set(bundled_models())
    mine, size = _shape(spec), count_parameters(spec).total
    others = {k: load_model(k) for k in keys if k in bundled}
    if not others or size <= 0:
        return None

    def distance(key: str) -> tuple[int, float]:
        return (sum(a != b for a, b in zip(mine, _shape(others[key]), strict=True)),
                abs(math.log(count_parameters(others[key]).total / size)))

    best = min(others, key=lambda k: (distance(k), k))
    return best, ", ".join(_shape(others[best]))


def your_model(card: Scorecard, model: str, gpu: str) -> tuple[str, pd.DataFrame]:
    """A sentence on whether the measurements cover this parameter set's model (and GPU), and its errors there;
    for a model they do not hold, the nearest one they do (:func:`nearest_scored`) and its errors."""
    key = model_key(model)
    given, model = model, shown_name(model)
    mine = card.lomo[card.lomo["model_key"] == key]
    if not len(mine):
        text = (f"The measurements have no vLLM rows of {model}, so no prediction this book makes for it has been "
                "checked against a measurement")
        near = nearest_scored(given, sorted(card.rows["model_key"].unique()))
        if near is None:
            return (text + f"; the errors above, on {card.rows['model_key'].nunique()} other models, are the best "
                    "guide to how far off it may be.", pd.DataFrame())
        table = validation_table(Scorecard(card.rows[card.rows["model_key"] == near[0]]))
        return (text + f". The nearest model they hold is {near[0]} ({near[1]}, as {model}); its errors below are "
                "the best guide to how far off it may be.", table[table["model"] != "all"])
    table = validation_table(Scorecard(card.rows[card.rows["model_key"] == key]))
    table = table[table["model"] != "all"]
    on_gpu = table[table["gpu"] == gpu.lower()]
    if len(on_gpu):
        r = on_gpu.iloc[0]
        text = (f"The measurements cover {model} on {gpu.upper()}: {int(r['rows'])} rows, predicted uncalibrated "
                f"with a median |error| of {r['tpot_median_error_pct']:.1f} % on TPOT and "
                f"{r['ttft_median_error_pct']:.1f} % on TTFT.")
    else:
        text = (f"The measurements cover {model} on {', '.join(g.upper() for g in table['gpu'])}, not on "
                f"{gpu.upper()}; the table shows how far off the model is on those.")
    return text, table


# -------------------------------------------------------------------------------- chapters 5 and 6: sweeps


def sweep_cases(card: Scorecard | None = None) -> pd.DataFrame:
    """Every scored row as a point of a measured sweep (one case per model, GPU and ISL/OSL), with the
    uncalibrated prediction beside it: what chapters 5 and 6 draw against concurrency."""
    card = card or scorecard()
    r = card.rows
    out = pd.DataFrame({
        "case": r["model_key"] + " on " + r["gpu_name"].str.upper() + ", ISL/OSL " + r["isl"].astype(int).astype(str)
        + "/" + r["osl"].astype(int).astype(str),
        "model": r["model_key"], "gpu": r["gpu_name"], "topology": r["topology"].astype(str),
        "gpus_total": r["gpus_total"].astype(int), "concurrency": r["concurrency"].astype(int),
        "measured_ttft_ms_p50": r["measured_ttft_ms_p50"], "modeled_ttft_ms_p50": r["lomo_ttft_ms_p50"],
        "measured_tpot_ms_p50": r["measured_tpot_ms_p50"], "modeled_tpot_ms_p50": r["lomo_tpot_ms_p50"],
        "source_id": r["source_id"],
    })
    # Repeated rows (the same run exported twice) draw one point.
    out = out.drop_duplicates(subset=["case", "topology", "concurrency", "measured_tpot_ms_p50"])
    return out.sort_values(["case", "gpus_total", "topology", "concurrency"], kind="stable").reset_index(drop=True)


def default_case(cases: pd.DataFrame, model: str, gpu: str) -> tuple[str, bool]:
    """The case a chart opens on: this parameter set's model and GPU when measured (True), else a reference."""
    key, g = model_key(model), gpu.strip().lower()
    for want in ((cases["model"] == key) & (cases["gpu"] == g), cases["model"] == key):
        mine = cases[want]
        if len(mine):
            return str(mine["case"].value_counts().index[0]), True
    ref = cases[(cases["model"] == "llama-3.1-70b") & (cases["gpu"] == "h200")]
    return str((ref if len(ref) else cases)["case"].value_counts().index[0]), False


def sweep_note(cases: pd.DataFrame, model: str, gpu: str, what: str) -> str:
    """One sentence: whether real measurements of this set's model exist, and which case the chart opens on."""
    case, own = default_case(cases, model, gpu)
    model = shown_name(model)
    models = cases["model"].nunique()
    if own:
        return (f"Real vLLM measurements of this model exist: the chart opens on {case} and draws the measured "
                f"{what} (points) beside what the performance model predicts (dashed lines).")
    return (f"There are no real vLLM measurements of {model}; the chart opens on {case}, one of the {models} "
            f"models aiconfigurator measured, and draws the measured {what} (points) beside what the performance "
            "model predicts for it (dashed lines).")


def sweep_error(cases: pd.DataFrame, case: str, metric: str) -> str:
    """The model's median |error| on ``metric`` over one case, as the prose quotes it."""
    sel = cases[cases["case"] == case]
    err = (sel[f"modeled_{metric}"] / sel[f"measured_{metric}"] - 1).abs().dropna() * 100
    if not len(err):
        return "The model predicts none of these rows."
    return (f"Over the {len(sel)} points of {case} the model's median |error| is {float(err.median()):.0f} % "
            f"(90th percentile {float(np.percentile(err, 90)):.0f} %).")


def fitted_on(gpu: str) -> str:
    """Which models the leave-one-model-out defaults for ``gpu`` were fitted on (a sentence fragment)."""
    table = lomo_models()
    mine = table[table["gpu_name"] == gpu]
    return "; ".join(f"{r.model_key}: {r.fitted_on}" for r in mine.itertuples())


def peer_source() -> str:
    """Where aiconfigurator's cached estimates live, relative to the repository."""
    from pdtune.paths import REPO_ROOT
    from pdtune.scorecard import peer_file

    try:
        return peer_file().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(peer_file())


def source_sentence() -> str:
    return f"the scorecard in `data/perfmodel/validation/heldout.csv`, written by `{COMMAND}`"


# ------------------------------------------------------------------------------------------ runs of one point


@cache
def launch_by_id() -> dict[str, str]:
    """Per silicon row id, the script version that launched its server
    (:func:`pdtune.perfmodel.launch_flags.launched_by`)."""
    from pdtune.perfmodel.defaults import silicon_file
    from pdtune.perfmodel.launch_flags import launched_by
    from pdtune.results import load_results

    rows = load_results(silicon_file())
    return dict(zip(rows["source_id"].astype(str), launched_by(rows), strict=True))


@cache
def _replicates(card: Scorecard) -> pd.DataFrame:
    """:func:`pdtune.perfmodel.replicates.replicate_table` of the scorecard beside both of pdtune's predictions,
    each row with the script version that launched its server (the level ``deployment and launch script``),
    computed once per scorecard (the page reads it three times)."""
    rows = card.rows.assign(launch=card.rows["source_id"].astype(str).map(launch_by_id()))
    return replicate_table(rows, predictions=("lomo", "calibrated"))


def replicate_view(card: Scorecard, metric: str) -> pd.DataFrame:
    """The replicate table for ``metric`` (``ttft`` or ``tpot``) as the page shows it: what counts as one point,
    its rows and points, how far apart its runs are (each run against the median of the others; median and p90,
    %), and pdtune's uncalibrated and calibrated |error| on the same rows."""
    table = _replicates(card)
    names = {"level": "same_point", "rows": "rows", "points": "points",
             f"{metric}_replicate_median": "runs_apart_median_pct", f"{metric}_replicate_p90": "runs_apart_p90_pct",
             f"{metric}_lomo_median": "uncalibrated_median_pct", f"{metric}_lomo_p90": "uncalibrated_p90_pct",
             f"{metric}_calibrated_median": "calibrated_median_pct", f"{metric}_calibrated_p90": "calibrated_p90_pct"}
    return table[list(names)].rename(columns=names)


def replicate_counts(card: Scorecard) -> dict[str, int]:
    """Rows with another run of their deployment's point, and how many of them the calibrated fit left unpredicted."""
    table = _replicates(card).set_index("level")
    rows = int(table.loc["deployment", "rows"])
    return {"rows": rows, "not_calibrated": rows - int(table.loc["deployment", "calibrated_rows"])}


def replicate_example(card: Scorecard) -> dict[str, Any]:
    """The deployment point measured most often (ties: the widest TTFT spread): its label, its runs' TTFT (ms) and
    vLLM versions, oldest version first, for the page's worked number."""
    keys = list(LEVELS["deployment"])
    rows = card.rows.dropna(subset=["measured_ttft_ms_p50"])
    groups = rows.groupby(keys)["measured_ttft_ms_p50"]
    rank = pd.DataFrame({"runs": groups.size(), "spread": groups.max() / groups.min()})
    point = rank.sort_values(["runs", "spread"], ascending=False).index[0]
    runs = rows.set_index(keys).loc[point]
    runs = runs.assign(_version=runs["vllm"].map(_version_key)).sort_values(["_version", "measured_ttft_ms_p50"])
    deployment, isl, osl, concurrency = point
    parts = [p.strip() for p in str(deployment).split("|")]
    return {"label": f"{shown_name(parts[0])} {parts[4]} on {parts[3]} of {parts[1].upper()}", "isl": int(isl),
            "osl": int(osl), "concurrency": int(concurrency),
            "ttft_ms": runs["measured_ttft_ms_p50"].tolist(), "vllm": runs["vllm"].astype(str).tolist()}


def _version_key(version: Any) -> tuple[int, int, int]:
    """A vLLM version as numbers, so that 0.9 sorts before 0.17; a row without one sorts last."""
    from pdtune.versions import parse

    try:
        return parse(str(version))
    except InputError:
        return (10**6, 0, 0)


def replicate_sentence(example: dict[str, Any]) -> str:
    """The worked runs in words: each vLLM version's TTFTs, and the first and last run against the others."""
    from pdtune.perfmodel.replicates import replicate_error

    ttft, versions = example["ttft_ms"], example["vllm"]
    by_version: dict[str, list[float]] = {}
    for value, version in zip(ttft, versions, strict=True):
        by_version.setdefault(version, []).append(value)
    parts = []
    for version, values in by_version.items():
        lo, hi = min(values), max(values)
        span = f"{lo:,.0f} ms" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f} ms"
        parts.append(f"{span} on vLLM {version}" if len(values) == 1 else f"{span} over {len(values)} runs on vLLM "
                     f"{version}")
    first = replicate_error(ttft[0], ttft[1:]) * 100
    last = replicate_error(ttft[-1], ttft[:-1]) * 100
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"
    return (f"{example['label']} at {example['isl']:,}/{example['osl']:,} and {example['concurrency']:,} concurrent "
            f"requests was measured {len(ttft)} times: a median TTFT of {listed}. Each against the median of the "
            f"others, the {ttft[0]:,.0f} ms run is {_pct_text(first)} off and the {ttft[-1]:,.0f} ms one "
            f"{_pct_text(last)}.")


def _pct_text(x: float) -> str:
    return f"{x:,.0f} %" if x >= 10 else f"{x:.1f} %"
