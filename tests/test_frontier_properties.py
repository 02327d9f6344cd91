"""Property tests of pdtune.frontier (hypothesis): the frontier's defining properties on any input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.errors import InputError
from pdtune.frontier import (
    best_per_concurrency,
    envelope_at,
    frontier,
    pareto_frontier,
    sla_pick,
    upper_envelope,
)

# Values from a small grid make ties and exact duplicates common; wide floats cover the rest.
value = st.one_of(st.integers(0, 4).map(float),
                  st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False))
points = st.lists(st.tuples(value, value), min_size=0, max_size=60)

# No per-example deadline: a busy CI machine must not turn a correct property into a failure.
array_level = settings(deadline=None)
frame_level = settings(deadline=None, max_examples=50)  # pandas makes each example ~10 ms


def xy(pts: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    arr = np.array(pts, dtype=np.float64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def dominates(ax: float, ay: float, bx: float, by: float) -> bool:
    return ax >= bx and ay >= by and (ax > bx or ay > by)


@array_level
@given(points)
def test_every_frontier_point_is_non_dominated(pts):
    x, y = xy(pts)
    for i in pareto_frontier(x, y):
        assert not any(dominates(x[j], y[j], x[i], y[i]) for j in range(len(x)))


@array_level
@given(points)
def test_every_point_is_dominated_by_or_equal_to_a_frontier_point(pts):
    x, y = xy(pts)
    front = pareto_frontier(x, y)
    for j in range(len(x)):
        assert any((x[i] == x[j] and y[i] == y[j]) or dominates(x[i], y[i], x[j], y[j]) for i in front)


@array_level
@given(points)
def test_frontier_is_sorted_without_duplicates_and_keeps_the_lowest_index(pts):
    x, y = xy(pts)
    front = pareto_frontier(x, y)
    fx, fy = x[front], y[front]
    assert np.all(np.diff(fx) > 0) and np.all(np.diff(fy) < 0)
    for i in front:
        assert not any(x[j] == x[i] and y[j] == y[i] for j in range(i))


@array_level
@given(points, st.randoms(use_true_random=False))
def test_frontier_does_not_depend_on_input_order(pts, rnd):
    x, y = xy(pts)
    perm = np.array(rnd.sample(range(len(x)), len(x)), dtype=np.intp)
    a = pareto_frontier(x, y)
    b = pareto_frontier(x[perm], y[perm])
    assert np.array_equal(x[a], x[perm][b]) and np.array_equal(y[a], y[perm][b])


@array_level
@given(points)
def test_duplicating_every_point_changes_nothing(pts):
    x, y = xy(pts)
    assert np.array_equal(pareto_frontier(np.r_[x, x], np.r_[y, y]), pareto_frontier(x, y))


@array_level
@given(points, st.integers(0, 59), st.sampled_from([np.nan, np.inf, -np.inf]), st.booleans())
def test_nan_and_inf_are_rejected(pts, where, bad, on_x):
    x, y = xy(pts + [(1.0, 1.0)])
    target = x if on_x else y
    target[where % len(target)] = bad
    with pytest.raises(InputError):
        pareto_frontier(x, y)
    df = pd.DataFrame({"tps_per_user": x, "tps_per_gpu": y, "path": "p.json"})
    with pytest.raises(InputError) as err:
        frontier(df)
    assert err.value.source == "p.json"


# ---------------------------------------------------------------------------------- DataFrame level

DEPLOYMENTS = ["1xTEP8 : 1xTEP8", "3xTP2DP4+EP : 1xTEP8", "1xTP4DP2+EP : 1xTP4DP4+EP"]
GPUS = {DEPLOYMENTS[0]: 16, DEPLOYMENTS[1]: 32, DEPLOYMENTS[2]: 24}

rows = st.lists(st.tuples(st.sampled_from(DEPLOYMENTS), st.integers(0, 3).map(float), st.integers(0, 3).map(float)),
                min_size=1, max_size=40)


def sweep_frame(rs: list[tuple[str, float, float]]) -> pd.DataFrame:
    # concurrency = row number, so the tie-break columns tell every row apart
    return pd.DataFrame({
        "deployment": [d for d, _, _ in rs], "gpus_total": [GPUS[d] for d, _, _ in rs],
        "concurrency": np.arange(1, len(rs) + 1), "tps_per_user": [u for _, u, _ in rs],
        "tps_per_gpu": [g for _, _, g in rs], "isl": 8192, "osl": 1024, "path": "sweep.json",
    })


@frame_level
@given(rows, st.randoms(use_true_random=False))
def test_frame_frontier_and_envelope_do_not_depend_on_row_order(rs, rnd):
    df = sweep_frame(rs)
    shuffled = df.iloc[rnd.sample(range(len(df)), len(df))]
    pd.testing.assert_frame_equal(frontier(df), frontier(shuffled))
    pd.testing.assert_frame_equal(upper_envelope(df).reset_index(drop=True),
                                  upper_envelope(shuffled).reset_index(drop=True))


@frame_level
@given(rows)
def test_exact_ties_keep_the_smallest_deployment(rs):
    df = sweep_frame(rs)
    env = upper_envelope(df)
    for _, point in env.iterrows():
        twins = df[(df.tps_per_user == point.tps_per_user) & (df.tps_per_gpu == point.tps_per_gpu)]
        assert point.gpus_total == twins.gpus_total.min()
        assert point.concurrency == twins[twins.gpus_total == point.gpus_total].concurrency.min()


@frame_level
@given(rows)
def test_envelope_of_one_deployment_is_its_own_frontier(rs):
    df = sweep_frame([(DEPLOYMENTS[0], u, g) for _, u, g in rs])
    env = upper_envelope(df)
    front = frontier(df)
    assert env.index.tolist() == front.index.tolist()
    pd.testing.assert_frame_equal(env[front.columns], front)


@frame_level
@given(rows)
def test_envelope_is_the_frontier_of_the_per_deployment_frontiers(rs):
    df = sweep_frame(rs)
    per_deployment = pd.concat([frontier(g) for _, g in df.groupby("deployment")])
    assert sorted(upper_envelope(df).index) == sorted(upper_envelope(per_deployment).index)


@frame_level
@given(rows, st.lists(st.integers(-1, 5).map(float), min_size=1, max_size=8))
def test_envelope_at_is_the_best_reachable_throughput(rs, queries):
    df = sweep_frame(rs)
    got = envelope_at(upper_envelope(df), queries)
    for q, answer in zip(queries, got):
        reachable = df.tps_per_gpu[df.tps_per_user >= q]
        assert (np.isnan(answer) and reachable.empty) or answer == reachable.max()


@frame_level
@given(rows, st.integers(-1, 5).map(float), st.booleans())
def test_sla_pick_is_the_best_point_meeting_the_floor(rs, floor, per_user):
    df = sweep_frame(rs)
    floor_col, objective = ("tps_per_user", "tps_per_gpu") if per_user else ("tps_per_gpu", "tps_per_user")
    pick = sla_pick(df, **{f"min_{floor_col}": floor})
    meeting = df[df[floor_col] >= floor]
    assert pick.met == (not meeting.empty)
    assert pick.candidates == len(meeting)
    if pick.met:
        assert getattr(pick, objective) == meeting[objective].max()
        assert getattr(pick, floor_col) >= floor


@frame_level
@given(st.lists(st.tuples(st.sampled_from(["TP4DP2+EP", "TP2DP4+EP", "TP16+EP"]), st.sampled_from([1, 8, 64]),
                          st.integers(1, 5).map(float)), min_size=1, max_size=30))
def test_best_per_concurrency_is_the_maximum_per_concurrency(rs):
    df = pd.DataFrame({"topology": [t for t, _, _ in rs], "concurrency": [c for _, c, _ in rs],
                       "tps_per_gpu": [v for _, _, v in rs], "gpus_total": 8, "mode": "prefill"})
    best = best_per_concurrency(df)
    assert best.concurrency.tolist() == sorted(df.concurrency.unique())
    for _, row in best.iterrows():
        at = df[df.concurrency == row.concurrency]
        assert row.tps_per_gpu == at.tps_per_gpu.max()
        assert row.deployment == min(at[at.tps_per_gpu == row.tps_per_gpu].topology)
