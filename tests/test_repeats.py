"""A measurement repeated under another id counts once (pdtune.perfmodel.repeats), in fits and in scores."""

from __future__ import annotations

import pandas as pd
import pytest

from pdtune.perfmodel.defaults import silicon_file, silicon_problems, silicon_repeats
from pdtune.perfmodel.repeats import DIGITS, fold_repeats, measurement_key
from pdtune.results import load_results


def _row(**kw: object) -> dict[str, object]:
    base = {"model": "openai/gpt-oss-120b", "gpu": "h200", "mode": "agg", "topology": "TP2", "precision": "fp4",
            "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "isl": 1024, "osl": 1024, "concurrency": 8,
            "ttft_ms_p50": 70.149400644004, "tpot_ms_p50": 6.245668449937, "backend_version": "0.18.0"}
    return base | kw


def test_two_exports_of_one_run_are_one_measurement() -> None:
    # The silicon file's two exports of one run (2026-03-25.csv and 2026-04-06.csv) differ only in the id and,
    # beyond the twelfth digit, in the printed floats; the copy without a vLLM version is the one folded away.
    rows = pd.DataFrame([
        _row(source_id="a", backend_version=None, ttft_ms_p50=70.14940064400401),
        _row(source_id="b"),
        _row(source_id="c", concurrency=16),  # another workload
        _row(source_id="d", tpot_ms_p50=6.2457),  # another measurement of the same point: both count
    ])
    folded = fold_repeats(rows)
    assert list(folded.rows["source_id"]) == ["b", "c", "d"]  # the input's order kept
    assert folded.folded == 1 and folded.repeats.iloc[0][["source_id", "repeat_of"]].tolist() == ["a", "b"]
    assert folded.repeat_of.tolist() == ["b", None, None, None]
    assert measurement_key(rows.iloc[0]) == measurement_key(rows.iloc[1])
    assert measurement_key(rows.iloc[1]) != measurement_key(rows.iloc[3])


def test_the_digits_that_make_two_rows_one_measurement() -> None:
    # 6 significant digits: 6.24567 and 6.245668 are the same, 6.2457 and 6.24567 are not (6.24570 vs 6.24567).
    assert DIGITS == 6
    same = pd.DataFrame([_row(source_id="x", tpot_ms_p50=6.245671), _row(source_id="y", tpot_ms_p50=6.245668)])
    differ = pd.DataFrame([_row(source_id="x", tpot_ms_p50=6.2457), _row(source_id="y", tpot_ms_p50=6.245668)])
    assert fold_repeats(same).folded == 1 and fold_repeats(differ).folded == 0


def test_folding_an_empty_table() -> None:
    folded = fold_repeats(pd.DataFrame(columns=list(_row())))
    assert folded.folded == 0 and len(folded.rows) == 0


@pytest.fixture(scope="module")
def unfolded() -> dict:
    return silicon_problems(load_results(silicon_file()), fold=False)


def test_the_silicon_sample_repeats_198_of_its_1307_fitted_rows(unfolded: dict) -> None:
    # Counted independently of fold_repeats: rows agreeing on deployment, workload and both medians to 6 digits.
    from pdtune.perfmodel.validation import deployment_key

    total = repeats = 0
    per_pair = {}
    for pair, problem in unfolded.items():
        r = problem.rows
        sig = pd.DataFrame({"k": r.apply(deployment_key, axis=1), "isl": r["isl"], "osl": r["osl"],
                            "c": r["concurrency"], "t": r["ttft_ms_p50"].map(lambda v: f"{v:.6g}"),
                            "p": r["tpot_ms_p50"].map(lambda v: f"{v:.6g}")})
        n = int(sig.duplicated().sum())
        total, repeats = total + len(r), repeats + n
        if n:
            per_pair[pair] = n
    assert (total, repeats) == (1307, 198)
    assert per_pair == {("gpt-oss-120b", "b200"): 18, ("gpt-oss-120b", "h100"): 15, ("gpt-oss-120b", "h200"): 15,
                        ("kimi-k2.5", "b200"): 30, ("minimax-m2.5", "b200"): 87, ("minimax-m2.5", "h200"): 33}
    listed = silicon_repeats(unfolded)
    assert len(listed) == 198
    assert listed.groupby(["model_key", "gpu_name"]).size().to_dict() == per_pair
    folded = silicon_problems(load_results(silicon_file()))
    assert sum(len(p.rows) for p in folded.values()) == 1307 - 198
    # every folded row's twin is kept, with the same deployment and workload
    kept = {i for p in folded.values() for i in p.rows["source_id"]}
    assert set(listed["repeat_of"]) <= kept and not set(listed["source_id"]) & kept
