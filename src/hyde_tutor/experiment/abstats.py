"""Statistics of an A/B report, as free functions over counts (``math`` and the standard library only).

Turns of one learner are not independent (one learner rates generously, asks vague questions, ...), so the
per-arm intervals are clustered by learner:

* a proportion (👍 rate, grounded rate, ...) is the ratio ``Σ successes / Σ turns`` over learners; its
  learner-clustered variance (the ratio estimator's, with a ``k / (k - 1)`` small-sample factor) gives a design
  effect ``deff = clustered variance / binomial variance`` (never below 1), and the interval is
  :func:`wilson`'s on the effective sample size ``n / deff`` (:func:`clustered_proportion`);
* a mean (the judge's score) gets ``mean ± z · clustered standard error`` (:func:`clustered_mean`);
* the hyde − raw difference of two proportions is Newcombe's hybrid score interval built from those two
  clustered Wilson intervals (:func:`newcombe_difference`); of two means, ``d ± z · √(se₁² + se₂²)``.

All intervals are analytic and deterministic (no resampling), so a report read twice says the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ("Estimate", "wilson", "ratio_variance", "clustered_proportion", "clustered_mean", "newcombe_difference",
           "mean_difference", "chi2_sf", "srm_check", "required_total", "Z95")

Z95 = NormalDist().inv_cdf(0.975)
"""The two-sided 95 % normal quantile, 1.959964…"""


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point estimate with its 95 % interval (``low``/``high`` ``None``: too little data for one)."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    """Turns the estimate is over (the denominator)."""
    learners: int
    """Learners those turns came from (the clusters)."""
    deff: float = 1.0
    """Design effect of clustering by learner (1: turns behave as independent)."""

    def as_dict(self) -> dict[str, float | int | None]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "learners": self.learners,
                "deff": round(self.deff, 4)}


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float, float]:
    """Wilson score interval of ``successes / n`` (both may be fractional: an effective sample).

    Returns:
        ``(p, low, high)``.
    """
    if n <= 0:
        raise ValueError(f"a proportion needs n > 0, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes} of {n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def ratio_variance(sums: Sequence[float], sizes: Sequence[int], ratio: float) -> float:
    """Learner-clustered variance of ``Σ sums / Σ sizes`` (ratio estimator, ``k / (k - 1)`` factor)."""
    k, total = len(sizes), float(sum(sizes))
    residuals = sum((s - ratio * m) ** 2 for s, m in zip(sums, sizes, strict=True))
    return k / (k - 1) * residuals / (total * total)


def clustered_proportion(successes: Sequence[int], trials: Sequence[int], z: float = Z95) -> Estimate:
    """A proportion over learners' turns with a Wilson interval on the learner-clustered effective sample.

    Args:
        successes: per learner, the turns that count as a success.
        trials: per learner, the turns in the denominator (learners with none are left out).
    """
    pairs = [(s, t) for s, t in zip(successes, trials, strict=True) if t > 0]
    n = sum(t for _, t in pairs)
    if n == 0:
        return Estimate(None, None, None, 0, 0)
    hits = sum(s for s, _ in pairs)
    p = hits / n
    deff = 1.0
    if len(pairs) >= 2 and 0 < p < 1:
        clustered = ratio_variance([s for s, _ in pairs], [t for _, t in pairs], p)
        deff = max(1.0, clustered / (p * (1 - p) / n))
    n_eff = n / deff
    _, low, high = wilson(p * n_eff, n_eff, z)
    return Estimate(p, low, high, n, len(pairs), deff)


def clustered_mean(values_by_learner: Sequence[Sequence[float]], z: float = Z95,
                   bounds: tuple[float, float] | None = None) -> tuple[Estimate, float | None]:
    """Mean of per-turn values with a learner-clustered normal interval (clipped to ``bounds``).

    Returns:
        The estimate and its standard error (``None`` with fewer than 2 learners: no interval).
    """
    groups = [list(v) for v in values_by_learner if len(v)]
    n = sum(len(g) for g in groups)
    if n == 0:
        return Estimate(None, None, None, 0, 0), None
    mean = sum(sum(g) for g in groups) / n
    if len(groups) < 2:
        return Estimate(mean, None, None, n, len(groups)), None
    se = math.sqrt(ratio_variance([sum(g) for g in groups], [len(g) for g in groups], mean))
    low, high = mean - z * se, mean + z * se
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return Estimate(mean, low, high, n, len(groups)), se


def newcombe_difference(a: Estimate, b: Estimate) -> tuple[float, float, float] | None:
    """``a - b`` of two proportions with Newcombe's hybrid score interval (method 10), from each one's
    Wilson interval; ``None`` when either has no interval."""
    if None in (a.value, a.low, a.high, b.value, b.low, b.high):
        return None
    p1, l1, u1 = a.value, a.low, a.high
    p2, l2, u2 = b.value, b.low, b.high
    d = p1 - p2  # type: ignore[operator]
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)  # type: ignore[operator]
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)  # type: ignore[operator]
    return d, low, high


def mean_difference(a: float, se_a: float | None, b: float, se_b: float | None,
                    z: float = Z95) -> tuple[float, float | None, float | None]:
    """``a - b`` with a normal interval from the two standard errors (``None`` bounds when one is missing)."""
    d = a - b
    if se_a is None or se_b is None:
        return d, None, None
    half = z * math.sqrt(se_a ** 2 + se_b ** 2)
    return d, d - half, d + half


def _upper_gamma_regularized(a: float, x: float) -> float:
    """``Q(a, x) = Γ(a, x) / Γ(a)``: a series below ``x = a + 1``, a continued fraction (Lentz) above."""
    if x <= 0:
        return 1.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        denom = a
        for _ in range(10_000):
            denom += 1
            term *= x / denom
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def chi2_sf(statistic: float, df: int) -> float:
    """P(χ²_df ≥ ``statistic``): ``erfc(√(x/2))`` for one degree of freedom, the regularized upper gamma
    function ``Q(df/2, x/2)`` otherwise."""
    if df < 1:
        raise ValueError(f"χ² needs df >= 1, got {df}")
    if statistic <= 0:
        return 1.0
    if df == 1:
        return math.erfc(math.sqrt(statistic / 2))
    return _upper_gamma_regularized(df / 2, statistic / 2)


SRM_ALPHA = 0.001


def srm_check(observed: Mapping[str, int], shares: Mapping[str, float], alpha: float = SRM_ALPHA) -> dict[str, object]:
    """Sample-ratio-mismatch check: χ² goodness of fit of the learners enrolled per arm against the shares the
    split was configured with.

    Args:
        observed: learners per arm.
        shares: the configured share of each arm (summing to 1); an arm absent here is expected to get none.
        alpha: below this p-value the split is called broken (0.001, the usual SRM threshold).

    Returns:
        ``{"observed", "expected", "chi2", "df", "p_value", "mismatch"}`` (``p_value`` ``None`` with no learners).
    """
    arms = sorted(set(observed) | {a for a, s in shares.items() if s > 0})
    total = sum(observed.get(a, 0) for a in arms)
    expected = {a: total * shares.get(a, 0.0) for a in arms}
    out: dict[str, object] = {"observed": {a: observed.get(a, 0) for a in arms},
                              "expected": {a: round(e, 2) for a, e in expected.items()}, "alpha": alpha}
    if total == 0 or len(arms) < 2:
        return out | {"chi2": None, "df": None, "p_value": None, "mismatch": False}
    if any(expected[a] == 0 and observed.get(a, 0) > 0 for a in arms):  # learners in an arm that gets no one
        return out | {"chi2": None, "df": len(arms) - 1, "p_value": 0.0, "mismatch": True}  # χ² infinite
    stat = sum((observed.get(a, 0) - expected[a]) ** 2 / expected[a] for a in arms if expected[a] > 0)
    df = sum(1 for a in arms if expected[a] > 0) - 1
    p = chi2_sf(stat, df) if df >= 1 else 1.0
    return out | {"chi2": stat, "df": df, "p_value": p, "mismatch": p < alpha}


def required_total(p_base: float, delta: float, share: float = 0.5, alpha: float = 0.05, power: float = 0.8) -> float:
    """Subjects needed in all (both arms together) for a two-sided two-proportion z-test to detect ``delta``.

    The classic formula with unequal allocation: the treated arm gets ``share`` of the subjects,
    ``p₁ = p_base`` (the control arm), ``p₂ = p_base + delta`` (or ``- delta`` past 1),
    ``N = (z_{α/2} √(p̄q̄ (1/s + 1/(1-s))) + z_β √(p₁q₁/(1-s) + p₂q₂/s))² / δ²`` with ``p̄ = (1-s) p₁ + s p₂``.
    """
    if not 0 < share < 1:
        raise ValueError(f"share must be strictly within 0..1, got {share}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be within 0..1 (an absolute difference of proportions), got {delta}")
    p1 = min(max(p_base, 0.0), 1.0)
    p2 = p1 + delta if p1 + delta <= 1 else p1 - delta
    pbar = (1 - share) * p1 + share * p2
    za, zb = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    spread = za * math.sqrt(pbar * (1 - pbar) * (1 / share + 1 / (1 - share)))
    spread += zb * math.sqrt(p1 * (1 - p1) / (1 - share) + p2 * (1 - p2) / share)
    return spread * spread / (delta * delta)
