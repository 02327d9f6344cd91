"""Which fitted factors the data moves, and which sit where the pull towards the prior holds them.

A fit (:func:`pdtune.perfmodel.fit.fit_efficiency`) minimises the robust misfit of the rows plus a Gaussian pull
of every factor towards where it starts (:class:`pdtune.perfmodel.fit.Objective`). Near the optimum the misfit's
curvature is the data's information about the factors, ``J^T J`` of the robust residuals' Jacobian ``J``; the
pull adds the prior's, ``P``. Their ratio per factor says who decides it:

* ``data_share = 1 - Var_posterior / Var_prior``, with ``Var_posterior = [(J^T J + P)^-1]_ii`` and
  ``Var_prior = [P^-1]_ii``: the fraction of the prior's uncertainty the rows remove, trade-offs with every other
  factor included (the curvature of the profile likelihood). Near 1 the rows pin the factor; near 0 the value is
  the prior's, whatever the fit's output says;
* ``moved_sigma``: how far the fit moved it from the prior, in the prior's sigmas;
* a factor the fit does not pull (its ``unpulled``) has no prior to compare with: ``set_by`` says ``rows`` and
  its share and move are empty;
* ``unpulled``: where the rows alone (no pull, bounds only) would put it, and ``unpulled_cost_drop``, how much of
  the robust misfit that removes (a fraction of the fitted misfit): a large move that buys almost nothing is a
  direction the rows cannot see.

:func:`factor_sensitivity` computes the table for one set of problems; ``data/perfmodel/fit_defaults.py`` writes
it for each architecture's defaults (``data/perfmodel/prior_sensitivity.csv``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.fit import FIT_SCALE, FIT_FACTORS, Objective, Problem, compile_problems, objective

#: A factor is said to be set by the data when the rows remove at least this share of the prior's variance.
DATA_SHARE = 0.5


def _jacobian(goal: Objective, x: np.ndarray) -> np.ndarray:
    """Forward differences of the robust data residuals, stepping inwards at a bound."""
    base = goal.data(x)
    out = np.empty((len(base), len(x)))
    for i, name in enumerate(goal.names):
        h = 1e-3 * FIT_SCALE[name]
        step = h if x[i] + h <= goal.hi[i] else -h
        moved = x.copy()
        moved[i] += step
        out[:, i] = (goal.data(moved) - base) / step
    return out


def _prior_jacobian(goal: Objective) -> np.ndarray:
    n = len(goal.names)
    out = np.zeros((n, n))
    for i in range(n):
        if goal.free[i]:
            out[i, i] = goal.weight / goal.sigma[i]
    for i, j in goal.tied:
        out[i, i] = goal.weight / goal.sigma[i]
        out[i, j] = -goal.weight / goal.sigma[i]
    return out


def factor_sensitivity(
    problems: Sequence[Problem], fitted: Efficiency, prior: Efficiency, factors: Sequence[str] | None = None,
    unpulled: frozenset[str] = frozenset(),
) -> pd.DataFrame:
    """One row per fitted factor: the prior, the fit, the data's share of what decides it, the rows' own pick.

    ``fitted`` is a fit of ``problems`` started from ``prior`` (its ``arrival_clustering`` is kept fixed here)."""
    compiled = compile_problems(problems, fitted.arrival_clustering)
    if compiled.matrix is None:
        raise ValueError("no row could be planned")
    start = replace(prior, arrival_clustering=fitted.arrival_clustering)
    goal = objective(compiled.matrix, start, FIT_FACTORS if factors is None else factors, len(problems), unpulled)
    x = np.array([_get(fitted, n) for n in goal.names])
    # In units of each factor's sigma: the ratio of variances is the same, and the matrices are no longer spread
    # over fourteen decades (a fraction beside a tenth of a microsecond), which the pseudo-inverses need.
    jd = _jacobian(goal, x) * goal.sigma
    jp = _prior_jacobian(goal) * goal.sigma
    p = jp.T @ jp
    post = np.linalg.pinv(jd.T @ jd + p)
    prior_var = np.diag(np.linalg.pinv(p))
    pulled = prior_var > 0  # an unpulled factor has no prior variance to compare with
    share = np.full(len(goal.names), np.nan)
    share[pulled] = 1 - np.diag(post)[pulled] / prior_var[pulled]
    fitted_cost = 0.5 * float(goal.data(x) @ goal.data(x))
    from scipy.optimize import least_squares  # an import of 0.6 s that only this analysis needs

    alone = least_squares(goal.data, x, bounds=(goal.lo, goal.hi), loss="linear",
                          x_scale=np.array([FIT_SCALE[n] for n in goal.names]), max_nfev=400)
    rows = []
    for i, name in enumerate(goal.names):
        centre = goal.x0[i]
        tied_to = next((j for k, j in goal.tied if k == i), None)
        if tied_to is not None:
            centre = x[tied_to]
        rows.append({
            "factor": name,
            "prior": float(goal.x0[i]) if tied_to is None and pulled[i] else float("nan"),
            "prior_sigma": float(goal.sigma[i]) if pulled[i] else float("nan"),
            "fitted": float(x[i]),
            "moved_sigma": float((x[i] - centre) / goal.sigma[i]) if pulled[i] else float("nan"),
            "data_share": float(np.clip(share[i], 0.0, 1.0)) if pulled[i] else float("nan"),
            "set_by": ("data" if share[i] >= DATA_SHARE else "prior") if pulled[i] else "rows",
            "unpulled": float(alone.x[i]),
            "unpulled_cost_drop": float((fitted_cost - alone.cost) / fitted_cost) if fitted_cost > 0 else 0.0,
            "tied_to": goal.names[tied_to] if tied_to is not None else "",
        })
    return pd.DataFrame(rows)


def _get(eff: Efficiency, name: str) -> float:
    from pdtune.perfmodel.fit import factor_value

    return factor_value(eff, name)
