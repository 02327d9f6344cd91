"""A measurement repeated under another id counts once (pdtune.perfmodel.repeats), in fits and in scores."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.perfmodel.defaults import silicon_file, silicon_problems, silicon_repeats
from pdtune.perfmodel.repeats import (DIGITS, ROUNDED, ROUNDED_OTHER_LAYOUT, SAME_DIGITS, decimals,
                                      fold_repeats, measurement_key)
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
        _row(source_id="d", tpot_ms_p50=6.2461),  # another measurement of the same point: both count
    ])
    folded = fold_repeats(rows)
    assert list(folded.rows["source_id"]) == ["b", "c", "d"]  # the input's order kept
    assert folded.folded == 1 and folded.repeats.iloc[0][["source_id", "repeat_of"]].tolist() == ["a", "b"]
    assert folded.repeat_of.tolist() == ["b", None, None, None]
    assert measurement_key(rows.iloc[0]) == measurement_key(rows.iloc[1])
    assert measurement_key(rows.iloc[1]) != measurement_key(rows.iloc[3])


def test_the_digits_that_make_two_rows_one_measurement() -> None:
    # 6 significant digits: 6.24567 and 6.245668 are the same. A row printing four decimals (70.1494, 6.2457) that
    # the other rounds to is a rounded copy, also one measurement. 6.2461 is another run (6.245668 does not round
    # to it).
    assert DIGITS == 6
    same = pd.DataFrame([_row(source_id="x", tpot_ms_p50=6.245671), _row(source_id="y", tpot_ms_p50=6.245668)])
    copy = pd.DataFrame([_row(source_id="x", ttft_ms_p50=70.1494, tpot_ms_p50=6.2457),
                         _row(source_id="y", tpot_ms_p50=6.245668)])
    differ = pd.DataFrame([_row(source_id="x", tpot_ms_p50=6.2461), _row(source_id="y", tpot_ms_p50=6.245668)])
    assert fold_repeats(same).repeats["kind"].tolist() == [SAME_DIGITS]
    assert fold_repeats(copy).repeats[["source_id", "kind"]].values.tolist() == [["x", ROUNDED]]
    assert fold_repeats(differ).folded == 0


def test_folding_an_empty_table() -> None:
    folded = fold_repeats(pd.DataFrame(columns=list(_row())))
    assert folded.folded == 0 and len(folded.rows) == 0


def test_a_rounded_copy_is_the_same_measurement_and_the_original_is_kept() -> None:
    # kimi-k2.5-gap-analysis.csv prints the database dump's medians to two decimals: 169.94 for 169.940709, 8.36
    # for 8.36143. The copy comes first in the table and is still the one folded: the original prints more digits.
    rows = pd.DataFrame([
        _row(source_id="copy", ttft_ms_p50=169.94, tpot_ms_p50=8.36),
        _row(source_id="orig", ttft_ms_p50=169.940709, tpot_ms_p50=8.36143),
        _row(source_id="other-run", ttft_ms_p50=169.95, tpot_ms_p50=8.36),  # 169.940709 rounds to 169.94
    ])
    folded = fold_repeats(rows)
    assert list(folded.rows["source_id"]) == ["orig", "other-run"]
    assert folded.repeats[["source_id", "repeat_of", "kind"]].values.tolist() == [["copy", "orig", ROUNDED]]


def test_a_rounded_copy_under_another_layout_label_counts_once_under_the_originals() -> None:
    # One run cannot be measured on two layouts: the copy's TEP4 label loses to the original's TP4DP4+EP.
    rows = pd.DataFrame([
        _row(source_id="copy", topology="TEP4", ttft_ms_p50=169.94, tpot_ms_p50=8.36),
        _row(source_id="orig", topology="TP4DP4+EP", ttft_ms_p50=169.940709, tpot_ms_p50=8.36143),
        _row(source_id="other-precision", topology="TEP4", gemm_quant_mode="fp8", ttft_ms_p50=169.94,
             tpot_ms_p50=8.36),  # not the same deployment family: a measurement of its own
    ])
    folded = fold_repeats(rows)
    assert list(folded.rows["source_id"]) == ["orig", "other-precision"]
    assert folded.repeats[["source_id", "repeat_of", "kind"]].values.tolist() == [
        ["copy", "orig", ROUNDED_OTHER_LAYOUT]]


def test_too_few_printed_digits_do_not_make_a_copy() -> None:
    # 8.4 ms prints two significant digits (ROUNDED_MIN_DIGITS is 3): many runs round to it, so it matches none.
    assert decimals(169.94) == 2 and decimals(8.36143) == 5 and decimals(170.0) == 0 and decimals(1e-05) == 5
    rows = pd.DataFrame([_row(source_id="a", ttft_ms_p50=169.9, tpot_ms_p50=8.4),
                         _row(source_id="b", ttft_ms_p50=169.940709, tpot_ms_p50=8.36143)])
    assert fold_repeats(rows).folded == 0


@pytest.fixture(scope="module")
def unfolded() -> dict:
    return silicon_problems(load_results(silicon_file()), fold=False)


def _rounded_copies_by_hand(rows: pd.DataFrame) -> int:
    """Rows printing both medians to two decimals that a full-precision row of the same model, GPU, precision and
    workload rounds to (any layout): counted without pdtune.perfmodel.repeats."""
    keys = ["model", "gpu", "precision", "gemm_quant_mode", "moe_quant_mode", "isl", "osl", "concurrency"]
    two = rows["ttft_ms_p50"].map(lambda v: repr(v).split(".")[-1]).str.len().le(2) & rows[
        "tpot_ms_p50"].map(lambda v: repr(v).split(".")[-1]).str.len().le(2)
    fine = rows[~two].assign(t=lambda f: f["ttft_ms_p50"].round(2), p=lambda f: f["tpot_ms_p50"].round(2))
    coarse = rows[two].assign(t=lambda f: f["ttft_ms_p50"].round(2), p=lambda f: f["tpot_ms_p50"].round(2))
    return len(coarse.merge(fine[[*keys, "t", "p"]].drop_duplicates(), on=[*keys, "t", "p"]))


def test_the_silicon_sample_repeats_245_of_its_1307_fitted_rows(unfolded: dict) -> None:
    # Counted independently of fold_repeats: rows agreeing on deployment, workload and both medians to 6 digits
    # (198), and Kimi-K2.5's rounded copies (47: 32 under their original's layout, 15 under another).
    from pdtune.perfmodel.validation import deployment_key

    total = repeats = copies = 0
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
        copies += _rounded_copies_by_hand(r[~sig.duplicated().to_numpy()])
    assert (total, repeats, copies) == (1307, 198, 47)
    assert per_pair == {("gpt-oss-120b", "b200"): 18, ("gpt-oss-120b", "h100"): 15, ("gpt-oss-120b", "h200"): 15,
                        ("kimi-k2.5", "b200"): 30, ("minimax-m2.5", "b200"): 87, ("minimax-m2.5", "h200"): 33}
    listed = silicon_repeats(unfolded)
    assert len(listed) == 245
    same = listed[listed["kind"] == SAME_DIGITS]
    assert same.groupby(["model_key", "gpu_name"]).size().to_dict() == per_pair
    assert listed.groupby(["model_key", "gpu_name", "kind"]).size().to_dict() == {
        **{(m, g, SAME_DIGITS): n for (m, g), n in per_pair.items()},
        ("kimi-k2.5", "b200", ROUNDED): 17, ("kimi-k2.5", "b200", ROUNDED_OTHER_LAYOUT): 15,
        ("kimi-k2.5", "h200", ROUNDED): 15}
    assert set(listed.loc[listed["kind"] == ROUNDED_OTHER_LAYOUT, "deployment"].str.split(" | ", regex=False).str[3]) == {
        "TEP4"}
    folded = silicon_problems(load_results(silicon_file()))
    assert sum(len(p.rows) for p in folded.values()) == 1307 - 245
    # every folded row's twin is kept
    kept = {i for p in folded.values() for i in p.rows["source_id"]}
    assert set(listed["repeat_of"]) <= kept and not set(listed["source_id"]) & kept


@settings(max_examples=60, deadline=None)
# The TTFT's two-decimal print must not end in 0: a float drops trailing zeros, so "20.50" and "1.00" would read
# as one decimal, and 1.0 keeps too few digits to match anything (ROUNDED_MIN_DIGITS), by design.
@given(st.lists(st.tuples(st.floats(20.0, 90_000.0).filter(lambda v: decimals(v) >= 5 and f"{v:.2f}"[-1] != "0"),
                          st.floats(1.0, 900.0).filter(lambda v: decimals(v) >= 5), st.booleans(), st.booleans()),
                min_size=1, max_size=8))
def test_every_rounded_copy_folds_onto_its_original(runs: list[tuple[float, float, bool, bool]]) -> None:
    """Originals at full precision (five decimals or more, as measured floats print), and for some of them a copy printed to two decimals (under another layout
    label when drawn so), in any order: the fold keeps exactly the originals and points each copy at its own."""
    rows, expected = [], {}
    for c, (ttft, tpot, copied, relabel) in enumerate(runs, start=1):
        rows.append(_row(source_id=f"orig{c}", concurrency=c, ttft_ms_p50=ttft, tpot_ms_p50=tpot))
        if copied:
            rows.insert(0, _row(source_id=f"copy{c}", concurrency=c, topology="TEP4" if relabel else "TP2",
                                ttft_ms_p50=float(f"{ttft:.2f}"), tpot_ms_p50=float(f"{tpot:.2f}")))
            expected[f"copy{c}"] = f"orig{c}"
    folded = fold_repeats(pd.DataFrame(rows))
    assert sorted(folded.rows["source_id"]) == sorted(f"orig{c}" for c in range(1, len(runs) + 1))
    assert dict(zip(folded.repeats["source_id"], folded.repeats["repeat_of"], strict=True)) == expected


def test_a_row_without_medians_is_never_a_copy() -> None:
    # A results file may leave TTFT out (None or NaN): such a row is its own measurement, and the fold does not fail.
    rows = pd.DataFrame([_row(source_id="a", ttft_ms_p50=None, tpot_ms_p50=8.36),
                         _row(source_id="b", ttft_ms_p50=float("nan"), tpot_ms_p50=8.36143),
                         _row(source_id="c", ttft_ms_p50=169.940709, tpot_ms_p50=8.36143)])
    assert fold_repeats(rows).folded == 0
