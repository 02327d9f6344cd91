"""Refit this folder's ``defaults.csv`` from the public measurements pdtune ships.

    .venv/bin/python data/perfmodel/fit_defaults.py               # defaults.csv (seconds)
    .venv/bin/python data/perfmodel/fit_defaults.py --simulated   # defaults_simulated.csv (about 20 CPU-minutes)

For H100, H200, B200 and B300: the factors of :class:`pdtune.perfmodel.efficiency.Efficiency` fitted
(:func:`pdtune.perfmodel.defaults.fit_gpu_defaults`) on every vLLM aggregated row of aiconfigurator's silicon
sample (``data/clusters/aiconfigurator-silicon/``) whose model is a bundled one, measured on a GPU of the same
architecture (H100 with H200, B200 with B300: one fit each), each measurement once (a row repeated under another
id is folded, :mod:`pdtune.perfmodel.repeats`). GB200 and GB300 keep the article-tuned factors.

Only the silicon file is read. The folders of :data:`pdtune.perfmodel.defaults.HELD_OUT_CLUSTERS` hold real
measurements kept out of every fit (``fit_gpu_defaults`` refuses their rows; ``tests/test_heldout_data.py``
checks that none of them is fitted on), so that pdtune can be scored on deployments it never saw.

Beside ``defaults.csv`` it writes ``fitted_rows.csv`` (the measurements each GPU's defaults were fitted on, which
``pdtune validate`` marks as in-sample) and ``prior_sensitivity.csv`` (per architecture and factor, whether the
rows or the prior decide the fitted value: :mod:`pdtune.perfmodel.sensitivity`). The fit is deterministic;
``tests/test_defaults.py`` checks that the files agree with each other.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pdtune.perfmodel.defaults import (
    SILICON_GPUS,
    GpuDefaults,
    architecture_of,
    fit_architectures,
    fitted_problem_rows,
    silicon_file,
    silicon_problems,
    write_defaults,
    write_fitted_rows,
)
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY
from pdtune.perfmodel.prior import HAND_SET, PRIOR
from pdtune.perfmodel.sensitivity import factor_sensitivity
from pdtune.results import load_results

HERE = Path(__file__).resolve().parent


def main_simulated(out: Path = HERE / "defaults_simulated.csv") -> Path:
    """``--simulated``: the same fits run through the scheduler simulation (``latency_model="simulated"``), on the
    rows :func:`pdtune.perfmodel.heldout.sim_fit_rows` keeps (at most 64 clients and 1,024 output tokens: the
    rest cost most of the simulation time), for the simulated predictions (``gpu_defaults(gpu, "simulated")``)."""
    from pdtune.perfmodel.heldout import SIM_FIT_MAX_CONCURRENCY, SIM_FIT_MAX_OSL, sim_fit_rows

    problems = silicon_problems(load_results(silicon_file()))
    rows = []
    # one fit per architecture; a kernel one architecture's rows never ran takes the other's ratio (carry_kernels)
    fits = fit_architectures(problems, latency_model="simulated", rows=sim_fit_rows)
    for gpu in SILICON_GPUS:
        members = architecture_of(gpu)
        eff, models = fits[members]
        n = sum(int(sim_fit_rows(p.rows).sum()) for (m, g), p in problems.items() if g in members)
        rows.append(GpuDefaults(gpu, eff, "silicon-simulated",
                                f"fitted through pdtune.sim on {n} vLLM aggregated rows on {' and '.join(members)} "
                                f"of {' '.join(models)} (those of at most {SIM_FIT_MAX_CONCURRENCY} clients and "
                                f"{SIM_FIT_MAX_OSL:,} output tokens), "
                                f"pulled towards the prior (perfmodel.prior)"))
    write_defaults(out, rows, "pdtune's default factors per GPU for simulated predictions; written by "
                              "fit_defaults.py --simulated")
    return out


def main(out: Path = HERE / "defaults.csv") -> Path:
    problems = silicon_problems(load_results(silicon_file()))
    rows = []
    # one fit per architecture; a kernel one architecture's rows never ran takes the other's ratio (carry_kernels)
    fits = fit_architectures(problems)
    fitted: dict[str, pd.DataFrame] = {}
    sensitivity = []
    set_by: dict[tuple[str, ...], dict[str, str]] = {}
    for gpu in SILICON_GPUS:
        members = architecture_of(gpu)
        mine = [p for (m, g), p in sorted(problems.items()) if g in members]
        eff, models = fits[members]
        if members not in set_by:  # a carried kernel is not in the architecture's rows: it changes nothing here
            table = factor_sensitivity(mine, eff, PRIOR)
            sensitivity.append(table.assign(gpus=" ".join(members)))
            set_by[members] = dict(zip(table["factor"], table["set_by"], strict=True))
        # the rows the fit was made of (not those it could not plan: the nine client-bug rows, for one)
        fitted[gpu] = fitted_problem_rows(mine, eff.arrival_clustering) if mine else pd.DataFrame()
        n = len(fitted[gpu])
        by_data = [f for f, s in set_by[members].items() if s == "data"]
        where = (f"{n} vLLM aggregated rows on {' and '.join(members)}" if n
                 else "no rows on this architecture: every GPU's rows")
        rows.append(GpuDefaults(gpu, eff, "silicon",
                                f"fitted on {where} of {' '.join(models)}; set by the rows: "
                                f"{' '.join(by_data) or 'none'}; the other factors sit at the prior "
                                f"(perfmodel.prior: published values, hand-set for {' '.join(sorted(HAND_SET))})"))
    for gpu in ("gb200", "gb300"):
        rows.append(GpuDefaults(gpu, DEFAULT_EFFICIENCY, "article", "the article-tuned factors (chapters 5-7)"))
    write_defaults(out, rows, "pdtune's default performance-model factors per GPU; written by fit_defaults.py")
    write_fitted_rows(out.parent / "fitted_rows.csv", fitted)
    table = pd.concat(sensitivity, ignore_index=True)
    columns = ["gpus", *[c for c in table.columns if c != "gpus"]]
    (out.parent / "prior_sensitivity.csv").write_text(
        table[columns].to_csv(index=False, float_format="%.6g", lineterminator="\n"), encoding="utf-8")
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the defaults file to write (default: this folder's)")
    parser.add_argument("--simulated", action="store_true", help="fit through pdtune.sim: defaults_simulated.csv")
    args = parser.parse_args()
    if args.simulated:
        print(f"wrote {main_simulated(args.out or HERE / 'defaults_simulated.csv')}")
    else:
        print(f"wrote {main(args.out or HERE / 'defaults.csv')}")
