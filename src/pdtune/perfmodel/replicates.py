"""How far apart two runs of one deployment are: the noise in the data, scored as a prediction is.

A results table can hold distinct runs of the same point: the same model, GPU, layout, ISL, OSL and concurrency,
measured on another day, at another precision or with another vLLM (a run exported twice under two ids is not a
second run; :mod:`pdtune.perfmodel.repeats` folds those first). Such runs disagree, and a prediction made from the
point alone cannot follow them apart: their spread is error no model of the point removes.

The **replicate error** of a run is the error of predicting it by the median of the *other* runs of its point,
``|x / median(others) - 1|``: the prediction that has seen every other measurement of the same point and nothing
else, scored the way the model is (one row against a value that did not see it). It is a yardstick, not a strict
bound: with two runs 100 and 200 ms it is 100 % and 50 %, while 141 ms would miss each by at most 41 %. Its median
and p90 over the rows with at least one other run are set beside a model's on the same rows, at a **level** of what
counts as the same point (:data:`LEVELS`): the layout alone, the deployment as pdtune keys it
(:func:`pdtune.perfmodel.validation.deployment_key`: the layout with its weight, KV and compute precision), or that
deployment on one vLLM version, or that deployment launched by one version of its script (the ``launch`` column:
:mod:`pdtune.perfmodel.launch_flags`; the script's flags and its image change together). pdtune's step cost does not
depend on the vLLM version, so the deployment level is the one its errors compare with; the version and script levels
show how much of the rest each explains.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pdtune.perfmodel.validation import error_percentiles

#: What makes two rows runs of the same point, coarsest first: level name -> the columns that must be equal.
LEVELS: dict[str, tuple[str, ...]] = {
    "layout": ("model_key", "gpu_name", "topology", "isl", "osl", "concurrency"),
    "deployment": ("deployment", "isl", "osl", "concurrency"),
    "deployment and vLLM version": ("deployment", "vllm", "isl", "osl", "concurrency"),
    # The script version that launched the server (pdtune.perfmodel.launch_flags: flags and image change together);
    # a table without a ``launch`` column leaves this level out.
    "deployment and launch script": ("deployment", "launch", "isl", "osl", "concurrency"),
}


def replicate_error(value: float, others: Sequence[float]) -> float:
    """``|value / median(others) - 1|``: one run predicted by the median of the other runs of its point."""
    return abs(value / float(np.median(np.asarray(others, dtype=float))) - 1.0)


def replicate_errors(table: pd.DataFrame, keys: Sequence[str], column: str) -> pd.Series:
    """Per row of ``table``, the replicate error (a fraction) of ``column`` among the rows equal on ``keys``; NaN
    for a row whose point has no other run with a value."""
    out = np.full(len(table), np.nan)
    usable = np.flatnonzero(table[column].notna().to_numpy())
    if len(usable):
        # Group codes, then NumPy per point: pandas' own group iteration cost 2 s a column on 5,000 silicon rows,
        # nearly all of them points of one run.
        sub = table.iloc[usable]
        codes = sub.groupby(list(keys), sort=False, dropna=False).ngroup().to_numpy()
        values = sub[column].to_numpy(dtype=float)
        order = np.argsort(codes, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
        for members in np.split(order, starts[1:]):
            if len(members) < 2:
                continue
            group = values[members]
            for i, row in enumerate(members):
                out[usable[row]] = replicate_error(group[i], np.delete(group, i))
    return pd.Series(out, index=table.index, dtype=float)


def replicate_table(table: pd.DataFrame, metrics: Sequence[str] = ("ttft_ms_p50", "tpot_ms_p50"), *,
                    predictions: Sequence[str] = ("lomo", "calibrated", "aic"),
                    levels: dict[str, tuple[str, ...]] | None = None) -> pd.DataFrame:
    """Per level of :data:`LEVELS`: the rows with another run of their point, the points, and per metric the median
    and p90 replicate error in %, beside each of ``predictions``' median and p90 |error| on the same rows and how many
    of them it predicted (columns ``measured_{metric}`` and ``{prediction}_{metric}``, as in the scorecard; ``aic``:
    aiconfigurator's estimates, :func:`pdtune.scorecard.with_peer`; a prediction without a column is left out).
    ``levels`` replaces :data:`LEVELS` (a table of one model and GPU needs no layout level)."""
    records = []
    for level, keys in (LEVELS if levels is None else levels).items():
        if any(k not in table.columns for k in keys):
            continue  # a level whose columns the table lacks (no ``launch``) is not a level of this table
        record: dict[str, object] = {"level": level}
        for metric in metrics:
            measured = table[f"measured_{metric}"]
            errors = replicate_errors(table, keys, f"measured_{metric}")
            has = errors.notna()
            if metric == metrics[0]:
                record["rows"] = int(has.sum())
                record["points"] = int(table[has].groupby(list(keys), dropna=False).ngroups)
            short = metric.split("_")[0]
            record[f"{short}_replicate_median"], record[f"{short}_replicate_p90"] = error_percentiles(errors[has])
            for name in predictions:
                column = f"{name}_{metric}"
                if column not in table:
                    continue
                model = table.loc[has, column] / measured[has] - 1.0
                if metric == metrics[0]:  # rows it could not predict are counted, not dropped unseen
                    record[f"{name}_rows"] = int(model.notna().sum())
                record[f"{short}_{name}_median"], record[f"{short}_{name}_p90"] = error_percentiles(model.dropna())
        records.append(record)
    return pd.DataFrame(records)
