"""Pareto frontiers of serving sweeps, the envelope across deployments, xPyD rate matching, the SLA pick.

Every point of a sweep is one deployment at one concurrency, scored on two axes that both want to be
large: tokens/s per GPU (what the GPUs cost) and tokens/s per user (how interactive it feels). A point is
*dominated* when another point is at least as good on both axes and better on one; the *frontier* is what
is left.

Across deployments the frontier of the union is the *upper envelope*. Each of its points is reachable only
by the deployment that measured it, at the concurrency it was measured at, so the envelope is a staircase
of labelled points, never a line drawn between two deployments.

One idea per module, all re-exported here (``from pdtune.frontier import rate_match``):

* :mod:`.pareto` — the 2-D frontier and its tie rule;
* :mod:`.labels` — deployment labels (``3xTP2DP4+EP : 1xTEP8+MTP``);
* :mod:`.envelope` — the upper envelope, read as a staircase, and the best deployment per concurrency;
* :mod:`.xpyd` — rate matching of isolated sweeps into xPyD predictions, with the KV-room check;
* :mod:`.ratios` — worker ratios within a GPU budget without listing them: the nearest to a target, counts;
* :mod:`.picks` — the SLA pick and its reverse;
* :mod:`.gate` — the accuracy gate.

Conventions used throughout (chapters 5-7 rely on them):

* Rows follow the tidy results schema of ``design.md``; ``tps_per_gpu`` is total tokens/s over all GPUs,
  ``tps_per_user`` is ``1000 / tpot_ms_p50``.
* Rows are labelled by :func:`deployment_label`, unless the frame already carries a complete
  ``deployment`` column (rate-matched frames do), which is then used as is.
* Exactly equal points: the frontier keeps one, the row with the fewest GPUs, then the smallest
  deployment label, concurrency, source and path, so the answer does not depend on row order.
* NaN or infinite values on an axis are bad input: :class:`~pdtune.errors.InputError` naming the row's file.
* Accuracy is a fraction in [0, 1] (GSM8K 95 % is ``0.95``).
"""

from pdtune.frontier.envelope import best_per_concurrency, envelope_at, envelope_steps, upper_envelope, winner_runs
from pdtune.frontier.gate import GateResult, accuracy_gate
from pdtune.frontier.labels import deployment_label, with_deployment
from pdtune.frontier.pareto import X_AXIS, Y_AXIS, frontier, frontier_matches_brute_force, pareto_frontier
from pdtune.frontier.picks import SlaPick, reverse_sla, sla, sla_pick
from pdtune.frontier.xpyd import RATE_MATCH_COLUMNS, ROOM_COLUMNS, predicted_vs_measured, rate_match

__all__ = [
    "RATE_MATCH_COLUMNS",
    "ROOM_COLUMNS",
    "X_AXIS",
    "Y_AXIS",
    "GateResult",
    "SlaPick",
    "accuracy_gate",
    "best_per_concurrency",
    "deployment_label",
    "envelope_at",
    "envelope_steps",
    "frontier",
    "frontier_matches_brute_force",
    "pareto_frontier",
    "predicted_vs_measured",
    "rate_match",
    "reverse_sla",
    "sla",
    "sla_pick",
    "upper_envelope",
    "winner_runs",
    "with_deployment",
]
