"""Default factors per GPU: where each comes from, and that the file names what it was fitted on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pdtune.model import bundled_models
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from pdtune.perfmodel.defaults import SILICON_GPUS, carry_kernels, gpu_defaults


def test_article_gpus_keep_the_article_factors() -> None:
    for gpu in ("gb300", "gb200", "a100"):
        assert gpu_defaults(gpu).efficiency == DEFAULT_EFFICIENCY and gpu_defaults(gpu).source == "article"


def test_silicon_gpus_name_the_bundled_models_they_were_fitted_on() -> None:
    bundled = set(bundled_models())
    for gpu in SILICON_GPUS:
        d = gpu_defaults(gpu)
        assert d.source == "silicon" and "vLLM aggregated rows" in d.note
        models = d.note.split(" of ", 1)[1].split(";")[0].split()
        assert models and set(models) <= bundled, (gpu, models)
        assert 0 < d.efficiency.experts < 1 and d.efficiency.request_overhead_s > 0


def test_the_fitted_rows_file_lists_what_each_gpu_was_fitted_on() -> None:
    # fit_defaults.py writes defaults.csv and fitted_rows.csv together: as many rows per GPU as its note says,
    # each measurement once (a repeated row was folded before the fit).
    import re

    from pdtune.guarded import read_csv
    from pdtune.perfmodel.defaults import fitted_measurements, fitted_rows_file

    _header, rows = read_csv(fitted_rows_file())
    per_gpu: dict[str, list[str]] = {}
    for _, row in rows:
        per_gpu.setdefault(row["gpu"], []).append(row["measurement"])
    for gpu in SILICON_GPUS:
        n = int(re.search(r"fitted on (\d+) vLLM", gpu_defaults(gpu).note).group(1))
        assert len(per_gpu[gpu]) == n == len(set(per_gpu[gpu])), gpu
        assert fitted_measurements(gpu) == frozenset(per_gpu[gpu])
    assert fitted_measurements("gb300") == frozenset()
    # Only the rows the fit was made of (defaults.fitted_problem_rows): gpt-oss-120b's nine H100 runs at 512
    # clients are runs of a client bug (launch_flags.csv, unpredictable), which compile_problems leaves out.
    from pdtune.perfmodel.defaults import measurement_digest, silicon_file, silicon_problems
    from pdtune.results import load_results

    rows = silicon_problems(load_results(silicon_file()))[("gpt-oss-120b", "h100")].rows
    bug = {measurement_digest(r) for _, r in rows[rows["concurrency"] == 512].iterrows()}
    assert len(bug) == 9 and not bug & fitted_measurements("h100")


def test_the_note_says_which_factors_the_rows_decide() -> None:
    import pandas as pd

    from pdtune.paths import data_dir

    table = pd.read_csv(data_dir() / "perfmodel" / "prior_sensitivity.csv")
    assert ((table["data_share"] >= 0) & (table["data_share"] <= 1)).all()
    assert (table["set_by"] == table["data_share"].map(lambda s: "data" if s >= 0.5 else "prior")).all()
    for gpu in SILICON_GPUS:
        frame = table[table["gpus"].str.split().map(lambda g: gpu in g)]
        named = [f for f in gpu_defaults(gpu).note.split("set by the rows: ", 1)[1].split(";")[0].split()
                 if f != "none"]
        assert named == frame.loc[frame["set_by"] == "data", "factor"].tolist(), gpu


def test_simulated_predictions_take_the_factors_fitted_through_the_simulation() -> None:
    """defaults_simulated.csv (fit_defaults.py --simulated): one fit per architecture on the rows
    pdtune.perfmodel.heldout.sim_fit_rows keeps, counted in the note; GPUs it does not list fall back."""
    from pdtune.perfmodel.defaults import architecture_of, silicon_file, silicon_problems
    from pdtune.perfmodel.heldout import sim_fit_rows
    from pdtune.results import load_results

    problems = silicon_problems(load_results(silicon_file()))
    for gpu in SILICON_GPUS:
        sim = gpu_defaults(gpu, "simulated")
        assert sim.source == "silicon-simulated" and sim.efficiency != gpu_defaults(gpu).efficiency
        n = sum(int(sim_fit_rows(p.rows).sum()) for (_, g), p in problems.items() if g in architecture_of(gpu))
        assert f"fitted through pdtune.sim on {n} vLLM aggregated rows" in sim.note
    assert gpu_defaults("h100", "simulated").efficiency == gpu_defaults("h200", "simulated").efficiency
    for gpu in ("gb200", "gb300"):
        assert gpu_defaults(gpu, "simulated") == gpu_defaults(gpu)


def test_a_kernel_one_architecture_never_ran_keeps_the_other_architectures_ratio() -> None:
    """pdtune.perfmodel.defaults.carry_kernels, by hand: Hopper's FP8 experts reach 0.175 / 0.25 = 0.7 of its
    generic expert compute fraction and 0.6 / 0.65 of its HBM one, so Blackwell (no FP8 rows) gets
    0.34 x 0.7 = 0.238 and 0.73 x 0.6 / 0.65 = 0.67385; Hopper has no FP4 tensor cores (FP4 weights run as
    w4a16 there), so Blackwell's FP4 is not carried to it; BF16, in neither, stays unset (the generic fractions);
    what an architecture's own rows fitted is kept."""
    hopper, blackwell = ("h100", "h200"), ("b200", "b300")
    fits = {
        hopper: Efficiency(expert_compute=0.25, expert_hbm=0.65, expert_compute_fp8=0.175, expert_hbm_fp8=0.6),
        blackwell: Efficiency(expert_compute=0.34, expert_hbm=0.73, expert_compute_fp4=0.32, expert_hbm_fp4=0.75),
    }
    out = carry_kernels(fits)
    assert out[blackwell].expert_compute_fp8 == pytest.approx(0.238)
    assert out[blackwell].expert_hbm_fp8 == pytest.approx(0.67385, abs=1e-5)
    assert out[blackwell].expert_fractions("fp8") == pytest.approx((0.238, 0.67385), abs=1e-5)
    assert (out[blackwell].expert_compute_fp4, out[blackwell].expert_hbm_fp4) == (0.32, 0.75)
    assert out[hopper] == fits[hopper]  # FP8 its own, FP4 not carried to a GPU without FP4 tensor cores
    assert out[blackwell].expert_compute_bf16 is None and out[hopper].expert_compute_bf16 is None
    # A fraction above 1 is capped: a kernel never beats its peak.
    strong = {hopper: replace(fits[hopper], expert_compute_fp8=0.5), blackwell: replace(fits[blackwell],
                                                                                          expert_compute=0.6)}
    assert carry_kernels(strong)[blackwell].expert_compute_fp8 == 1.0


def test_the_scorecards_folds_carry_the_kernels_their_architecture_lacks() -> None:
    """The shipped leave-one-model-out factors (data/perfmodel/validation/lomo_models.csv): MiniMax-M2.5 left out,
    Blackwell's rows run no FP8 experts, so its FP8 fractions are Hopper's ratio to the generic ones (to the
    file's six digits); Hopper's FP4 stays unset."""
    from pdtune.scorecard import lomo_factors

    b200, h200 = lomo_factors("minimax-m2.5", "b200"), lomo_factors("minimax-m2.5", "h200")
    assert b200.expert_compute_fp8 == pytest.approx(b200.experts * h200.expert_compute_fp8 / h200.experts, rel=1e-5)
    assert b200.expert_hbm_fp8 == pytest.approx(b200.experts_hbm * h200.expert_hbm_fp8 / h200.experts_hbm, rel=1e-5)
    assert b200.expert_compute_fp8 < b200.experts  # Hopper's FP8 experts are slower than its generic ones
    assert h200.expert_compute_fp4 is None
