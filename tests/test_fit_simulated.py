"""The fit through the scheduler simulation (issue 23): ``fit_efficiency(..., latency_model="simulated")``.

The measurements here are **modeled**, written by this test: the benchmarks of six Llama-3.1-70B deployments on
H200 (sa-bench's clients, as aiconfigurator's silicon rows are run) simulated at factors chosen here, then read back
as if measured. A fit through the simulator that starts from the shipped H200 defaults must find factors whose
simulations reproduce them, far closer than the defaults do; a fit that cannot move the factors could not.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from pdtune.gpus import load_gpu
from pdtune.model import load_model
from pdtune.perfmodel.defaults import gpu_defaults
from pdtune.perfmodel.fit import Problem, fit_efficiency
from pdtune.perfmodel.simulated import simulate_point
from pdtune.perfmodel.validation import EngineCache, cached_engine, row_setup, sim_config

#: (topology, concurrency, ISL, OSL) of the modeled runs: small enough to simulate in seconds.
POINTS = [("TP8", 4, 1024, 128), ("TP8", 16, 1024, 128), ("TP8", 32, 2048, 128), ("TP4", 4, 1024, 128),
          ("TP4", 16, 2048, 128), ("TP4", 32, 1024, 128)]
#: What the modeled "cluster" runs at: slower matmuls, less of HBM, a larger per-request front end.
TRUTH = {"compute": 0.45, "hbm": 0.65, "request_overhead_s": 0.05}


def _rows(spec, gpu, eff) -> pd.DataFrame:
    # Dated where no launch script of launch_flags.csv covers them, so the server is vLLM's defaults: with the
    # Llama script's FP8 KV cache and no prefix caching the closed loop of 32 clients is chaotic enough that factors
    # within 2 % of these give a run 7 % away, and no fit can land closer than that (found 2026-12-07).
    base = {"source": "aiconfigurator-silicon", "mode": "agg", "model": "meta-llama/Llama-3.1-70B", "gpu": "h200",
            "backend": "vllm", "backend_version": "0.18.0", "precision": "fp8", "provenance": "measured=2026-01-01"}
    frame = []
    cache = EngineCache()
    for topology, c, isl, osl in POINTS:
        row = pd.Series({**base, "topology": topology, "gpus_total": int(topology[2:]), "concurrency": c,
                         "isl": isl, "osl": osl})
        setup = row_setup(row, spec)
        engine = cached_engine(cache, setup, gpu, isl, osl)
        assert setup.flags is None
        point, _ = simulate_point(engine, isl, osl, c, eff, harness="sa-bench", config=sim_config(setup))
        # the silicon file's columns hold the benchmark's means (perfmodel.simulated.SILICON_STATISTIC)
        frame.append({**row.to_dict(), "ttft_ms_p50": point.stats["ttft_ms_mean"],
                      "tpot_ms_p50": point.stats["tpot_ms_mean"]})
    return pd.DataFrame(frame)


def _errors(spec, gpu, rows: pd.DataFrame, eff) -> list[float]:
    from pdtune.perfmodel.validation import validate_rows

    points = validate_rows(rows, spec, gpu, eff, latency_model="simulated")
    assert points["predicted"].all()
    return [abs(e) for m in ("ttft_ms_p50", "tpot_ms_p50") for e in points[f"{m}_error"]]


@pytest.mark.slow
def test_a_fit_through_the_simulator_finds_the_factors_that_made_the_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, gpu = load_model("llama-3.1-70b"), load_gpu("h200")
    start = gpu_defaults("h200").efficiency
    rows = _rows(spec, gpu, replace(start, **TRUTH))
    before = _errors(spec, gpu, rows, start)
    assert max(before) > 0.15  # the defaults miss the modeled runs by more than 15 % somewhere

    # As shipped: every factor is pulled towards where it starts (fit.PRIOR_WEIGHT), so six runs move it part of
    # the way; the runs' errors must still fall to under half of the defaults'.
    pulled = fit_efficiency([Problem(spec, gpu, rows)], start=start, factors=tuple(TRUTH), latency_model="simulated")
    assert pulled.points == len(POINTS) and not pulled.unpredicted
    assert max(_errors(spec, gpu, rows, pulled.efficiency)) < max(before) / 2
    for name, truth in TRUTH.items():  # each factor moved towards the one that made the runs
        was, now = getattr(start, name), getattr(pulled.efficiency, name)
        assert abs(now - truth) < abs(was - truth), name

    # Without the pull the alternation itself must land on the factors that made the runs, and their full
    # simulations (not the linear forms the fit used) on the runs.
    import pdtune.perfmodel.fit as fit

    monkeypatch.setattr(fit, "PRIOR_WEIGHT", 0.0)
    # Until the factors settle: the shipped fits stop after SIM_FIT_ROUNDS = 3 (their cost), which from the
    # defaults refitted on 2026-12-07 leaves request_overhead_s 5 % short here (0.0525 s); six rounds land on it.
    monkeypatch.setattr(fit, "SIM_FIT_ROUNDS", 6)
    monkeypatch.setattr(fit, "SIM_FIT_TOLERANCE", 0.001)
    free = fit_efficiency([Problem(spec, gpu, rows)], start=start, factors=tuple(TRUTH), latency_model="simulated")
    for name, truth in TRUTH.items():
        assert getattr(free.efficiency, name) == pytest.approx(truth, rel=0.05), name
    assert max(_errors(spec, gpu, rows, free.efficiency)) < 0.03
