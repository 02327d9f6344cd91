"""Which factors the rows decide (pdtune.perfmodel.sensitivity): the data's share of the prior's uncertainty."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pdtune.perfmodel.defaults import silicon_file, silicon_problems
from pdtune.perfmodel.fit import _residuals, compile_problems, objective
from pdtune.perfmodel.prior import PRIOR
from pdtune.perfmodel.sensitivity import factor_sensitivity
from pdtune.results import load_results


@pytest.fixture(scope="module")
def dense() -> list:
    """Llama-3.1-70B on H100: 45 rows of a dense model, so no routed expert's factor enters any prediction."""
    return [silicon_problems(load_results(silicon_file()))[("llama-3.1-70b", "h100")]]


def test_a_factor_no_row_depends_on_is_the_priors(dense: list) -> None:
    point = replace(PRIOR, arrival_clustering=0.15)
    table = factor_sensitivity(dense, point, PRIOR).set_index("factor")
    assert ((table["data_share"] >= 0) & (table["data_share"] <= 1)).all()
    # J's column of an expert factor is zero for a dense model: the rows remove none of the prior's variance.
    for name in ("expert_compute", "expert_hbm", "expert_overhead_s"):
        assert table.loc[name, "data_share"] == pytest.approx(0.0, abs=1e-9), name
        assert table.loc[name, "set_by"] == "prior"
    # At the prior itself nothing has moved, and some factor the dense rows do depend on is informed by them.
    assert (table["moved_sigma"].abs() < 1e-12).all()
    assert table["data_share"].max() > 0.05


def test_an_unpulled_factor_is_set_by_the_rows_with_no_share(dense: list) -> None:
    from pdtune.perfmodel.prior import HAND_SET as UNSOURCED

    point = replace(PRIOR, arrival_clustering=0.15)
    table = factor_sensitivity(dense, point, PRIOR, unpulled=UNSOURCED).set_index("factor")
    for name in UNSOURCED:
        assert table.loc[name, "set_by"] == "rows" and math.isnan(table.loc[name, "data_share"]), name
    pulled = table.drop(index=list(UNSOURCED))
    assert pulled["data_share"].notna().all() and set(pulled["set_by"]) <= {"data", "prior"}


def test_the_pull_is_gaussian_and_the_loss_robust_on_the_data_only(dense: list) -> None:
    # Objective.data: soft-L1 of each log-ratio r as a residual whose square is 2 f^2 (sqrt(1 + (r/f)^2) - 1);
    # Objective.prior: (x - x0) / sigma x weight, squared as it is (a one-sigma move costs weight^2 / 2).
    import numpy as np

    compiled = compile_problems(dense, 0.15)
    goal = objective(compiled.matrix, replace(PRIOR, arrival_clustering=0.15), ("compute", "hbm"), 1)
    x = goal.x0.copy()
    r = _residuals(compiled.matrix, goal.make(x))
    f = goal.f_scale
    assert goal.data(x) ** 2 == pytest.approx(2 * f * f * (np.sqrt(1 + (r / f) ** 2) - 1))
    moved = x + goal.sigma  # one sigma on each
    assert goal.prior(moved) == pytest.approx([goal.weight, goal.weight])
