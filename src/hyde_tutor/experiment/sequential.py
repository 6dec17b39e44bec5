"""Always-valid (sequential) intervals for an A/B report, as free functions over counts (``math`` only).

A fixed-horizon 95 % interval (:mod:`~hyde_tutor.experiment.abstats`) is right once, at a sample size chosen in
advance; read every day and acted on the first time it excludes 0, it says "HyDE helps" far more often than 5 %
when nothing differs. A *confidence sequence* holds at every look at once: the chance that it EVER excludes the
true difference, however often it is read, is at most ``alpha``.

The method here is the **asymptotic confidence sequence with the two-sided normal-mixture boundary**:

* Robbins' normal mixture: for a standardized sum ``S`` of ``v`` independent units, the two-sided boundary
  ``|S| < √((v + ρ)(log(1 + v/ρ) + 2 log(1/α)))`` holds for all ``v`` at once with probability ``1 - α``
  (Howard, Ramdas, McAuliffe, Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences",
  Ann. Statist. 49(2), eq. (14); :func:`normal_mixture_boundary`). ``ρ`` only shapes where the boundary is
  tightest: :func:`mixture_precision` tunes it for a planned number of learners (their ``best_rho``).
* Applied to an estimate with an estimated standard error (Waudby-Smith, Arnold, Wu, Howard, Ramdas 2024,
  "Time-uniform central limit theory and asymptotic confidence sequences", Ann. Statist.): the interval is
  ``d ± se · √((1 + ρ/n)(log(1 + n/ρ) + 2 log(1/α)))`` with ``n`` the learners (the independent units), in place
  of ``d ± 1.96 · se`` (:func:`always_valid_multiplier`, :func:`always_valid_difference`).
* The same boundary is the mixture sequential probability ratio test (mSPRT) of Johari, Koomen, Pekelis, Walsh
  (2022), "Always valid inference: continuous monitoring of A/B tests", Oper. Res. 70(3), with a normal mixing
  distribution of variance ``1/ρ`` on the standardized scale: the interval excludes 0 exactly when the mixture
  likelihood ratio reaches ``1/α``, and ``min(1, 1/Λ)`` is an always-valid p-value (:func:`msprt_log_lambda`).

The standard error is clustered by learner as the fixed intervals are: a proportion is the ratio
``Σ successes / Σ turns`` over learners with the ratio estimator's variance, floored at the binomial variance
of the Agresti–Caffo shrunk rate ``(S + 1) / (M + 2)`` (so an arm at 0 % or 100 % early on still has a
width); a mean gets the same ratio-estimator variance. The interval is asymptotic: before ``min_learners``
learners per arm there is none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .abstats import ratio_variance

__all__ = ("ALPHA", "PLANNED_LEARNERS", "MIN_LEARNERS", "METHOD_NAME", "REFERENCES", "SequentialDifference",
           "mixture_precision", "normal_mixture_boundary", "always_valid_multiplier", "msprt_log_lambda",
           "always_valid_difference", "proportion_se", "mean_se", "sequential_proportions", "sequential_means",
           "verdict")

ALPHA = 0.05
PLANNED_LEARNERS = 1000
"""The number of learners the mixture is tuned for (where the always-valid interval is narrowest relative to
the fixed one). A design choice made before the experiment, never from its data: validity holds for any."""
MIN_LEARNERS = 5
"""Learners each arm needs before an always-valid interval is given (the interval is asymptotic)."""
METHOD_NAME = "asymptotic confidence sequence, two-sided normal mixture (equivalently an mSPRT)"
REFERENCES = (
    "Howard, Ramdas, McAuliffe, Sekhon (2021), Time-uniform, nonparametric, nonasymptotic confidence sequences, "
    "Ann. Statist. 49(2), eq. (14)",
    "Waudby-Smith, Arnold, Wu, Howard, Ramdas (2024), Time-uniform central limit theory and asymptotic "
    "confidence sequences, Ann. Statist.",
    "Johari, Koomen, Pekelis, Walsh (2022), Always valid inference: continuous monitoring of A/B tests, "
    "Oper. Res. 70(3)",
)


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be within 0..1, got {alpha}")


def mixture_precision(planned: float, alpha: float = ALPHA) -> float:
    """The mixture's ``ρ`` that makes the two-sided boundary tightest at ``planned`` units:
    ``ρ = planned / (2 log(1/α) + log(1 + 2 log(1/α)))`` (Howard et al. 2021; confseq's ``best_rho``)."""
    _check_alpha(alpha)
    if planned <= 0:
        raise ValueError(f"the planned number of learners must be > 0, got {planned}")
    log_inv = math.log(1 / alpha)
    return planned / (2 * log_inv + math.log(1 + 2 * log_inv))


def normal_mixture_boundary(v: float, rho: float, alpha: float = ALPHA) -> float:
    """Robbins' two-sided normal-mixture boundary for a sum with intrinsic time (variance) ``v``:
    ``√((v + ρ)(log(1 + v/ρ) + 2 log(1/α)))``."""
    _check_alpha(alpha)
    if v < 0 or rho <= 0:
        raise ValueError(f"the boundary needs v >= 0 and rho > 0, got v={v}, rho={rho}")
    return math.sqrt((v + rho) * (math.log1p(v / rho) + 2 * math.log(1 / alpha)))


def always_valid_multiplier(n: float, rho: float, alpha: float = ALPHA) -> float:
    """What replaces 1.96 after ``n`` learners: ``boundary(n) / √n`` (grows slowly as ``√log n``)."""
    if n <= 0:
        raise ValueError(f"an always-valid interval needs n > 0 learners, got {n}")
    return normal_mixture_boundary(n, rho, alpha) / math.sqrt(n)


def msprt_log_lambda(s: float, v: float, rho: float) -> float:
    """The log mixture likelihood ratio of the two-sided normal mixture (the mSPRT statistic) for a
    standardized sum ``s`` at intrinsic time ``v``: ``½ log(ρ / (v + ρ)) + s² / (2 (v + ρ))``."""
    if v < 0 or rho <= 0:
        raise ValueError(f"the mSPRT needs v >= 0 and rho > 0, got v={v}, rho={rho}")
    return 0.5 * math.log(rho / (v + rho)) + s * s / (2 * (v + rho))


@dataclass(frozen=True, slots=True)
class SequentialDifference:
    """``a - b`` with its always-valid interval and p-value."""

    value: float
    low: float
    high: float
    se: float
    learners: int
    """The independent units the interval is over (learners of both arms)."""
    p_value: float
    """Always-valid p-value ``min(1, 1/Λ)`` of the mSPRT for no difference."""

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> dict[str, float | int | bool]:
        return {"value": self.value, "low": self.low, "high": self.high, "se": self.se, "learners": self.learners,
                "p_value": self.p_value, "excludes_zero": self.excludes_zero}


def always_valid_difference(d: float, se: float, learners: int, *, alpha: float = ALPHA,
                            planned: float = PLANNED_LEARNERS) -> SequentialDifference:
    """``d ± se · always_valid_multiplier(learners)``, and the mSPRT p-value of ``d`` against 0.

    Args:
        d: the estimated difference.
        se: its standard error (learner-clustered).
        learners: the independent units it is over (both arms).
        alpha: 1 - the time-uniform coverage.
        planned: the learners the mixture is tuned for (:data:`PLANNED_LEARNERS`).
    """
    if se < 0 or not math.isfinite(se):
        raise ValueError(f"a standard error must be finite and >= 0, got {se}")
    rho = mixture_precision(planned, alpha)
    half = se * always_valid_multiplier(learners, rho, alpha)
    if se == 0:
        p = 1.0 if d == 0 else 0.0
    else:
        s = d / se * math.sqrt(learners)  # the standardized sum: d = S/n on the scale where each unit has variance 1
        p = min(1.0, math.exp(-msprt_log_lambda(s, learners, rho)))
    return SequentialDifference(d, d - half, d + half, se, learners, p)


def proportion_se(successes: Sequence[int], trials: Sequence[int]) -> tuple[float, float, int] | None:
    """``Σ successes / Σ trials`` over learners with its learner-clustered standard error, floored at the
    binomial one of the Agresti–Caffo rate ``(S + 1) / (M + 2)``.

    Returns:
        ``(p, se, learners)``; ``None`` with fewer than 2 learners with a trial.
    """
    pairs = [(s, t) for s, t in zip(successes, trials, strict=True) if t > 0]
    if len(pairs) < 2:
        return None
    hits, total = sum(s for s, _ in pairs), sum(t for _, t in pairs)
    if not 0 <= hits <= total:
        raise ValueError(f"successes must be within 0..trials, got {hits} of {total}")
    p = hits / total
    clustered = ratio_variance([s for s, _ in pairs], [t for _, t in pairs], p)
    shrunk = (hits + 1) / (total + 2)
    return p, math.sqrt(max(clustered, shrunk * (1 - shrunk) / total)), len(pairs)


def mean_se(values_by_learner: Sequence[Sequence[float]]) -> tuple[float, float, int] | None:
    """Mean of per-turn values with its learner-clustered standard error; ``None`` with fewer than 2 learners."""
    groups = [list(v) for v in values_by_learner if len(v)]
    if len(groups) < 2:
        return None
    n = sum(len(g) for g in groups)
    mean = sum(sum(g) for g in groups) / n
    return mean, math.sqrt(ratio_variance([sum(g) for g in groups], [len(g) for g in groups], mean)), len(groups)


def _combine(a: tuple[float, float, int] | None, b: tuple[float, float, int] | None, alpha: float, planned: float,
             min_learners: int) -> SequentialDifference | None:
    if a is None or b is None or min(a[2], b[2]) < min_learners:
        return None
    return always_valid_difference(a[0] - b[0], math.hypot(a[1], b[1]), a[2] + b[2], alpha=alpha, planned=planned)


def sequential_proportions(successes_a: Sequence[int], trials_a: Sequence[int], successes_b: Sequence[int],
                           trials_b: Sequence[int], *, alpha: float = ALPHA, planned: float = PLANNED_LEARNERS,
                           min_learners: int = MIN_LEARNERS) -> SequentialDifference | None:
    """``a - b`` of two learner-clustered proportions (per learner: successes and trials) with an always-valid
    interval; ``None`` while an arm has fewer than ``min_learners`` learners with a trial."""
    return _combine(proportion_se(successes_a, trials_a), proportion_se(successes_b, trials_b), alpha, planned,
                    min_learners)


def sequential_means(values_a: Sequence[Sequence[float]], values_b: Sequence[Sequence[float]], *,
                     alpha: float = ALPHA, planned: float = PLANNED_LEARNERS,
                     min_learners: int = MIN_LEARNERS) -> SequentialDifference | None:
    """``a - b`` of two learner-clustered means (per learner: the turns' values) with an always-valid interval."""
    return _combine(mean_se(values_a), mean_se(values_b), alpha, planned, min_learners)


def verdict(diff: SequentialDifference | None, lower_is_better: bool = False) -> str:
    """``"better"``, ``"worse"`` (for the ``a`` arm) or ``"no difference shown yet"``."""
    if diff is None or not diff.excludes_zero:
        return "no difference shown yet"
    return "better" if (diff.low > 0) != lower_is_better else "worse"
