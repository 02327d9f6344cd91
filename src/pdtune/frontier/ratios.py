"""Worker ratios within a GPU budget, without listing them: the ratios nearest a target, and lattice counts.

``x`` prefill workers of ``g_p`` GPUs and ``y`` decode workers of ``g_d`` GPUs fit a budget of ``B`` GPUs when
``g_p x + g_d y <= B``. Rate matching's per-GPU numbers depend on the ratio ``y / x`` only, so a search over a
budget needs, for a target ratio (where one pool's capacity meets the other's), only the nearest ratios on
either side, and for its counts only how many ``(x, y)`` fall in a band of ratios. Both are answered here in
``O(log B)`` steps of exact integer arithmetic, whatever the budget, instead of listing the ``O(B^2)`` pairs:

* :func:`nearest_ratios` walks the Stern-Brocot tree toward the target. Every positive fraction appears in
  the tree once, in lowest terms, below every fraction with a smaller numerator and denominator that brackets
  it; so the walk's last bracket ``L < target < R`` whose mediant no longer fits the budget holds the best
  fits from below and above (any fraction strictly between two tree neighbours has a numerator and a
  denominator at least those of their mediant, hence costs more GPUs). Runs of steps in one direction are
  taken at once (the continued-fraction terms), so a walk is a few dozen steps.
* :func:`count_pairs` sums ``floor`` of linear functions over ``x`` with the classic floor-sum recursion (a
  Euclid-like reduction of ``sum floor((a i + b) / m)``), splitting the ``x`` range where the binding bound
  changes.

Targets and bounds are exact rationals (a float converts to :class:`fractions.Fraction` without rounding).
"""

from __future__ import annotations

from fractions import Fraction

#: A ratio as the worker counts of its lowest terms: (prefill workers x, decode workers y).
Pair = tuple[int, int]
#: A rational bound or target as (numerator, denominator), denominator > 0, not necessarily in lowest terms
#: (a float's ``as_integer_ratio`` products, used as they come: reducing them would cost a gcd of 100-bit
#: integers per use), or a :class:`~fractions.Fraction`.
Rational = tuple[int, int] | Fraction


def as_pair(value: Rational | int) -> tuple[int, int]:
    """``(numerator, denominator)`` of a rational, denominator positive."""
    if isinstance(value, tuple):
        num, den = value
    elif isinstance(value, Fraction):
        num, den = value.numerator, value.denominator
    else:
        num, den = int(value), 1
    if den <= 0:
        if den == 0:
            raise ValueError("a ratio needs a non-zero denominator")
        num, den = -num, -den
    return num, den


def quotient(a: float, b: float) -> tuple[int, int]:
    """``a / b`` of two positive floats, exactly, as an integer pair."""
    an, ad = float(a).as_integer_ratio()
    bn, bd = float(b).as_integer_ratio()
    return an * bd, ad * bn


def nearest_ratios(target: Rational, gp: int, gd: int, budget: int, *,
                   side: int = 0) -> tuple[Pair | None, Pair | None]:
    """The ratios ``y / x`` (lowest terms, ``x, y >= 1``, ``gp x + gd y <= budget``) nearest ``target``.

    ``side=0``: ``(largest <= target, smallest >= target)``, both the target itself when it fits;
    ``side=-1``: ``(largest < target, smallest >= target)``; ``side=1``: ``(largest <= target,
    smallest > target)``. None where no ratio fits on that side.
    """
    p, q = as_pair(target)
    if gp < 1 or gd < 1 or p <= 0:
        raise ValueError("nearest_ratios needs positive GPU counts and a positive target")
    # Fractions as (numerator y, denominator x); L = 0/1 and R = 1/0 are the tree's bounds (not ratios).
    ly, lx, ry, rx = 0, 1, 1, 0
    while True:
        my, mx = ly + ry, lx + rx
        if gp * mx + gd * my > budget:
            break
        diff = my * q - p * mx  # sign of my/mx - p/q
        if diff == 0:
            if side == 0:
                return (mx, my), (mx, my)
            where = -1 if side > 0 else 1  # the target itself goes to the side asked to include it
        else:
            where = -1 if diff < 0 else 1
        if where < 0:
            # L + kR stays left for k up to a bound; take every such step within the budget at once.
            k = _steps(p * lx - q * ly, q * ry - p * rx, strict=side <= 0)
            room = (budget - gp * lx - gd * ly) // (gp * rx + gd * ry)
            k = max(1, min(k, room))
            ly, lx = ly + k * ry, lx + k * rx
        else:
            k = _steps(q * ry - p * rx, p * lx - q * ly, strict=side >= 0)
            room = (budget - gp * rx - gd * ry) // (gp * lx + gd * ly)
            k = max(1, min(k, room))
            ry, rx = ry + k * ly, rx + k * lx
    below = (lx, ly) if ly >= 1 else None
    above = (rx, ry) if rx >= 1 else None
    return below, above


def _steps(own: int, other: int, *, strict: bool) -> int:
    """Largest ``k`` with ``k * other < own`` (strict) or ``<= own``; unbounded when ``other`` is 0."""
    if other <= 0:
        return 1 << 62
    return (own - 1) // other if strict else own // other


def count_pairs(gp: int, gd: int, budget: int, lo: Rational | None = None, hi: Rational | None = None) -> int:
    """How many ``(x, y)``, ``x, y >= 1``, with ``gp x + gd y <= budget`` and ``lo <= y / x <= hi`` (every pair,
    not only lowest terms; None = no bound)."""
    if gp < 1 or gd < 1:
        raise ValueError("count_pairs needs positive GPU counts")
    x_max = (budget - gd) // gp
    if x_max < 1:
        return 0
    ln, ld = as_pair(lo) if lo is not None else (0, 1)
    if hi is not None:
        hn, hd = as_pair(hi)
        if hn <= 0 or ln * hd > hn * ld:
            return 0
    if ln > 0:
        # x beyond B / (gp + gd lo) has no y: the budget line passes below the lower bound there.
        x_max = min(x_max, budget * ld // (gp * ld + gd * ln))
        if x_max < 1:
            return 0
    # Where each bound binds: y <= hi x up to B / (gp + gd hi), the budget after; y >= 1 up to 1 / lo.
    cuts = {0, x_max}
    if hi is not None:
        cuts.add(min(x_max, budget * hd // (gp * hd + gd * hn)))
    if ln > 0:
        cuts.add(min(x_max, ld // ln))
    edges = sorted(cuts)
    total = 0
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        first, last = start + 1, stop  # x in [first, last]
        if last < first:
            continue
        n = last - first + 1
        twice_mid = first + last
        if hi is not None and twice_mid * (gp * hd + gd * hn) <= 2 * budget * hd:
            upper = _sum_floor(n, first, hn, 0, hd)  # floor(hi x)
        else:
            upper = _sum_floor(n, first, -gp, budget, gd)  # floor((B - gp x) / gd)
        if ln > 0 and twice_mid * ln > 2 * ld:
            lower = -_sum_floor(n, first, -ln, 0, ld)  # ceil(lo x)
        else:
            lower = n  # y >= 1
        total += upper - lower + n
    return total


def _sum_floor(n: int, first: int, a: int, b: int, m: int) -> int:
    """sum of floor((a x + b) / m) for x = first .. first + n - 1 (m > 0)."""
    return floor_sum(n, m, a, a * first + b)


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum of floor((a i + b) / m) for i = 0 .. n - 1, for any integers a, b and m > 0, in O(log) steps.

    Negative ``a`` or ``b`` are first made non-negative (their whole multiples of ``m`` summed directly); then
    with ``a, b < m`` the sum counts lattice points under the line ``(a i + b) / m``, which equals the same sum
    with the roles of the axes swapped (``m`` and ``a`` exchanged), Euclid's step.
    """
    if n <= 0:
        return 0
    if m <= 0:
        raise ValueError("floor_sum needs m > 0")
    total = 0
    if a < 0 or a >= m:
        total += n * (n - 1) // 2 * (a // m)
        a %= m
    if b < 0 or b >= m:
        total += n * (b // m)
        b %= m
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            return total
        n, b = top // m, top % m
        m, a = a, m
