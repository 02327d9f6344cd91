"""Leave-one-model-out factors fitted through the scheduler simulation (issue 23), and the scorecard they give.

``python -m pdtune.scorecard --fit-simulated`` fits each architecture's factors without one model, through
pdtune.sim, on the cheap rows only (:func:`pdtune.perfmodel.heldout.sim_fit_rows`), and writes
``lomo_models_simulated.csv``; ``benchmarks/bench_validate.py --latency-model simulated --lomo-factors`` that file
scores every row with them (``lomo_simulated.csv``). Both take most of an hour, so the tests check what the files
must say and re-simulate a few cheap rows; the fit itself is tested in ``test_fit_simulated.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from pdtune.errors import InputError
from pdtune.perfmodel import defaults as defaults_module
from pdtune.perfmodel.defaults import architecture_of, fit_gpu_defaults, silicon_file, silicon_problems
from pdtune.perfmodel.heldout import SIM_FIT_MAX_CONCURRENCY, SIM_FIT_MAX_OSL, sim_fit_rows
from pdtune.results import load_results
from pdtune.scorecard import (MODELS, lomo_factors, lomo_models, lomo_simulated_file, scorecard_dir,
                              simulated_scorecard_file)

SCORED = simulated_scorecard_file()


@pytest.fixture(scope="module")
def problems():  # type: ignore[no-untyped-def]
    return silicon_problems(load_results(silicon_file()))


def test_the_simulated_fit_uses_the_rows_of_at_most_64_clients_and_1024_output_tokens(problems) -> None:
    rows = pd.concat([p.rows for p in problems.values()])
    mask = sim_fit_rows(rows)
    kept = rows[mask]
    assert (kept["concurrency"] <= SIM_FIT_MAX_CONCURRENCY).all() and (kept["osl"] <= SIM_FIT_MAX_OSL).all()
    left = rows[~mask]
    assert ((left["concurrency"] > SIM_FIT_MAX_CONCURRENCY) | (left["osl"] > SIM_FIT_MAX_OSL)).all()
    # On InferenceX's grid 1k/1k and 8k/1k are in, 1k/8k is out; so are the 128-2,048-client rows.
    assert 1024 in set(kept["osl"]) and 8192 in set(left["osl"]) and left["concurrency"].max() == 2048
    assert 0 < len(kept) < len(rows)


def test_fit_gpu_defaults_fits_only_the_selected_rows_of_the_other_models(problems, monkeypatch) -> None:
    seen = {}

    def fake_fit(chosen, **kwargs):  # type: ignore[no-untyped-def]
        seen["rows"] = pd.concat([p.rows for p in chosen])
        seen["latency_model"] = kwargs["latency_model"]
        raise RuntimeError("stop")  # the rows handed to the fit are all this test needs

    monkeypatch.setattr(defaults_module, "fit_efficiency", fake_fit)
    with pytest.raises(RuntimeError, match="stop"):
        fit_gpu_defaults(problems, "h100", exclude=["llama-3.1-70b"], latency_model="simulated", rows=sim_fit_rows)
    rows = seen["rows"]
    assert seen["latency_model"] == "simulated"
    assert sim_fit_rows(rows).all()
    assert "llama-3.1-70b" not in {defaults_module.model_key(m) for m in rows["model"]}
    expected = sum(int(sim_fit_rows(p.rows).sum()) for (m, g), p in problems.items()
                   if g in architecture_of("h100") and m != "llama-3.1-70b")
    assert len(rows) == expected
    with pytest.raises(InputError, match="no row"):
        fit_gpu_defaults(problems, "h100", rows=lambda r: r["concurrency"] < 0)


def test_every_simulated_fit_left_its_model_out_and_stayed_on_its_architecture(problems) -> None:
    fits = lomo_models(lomo_simulated_file())
    assert sorted(zip(fits["model_key"], fits["gpu_name"], strict=True)) == sorted(
        k for k in problems if k[0] in MODELS)
    for _, row in fits.iterrows():
        used = row["fitted_on"].split()
        assert row["model_key"] not in used and used
        assert all(any(g in architecture_of(row["gpu_name"]) for m, g in problems if m == u) for u in used)
    # one fit per architecture and held-out model: the GPUs of an architecture share its factors
    factors = [c for c in fits.columns if c.startswith("factor_")]
    for (model, arch), group in fits.groupby([fits["model_key"], fits["gpu_name"].map(architecture_of)]):
        assert len(group[factors].drop_duplicates()) == 1, (model, arch)


def test_the_simulated_scorecard_has_every_row_once(problems) -> None:
    table = pd.read_csv(SCORED)
    expected = sum(len(p.rows) for (m, _), p in problems.items() if m in MODELS)
    assert len(table) == expected and table["source_id"].is_unique
    # None dropped: the rows not predicted are exactly those whose recorded workload is not the one that ran
    # (launch_flags.csv: gpt-oss-120b H100's client with --max-concurrency 512), each with its reason.
    from pdtune.perfmodel.launch_flags import row_flags

    marked = {r["source_id"] for (m, _), p in problems.items() if m in MODELS for _, r in p.rows.iterrows()
              if (f := row_flags(r)) is not None and f.unpredictable}
    assert len(marked) == 9
    assert set(table.loc[~table["predicted"], "source_id"]) == marked
    assert table.loc[~table["predicted"], "reason"].str.contains("max-concurrency 512").all()


def test_cheap_rows_of_the_simulated_scorecard_reproduce_from_the_shipped_factors(problems) -> None:
    """Three rows of 4 clients re-simulated with the shipped simulated-fit factors: the file is what they give."""
    from pdtune.perfmodel.validation import validate_rows

    table = pd.read_csv(SCORED)
    table["model_key"] = table["deployment"].str.split(" | ", regex=False).str[0]
    cheap = table[(table["concurrency"] == 4) & (table["osl"] == 1024)]
    picked = cheap.groupby("model_key").head(1).head(3)
    assert len(picked) == 3
    for _, want in picked.iterrows():
        problem = problems[(want["model_key"], want["gpu"])]
        rows = problem.rows[problem.rows["source_id"] == want["source_id"]]
        eff = lomo_factors(want["model_key"], want["gpu"], lomo_simulated_file())
        got = validate_rows(rows, problem.spec, problem.gpu, eff, latency_model="simulated").iloc[0]
        for metric in ("ttft_ms_p50", "tpot_ms_p50"):
            assert math.isclose(got[f"predicted_{metric}"], want[f"lomo_{metric}"], rel_tol=1e-4), (
                want["source_id"], metric)


def test_the_files_are_in_the_data_readme() -> None:
    readme = (scorecard_dir() / "README.md").read_text(encoding="utf-8")
    for name in (lomo_simulated_file().name, SCORED.name):
        assert f"`{name}`" in readme
    assert Path(SCORED).exists() and lomo_simulated_file().exists()


def test_a_calibration_started_from_either_silicon_default_marks_those_rows_in_sample(problems) -> None:
    """pdtune validate (commands.validate.mark_fitted): a calibration that started from, and was pulled towards,
    the silicon defaults (steady-state ``silicon`` or ``silicon-simulated``) has seen their rows; the article's
    factors have not."""
    from pdtune.commands.validate import mark_fitted
    from pdtune.perfmodel.calibrate import Calibration
    from pdtune.perfmodel.defaults import gpu_defaults

    rows = problems[("llama-3.1-70b", "h200")].rows.head(4)
    points = pd.DataFrame({"row": list(rows.index), "predicted": True})
    marked = {}
    for start in ("silicon", "silicon-simulated", "article"):
        cal = Calibration(model="llama-3.1-70b", gpu="h200", efficiency=gpu_defaults("h200").efficiency,
                          start=start, fitted_measurements=("none of these",))
        marked[start] = mark_fitted(points, rows, cal, "h200")["start_fitted"].tolist()
    assert marked["silicon"] == marked["silicon-simulated"] == [True] * 4
    assert marked["article"] == [False] * 4


def test_chapter_8_reads_the_simulated_scorecard() -> None:
    """The trust page's sentence on the simulation: its numbers are the file's, worked out here by hand."""
    from pdtune.chapters.trust import simulated_headline

    table = pd.read_csv(SCORED)
    got = simulated_headline()
    assert got["rows"] == len(table) and got["predicted"] == int(table["predicted"].sum()) == len(table) - 9
    ttft = (table["lomo_ttft_ms_p50"] / table["measured_ttft_ms_p50"] - 1).abs() * 100
    tpot = (table["lomo_tpot_ms_p50"] / table["measured_tpot_ms_p50"] - 1).abs() * 100
    assert math.isclose(got["ttft-median"], ttft.median(), rel_tol=1e-3)
    assert math.isclose(got["tpot-median"], tpot.median(), rel_tol=1e-3)
    assert math.isclose(got["ttft-p90"], ttft.quantile(0.9), rel_tol=2e-2)
