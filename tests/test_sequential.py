"""Always-valid intervals (issue 38): the normal-mixture boundary against its references (Howard et al. 2021's
closed form, Johari et al.'s mSPRT, Robbins' exact Gaussian case), their time-uniform coverage on simulated
learner-clustered data peeked at many times, and the readout in ab-report's text and JSON."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.experiment.abreport import format_outcome_report, outcome_report
from hyde_tutor.experiment.abstats import clustered_proportion, newcombe_difference
from hyde_tutor.experiment.sequential import (always_valid_difference, always_valid_multiplier, mean_se,
                                              mixture_precision, msprt_log_lambda, normal_mixture_boundary,
                                              proportion_se, sequential_means, sequential_proportions, verdict)
from hyde_tutor.experiment.events import ExperimentEvent, MemoryEventLog, RatingEvent, TurnRecord
from hyde_tutor.experiment.assignment import Experiment

# -- the boundary against its references ---------------------------------------------------------------


def test_mixture_precision_is_howards_best_rho() -> None:
    """ρ = v / (2 log(1/α) + log(1 + 2 log(1/α))) (Howard et al. 2021; confseq's TwoSidedNormalMixture::best_rho):
    for v = 1000, α = 0.05: 1000 / (5.99146… + 1.94470…) = 126.0056."""
    assert mixture_precision(1000) == pytest.approx(126.0056098, rel=1e-8)
    assert mixture_precision(500, 0.05) == pytest.approx(mixture_precision(1000) / 2)


def test_boundary_is_the_minimum_width_at_the_planned_time() -> None:
    """Howard et al. tune ρ so that the boundary is (nearly) smallest at the planned intrinsic time."""
    planned, rho = 1000, mixture_precision(1000)
    best = normal_mixture_boundary(planned, rho)
    for other in (rho / 3, rho / 1.5, rho * 1.5, rho * 3):
        assert normal_mixture_boundary(planned, other) > best * 0.999


def test_boundary_is_where_the_msprt_reaches_one_over_alpha() -> None:
    """Johari, Koomen, Pekelis, Walsh: the mSPRT with a N(θ₀, τ²) mixture for N(θ, σ²) data,
    Λₙ = √(σ² / (σ² + nτ²)) · exp(n²τ² (x̄ₙ - θ₀)² / (2σ² (σ² + nτ²))), rejects when Λₙ ≥ 1/α. Written in their
    notation here, it must cross 1/α exactly on Howard's boundary with ρ = σ²/τ² on the standardized scale."""
    sigma, tau, alpha = 2.0, 0.3, 0.05
    rho_std = sigma ** 2 / tau ** 2  # the standardized sum S = n x̄ / σ has intrinsic time n, mixture precision σ²/τ²
    planned = rho_std * (2 * math.log(1 / alpha) + math.log(1 + 2 * math.log(1 / alpha)))  # whose best ρ is rho_std

    def johari(n: int, xbar: float, theta0: float = 0.0) -> float:
        return math.sqrt(sigma ** 2 / (sigma ** 2 + n * tau ** 2)) * math.exp(
            n * n * tau ** 2 * (xbar - theta0) ** 2 / (2 * sigma ** 2 * (sigma ** 2 + n * tau ** 2)))

    for n in (1, 10, 100, 1000):
        edge = normal_mixture_boundary(n, rho_std, alpha) * sigma / n  # the x̄ where the boundary is met
        assert johari(n, edge) == pytest.approx(1 / alpha, rel=1e-9)
        assert math.exp(msprt_log_lambda(edge * n / sigma, n, rho_std)) == pytest.approx(1 / alpha, rel=1e-9)
        for xbar in (edge * 0.9, edge * 1.1):  # the interval excludes 0 exactly when the mSPRT rejects
            diff = always_valid_difference(xbar, sigma / math.sqrt(n), n, alpha=alpha, planned=planned)
            assert diff.excludes_zero == (johari(n, xbar) >= 1 / alpha)
            assert diff.p_value == pytest.approx(min(1.0, 1 / johari(n, xbar)), rel=1e-9)


def test_gaussian_known_variance_is_robbins_exact_case() -> None:
    """For Gaussian data with a known variance the mixture is an exact martingale (Robbins 1970; Howard et al.
    2021): a random walk watched at every one of 2,000 steps crosses the boundary in at most α of the runs, and,
    the path being nearly continuous, not far below α. The fixed 1.96 line is crossed far more often."""
    rng = np.random.default_rng(0)
    steps, runs, rho = 2000, 3000, mixture_precision(500)
    paths = np.cumsum(rng.standard_normal((runs, steps)), axis=1)
    v = np.arange(1, steps + 1)
    bound = np.sqrt((v + rho) * (np.log1p(v / rho) + 2 * math.log(20)))
    assert bound[99] == pytest.approx(normal_mixture_boundary(100, rho))
    crossed = float(np.mean((np.abs(paths) >= bound).any(axis=1)))
    fixed = float(np.mean((np.abs(paths) >= 1.959964 * np.sqrt(v)).any(axis=1)))
    assert 0.02 < crossed <= 0.05, crossed
    assert fixed > 0.4, fixed


def test_multiplier_replaces_196_and_grows_slowly() -> None:
    rho = mixture_precision(1000)
    assert always_valid_multiplier(1000, rho) == pytest.approx(3.0352, abs=1e-4)
    assert always_valid_multiplier(25, rho) > always_valid_multiplier(100, rho) > always_valid_multiplier(1000, rho)
    assert always_valid_multiplier(4000, rho) < 3.2  # grows like √log n far past the planned time
    with pytest.raises(ValueError, match="n > 0"):
        always_valid_multiplier(0, rho)
    with pytest.raises(ValueError, match="alpha"):
        mixture_precision(100, alpha=1.5)


# -- learner-clustered standard errors -----------------------------------------------------------------


def test_proportion_se_is_the_clustered_one_with_a_binomial_floor() -> None:
    fixed = clustered_proportion([10] * 10 + [0] * 10, [10] * 20)  # learners who always agree with themselves
    p, se, k = proportion_se([10] * 10 + [0] * 10, [10] * 20)
    assert (p, k) == (0.5, 20) and se ** 2 == pytest.approx(fixed.deff * 0.25 / 200)
    _, floor_se, _ = proportion_se([0, 0, 0], [4, 4, 4])  # 0 of 12: the clustered variance is 0, the floor is not
    assert floor_se == pytest.approx(math.sqrt((1 / 14) * (13 / 14) / 12))
    assert proportion_se([3], [4]) is None
    mean, mse, learners = mean_se([[1.0, 0.0], [0.5], [1.0]])
    assert mean == pytest.approx(0.625) and learners == 3 and mse > 0


def test_too_few_learners_per_arm_give_no_interval_and_no_verdict() -> None:
    assert sequential_proportions([1, 1], [2, 2], [0, 0, 1], [2, 2, 2], min_learners=5) is None
    assert verdict(None) == "no difference shown yet"
    assert sequential_means([[1.0]] * 6, [[0.0]] * 6, min_learners=5) is not None


def test_verdict_follows_the_direction_of_better() -> None:
    up = always_valid_difference(0.2, 0.01, 400)
    down = always_valid_difference(-0.2, 0.01, 400)
    flat = always_valid_difference(0.01, 0.05, 400)
    assert (verdict(up), verdict(down), verdict(flat)) == ("better", "worse", "no difference shown yet")
    assert verdict(down, lower_is_better=True) == "better"  # fewer rephrases is HyDE better


# -- time-uniform coverage on simulated learners, peeked at many times -----------------------------------


def _learners(rng: np.random.Generator, n: int, rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Per learner: turns (1..6) and 👍 among them, each learner with an own rate (Beta around ``rate``):
    turns of one learner are correlated, as in the served tutor."""
    turns = rng.integers(1, 7, n)
    own = rng.beta(4 * rate, 4 * (1 - rate), n)
    return rng.binomial(turns, own), turns


@pytest.mark.parametrize(("p_hyde", "p_raw"), [(0.6, 0.6), (0.75, 0.6)])
def test_always_valid_interval_covers_at_every_look(p_hyde: float, p_raw: float) -> None:
    """120 simulated experiments, each peeked at after every 40 learners for 20 looks (800 learners): the
    always-valid interval holds the true difference at EVERY look in ≥ 93 % of them (nominally ≥ 95 %); the
    fixed 95 % interval, read at every look, fails far more often."""
    seeds, looks, step = 120, 20, 40
    always_ok = fixed_ok = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        arm = rng.random(looks * step) < 0.5
        hits_h, turns_h = _learners(rng, looks * step, p_hyde)
        hits_r, turns_r = _learners(rng, looks * step, p_raw)
        always = fixed = True
        for look in range(1, looks + 1):
            k = look * step
            h, r = arm[:k], ~arm[:k]
            a = (hits_h[:k][h].tolist(), turns_h[:k][h].tolist())
            b = (hits_r[:k][r].tolist(), turns_r[:k][r].tolist())
            diff = sequential_proportions(*a, *b)
            assert diff is not None
            always &= diff.low <= p_hyde - p_raw <= diff.high
            fx = newcombe_difference(clustered_proportion(*a), clustered_proportion(*b))
            fixed &= fx[1] <= p_hyde - p_raw <= fx[2]
        always_ok += always
        fixed_ok += fixed
    assert always_ok / seeds >= 0.93, always_ok
    assert fixed_ok / seeds < 0.85, fixed_ok  # the reason for the issue: peeking breaks the fixed interval


# -- the readout in the report -------------------------------------------------------------------------


def _log(n: int, p_hyde: float, p_raw: float, seed: int, keep_raw: float = 1.0) -> MemoryEventLog:
    rng = random.Random(seed)
    experiment = Experiment("e", hyde_share=0.5)
    log = MemoryEventLog()
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True,
                                             timestamp=1000.0))
    for i in range(n):
        subject, arm = f"l-{seed}-{i}", experiment.arm(f"l-{seed}-{i}")
        if arm == "raw" and rng.random() > keep_raw:
            continue
        for j in range(3):
            good = rng.random() < (p_hyde if arm == "hyde" else p_raw)
            turn = TurnRecord(turn_id=f"{subject}-{j}", subject=subject, conversation_id=subject, experiment="e",
                              arm=arm, timestamp=1001.0 + i + j / 10, grounded=good, rephrase=not good,
                              judge_score=1.0 if good else 0.0)
            log.add_turn(turn)
            log.add_rating(RatingEvent(turn_id=turn.turn_id, subject=subject, rating=1 if good else -1))
    return log


def test_report_gives_one_decision_line_in_text_and_json() -> None:
    better = outcome_report(_log(400, 0.85, 0.5, seed=1))
    same = outcome_report(_log(400, 0.6, 0.6, seed=2))
    assert json.loads(json.dumps(better, allow_nan=False)) == better
    readout = better["periods"][0]["always_valid"]
    assert readout["decision"]["verdict"] == "better" and readout["decision"]["metric"] == "thumbs_up"
    assert readout["differences"]["thumbs_up"]["role"] == "primary"
    assert readout["differences"]["rephrase"]["role"] == "secondary"
    assert readout["differences"]["judged_relevance"]["excludes_zero"]
    fixed = better["periods"][0]["by_assigned_arm"]["differences"]["thumbs_up"]
    seq = readout["differences"]["thumbs_up"]
    assert seq["low"] < fixed["low"] and seq["high"] > fixed["high"]  # wider: it holds at every look
    assert better["decision"]["text"].startswith("HyDE better (always-valid 95 %")
    assert better["decision"]["text"].endswith("after 400 learners") and better["decision"]["period"] == 1
    assert same["decision"]["verdict"] == "no difference shown yet"
    text = format_outcome_report(better)
    assert "DECISION (period 1): HyDE better" in text and "Howard et al. 2021" in text
    assert "read the always-valid interval while the experiment runs" in text
    assert "normal mixture" in better["method"]["always_valid"]


def test_a_worse_hyde_arm_reads_worse() -> None:
    worse = outcome_report(_log(400, 0.45, 0.8, seed=3))
    assert worse["decision"]["verdict"] == "worse" and worse["decision"]["text"].startswith("HyDE worse")


def test_a_broken_split_says_not_to_read_the_decision() -> None:
    report = outcome_report(_log(800, 0.85, 0.5, seed=4, keep_raw=0.6))
    assert report["periods"][0]["srm"]["mismatch"]
    assert report["decision"]["srm_mismatch"] and report["decision"]["text"].startswith("DO NOT READ (sample ratio")


def test_ab_report_cli_prints_the_decision_in_text_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    log = _log(300, 0.85, 0.5, seed=5)
    fake = types.ModuleType("hyde_tutor.experiment.sqlstore")
    fake.open_event_log = lambda url: log  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hyde_tutor.experiment.sqlstore", fake)
    runner = CliRunner()
    data = json.loads(runner.invoke(app, ["ab-report", "--db", "sqlite:///x.db", "--json"]).output)
    assert data["decision"]["verdict"] == "better" and "after 300 learners" in data["decision"]["text"]
    assert data["periods"][0]["always_valid"]["differences"]["thumbs_up"]["excludes_zero"]
    text = runner.invoke(app, ["ab-report", "--db", "sqlite:///x.db"]).output
    assert text.splitlines()[1] == f"DECISION (period 1): {data['decision']['text']}"
