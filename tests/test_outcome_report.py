"""The A/B outcome report: every statistic against known values, period splitting, the report's JSON shape and the
CLI (``ab-report --db`` over an event log, ``ab-report --json`` over a metrics JSONL)."""

from __future__ import annotations

import json
import math
import random
import re
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.experiment.abreport import format_outcome_report, outcome_report
from hyde_tutor.experiment.abstats import (chi2_sf, clustered_mean, clustered_proportion, newcombe_difference,
                                           required_total, srm_check, wilson)
from hyde_tutor.experiment.outcomes import split_periods
from hyde_tutor.experiment.events import ExperimentEvent, MemoryEventLog, RatingEvent, TurnRecord
from hyde_tutor.experiment.assignment import Experiment
from hyde_tutor.plugin.monitor import RetrievalRecord


# -- statistics against published values ---------------------------------------------------------------

@pytest.mark.parametrize(("x", "n", "low", "high"), [
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
])
def test_wilson_matches_newcombe_1998(x: int, n: int, low: float, high: float) -> None:
    p, lo, hi = wilson(x, n)
    assert p == pytest.approx(x / n)
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_newcombe_difference_matches_newcombe_1998_example() -> None:
    """56/70 − 48/80: method 10 gives +0.0524 to +0.3339 (Newcombe 1998, Statistics in Medicine 17, table II)."""
    d, low, high = newcombe_difference(clustered_proportion([56], [70]), clustered_proportion([48], [80]))
    assert d == pytest.approx(0.2) and low == pytest.approx(0.0524, abs=5e-5) and high == pytest.approx(0.3339, abs=5e-5)


@pytest.mark.parametrize(("stat", "df", "p"), [
    (3.841458820694124, 1, 0.05), (10.827566170662733, 1, 0.001), (5.991464547107979, 2, 0.05),
    (7.814727903251178, 3, 0.05), (13.276704135987622, 4, 0.01), (0.0, 3, 1.0),
])
def test_chi2_p_values_at_the_table_quantiles(stat: float, df: int, p: float) -> None:
    assert chi2_sf(stat, df) == pytest.approx(p, rel=1e-9, abs=1e-12)


def test_chi2_with_two_df_is_the_exponential_tail() -> None:
    for x in (0.3, 2.0, 9.0, 40.0):
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)


def test_srm_check_passes_a_fair_split_and_fails_a_skewed_one() -> None:
    ok = srm_check({"hyde": 510, "raw": 490}, {"hyde": 0.5, "raw": 0.5})
    assert ok["chi2"] == pytest.approx(0.4) and ok["df"] == 1 and ok["p_value"] == pytest.approx(0.5271, abs=1e-4)
    assert not ok["mismatch"]
    bad = srm_check({"hyde": 600, "raw": 400}, {"hyde": 0.5, "raw": 0.5})
    assert bad["chi2"] == pytest.approx(40.0) and bad["p_value"] < 1e-9 and bad["mismatch"]
    uneven = srm_check({"hyde": 300, "raw": 700}, {"hyde": 0.3, "raw": 0.7})  # a 30 % share, met exactly
    assert uneven["chi2"] == pytest.approx(0.0) and not uneven["mismatch"]
    nobody_expected = srm_check({"hyde": 3, "raw": 100}, {"hyde": 0.0, "raw": 1.0})
    assert nobody_expected["mismatch"] and nobody_expected["p_value"] == 0.0


def test_required_sample_matches_the_textbook_formula() -> None:
    """0.5 vs 0.6, α 0.05 two-sided, power 0.8: (1.96·√(2·0.55·0.45) + 0.8416·√(0.25 + 0.24))² / 0.01 = 387.3 per
    arm, so 775 in all at an even split; an uneven split needs more."""
    assert required_total(0.5, 0.1) == pytest.approx(2 * 387.34, abs=0.05)
    assert math.ceil(required_total(0.5, 0.1) / 2) == 388
    assert required_total(0.5, 0.1, share=0.2) > required_total(0.5, 0.1) * 1.5
    assert required_total(0.5, 0.05) == pytest.approx(4 * required_total(0.5, 0.1), rel=0.02)


def test_clustering_widens_the_interval_when_learners_differ() -> None:
    """The same 50 % over 200 turns: 20 learners who each always agree with themselves (10 of 10 or 0 of 10) are
    20 observations, not 200; 20 learners each 5 of 10 are as good as independent turns."""
    mixed = clustered_proportion([5] * 20, [10] * 20)
    sticky = clustered_proportion([10] * 10 + [0] * 10, [10] * 20)
    assert mixed.value == sticky.value == 0.5 and mixed.deff == 1.0
    assert sticky.deff == pytest.approx(10 * 20 / 19, rel=1e-6)
    assert (sticky.high - sticky.low) > 2.5 * (mixed.high - mixed.low)
    _, plain_low, plain_high = wilson(100, 200)
    assert (mixed.low, mixed.high) == pytest.approx((plain_low, plain_high))


def test_clustered_mean_and_its_interval() -> None:
    est, se = clustered_mean([[1.0, 1.0], [0.0], [0.5, 0.5, 0.5]], bounds=(0.0, 1.0))
    assert est.value == pytest.approx(3.5 / 6) and est.n == 6 and est.learners == 3 and se is not None
    assert 0.0 <= est.low < est.value < est.high <= 1.0
    one, no_se = clustered_mean([[0.4, 0.6]])
    assert one.value == pytest.approx(0.5) and one.low is None and no_se is None


# -- the report over an event log ----------------------------------------------------------------------

def _log(n_learners: int, p_hyde: float, p_raw: float, *, share: float = 0.5, seed: int = 0, turns_each: int = 3,
         keep: float = 1.0, start: float = 1000.0, arms: tuple[str, ...] = ("raw", "hyde")) -> MemoryEventLog:
    """Learners assigned by the real Experiment; a rating of 👍 with the arm's probability; one retrieval per turn
    (HyDE attempted and used in the hyde arm)."""
    rng = random.Random(seed)
    experiment = Experiment("e", hyde_share=share, arms=arms)
    log = MemoryEventLog()
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=share, enabled=True,
                                             timestamp=start))
    for i in range(n_learners):
        subject = f"learner-{seed}-{i}"
        arm = experiment.arm(subject)
        if arm == "raw" and rng.random() > keep:
            continue
        for j in range(turns_each):
            good = rng.random() < (p_hyde if arm == "hyde" else p_raw)
            turn = TurnRecord(turn_id=f"{subject}-{j}", subject=subject, conversation_id=subject, experiment="e",
                              arm=arm, timestamp=start + 1 + i + j / 10, grounded=good, rephrase=not good,
                              seconds=0.5, agent_tokens_in=1000, agent_tokens_out=200 if arm == "hyde" else 60,
                              hypothesis_tokens=140 if arm == "hyde" else 0, judge_score=1.0 if good else 0.0)
            log.add_turn(turn)
            log.add_retrieval(RetrievalRecord("e", arm, arm == "hyde", "experiment", "grammar_search", "grammar",
                                              used_hyde=arm == "hyde", stages_ms={"total_ms": 20.0}, results=5),
                              turn.turn_id)
            if rng.random() < 0.6:
                log.add_rating(RatingEvent(turn_id=turn.turn_id, subject=subject, rating=1 if good else -1))
    return log


def test_equal_arms_give_an_interval_around_zero_and_a_big_effect_excludes_it() -> None:
    same = outcome_report(_log(300, 0.6, 0.6, seed=1))
    big = outcome_report(_log(300, 0.85, 0.5, seed=2))
    for name in ("thumbs_up", "grounded", "rephrase", "judged_relevance"):
        d = same["periods"][0]["by_assigned_arm"]["differences"][name]
        assert d["low"] < 0 < d["high"] and not d["excludes_zero"], (name, d)
        b = big["periods"][0]["by_assigned_arm"]["differences"][name]
        assert b["excludes_zero"], (name, b)
    assert big["periods"][0]["by_assigned_arm"]["differences"]["thumbs_up"]["low"] > 0.15
    assert big["periods"][0]["by_assigned_arm"]["differences"]["rephrase"]["high"] < -0.15
    assert not same["warnings"] and not same["periods"][0]["srm"]["mismatch"]


def test_a_skewed_split_fails_the_srm_check_loudly() -> None:
    report = outcome_report(_log(800, 0.6, 0.6, seed=3, keep=0.7))
    assert report["periods"][0]["srm"]["mismatch"] and report["periods"][0]["srm"]["p_value"] < 0.001
    assert any("SAMPLE RATIO MISMATCH" in w for w in report["warnings"])
    assert "SAMPLE RATIO MISMATCH" in format_outcome_report(report)


def test_periods_split_at_start_stop_and_share_changes() -> None:
    events = [ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True, timestamp=10),
              ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True, timestamp=15),  # no cut
              ExperimentEvent(change="share", experiment="e", hyde_share=0.2, enabled=True, timestamp=20),
              ExperimentEvent(change="stop", experiment="e", hyde_share=0.2, enabled=False, timestamp=30),
              ExperimentEvent(change="start", experiment="e", hyde_share=0.2, enabled=True, timestamp=40)]
    turns = [TurnRecord(turn_id=str(ts), subject="s", conversation_id="c", experiment="e", arm="raw", timestamp=ts)
             for ts in (5, 11, 16, 21, 29.9, 35, 41, 99)]
    periods, outside = split_periods(events, turns)
    assert [(p.start, p.end, p.hyde_share) for p in periods] == [(10, 20, 0.5), (20, 30, 0.2), (40, None, 0.2)]
    assert [[t.timestamp for t in p.turns] for p in periods] == [[11, 16], [21, 29.9], [41, 99]]
    assert outside == 2  # before the first start, and while stopped
    whole, none_outside = split_periods([], turns)
    assert len(whole) == 1 and whole[0].hyde_share is None and len(whole[0].turns) == 8 and none_outside == 0


def test_a_share_change_is_checked_against_each_periods_own_share() -> None:
    log = _log(400, 0.6, 0.6, share=0.5, seed=4, start=1000.0)
    later = _log(400, 0.6, 0.6, share=0.2, seed=5, start=10_000.0)
    for t in later.turns():
        log.add_turn(t)
    log.add_experiment_event(ExperimentEvent(change="share", experiment="e", hyde_share=0.2, enabled=True,
                                             timestamp=10_000.0))
    report = outcome_report(log)
    assert [p["period"]["hyde_share"] for p in report["periods"]] == [0.5, 0.2]
    assert not any(p["srm"]["mismatch"] for p in report["periods"])
    assert any("2 periods" in w for w in report["warnings"])
    pooled = srm_check({a: sum(p["srm"]["observed"][a] for p in report["periods"]) for a in ("hyde", "raw")},
                       {"hyde": 0.5, "raw": 0.5})
    assert pooled["mismatch"]  # pooling the two periods against either share would have cried wolf


def test_report_json_shape_cost_and_power() -> None:
    report = outcome_report(_log(200, 0.7, 0.6, seed=6), mde=0.05)
    assert json.loads(json.dumps(report, allow_nan=False)) == report  # JSON-ready: no NaN, no infinity
    assert set(report) >= {"experiment", "mde", "method", "turns", "learners", "periods", "warnings"}
    period = report["periods"][0]
    assert set(period) == {"period", "learners", "turns", "by_assigned_arm", "by_treatment_received", "hyde_searches",
                           "srm", "power", "always_valid"}
    hyde = period["by_assigned_arm"]["arms"]["hyde"]
    for name in ("thumbs_up", "rating_coverage", "judged_relevance", "grounded", "rephrase", "failed"):
        assert set(hyde[name]) == {"value", "low", "high", "n", "learners", "deff"}
    assert hyde["rating_coverage"]["value"] == pytest.approx(0.6, abs=0.06) and hyde["failed"]["value"] == 0.0
    assert hyde["cost_per_turn"]["hypothesis_tokens"] == 140 and hyde["cost_per_turn"]["total_tokens"] == 1200
    assert "top_score" not in json.dumps(report)
    assert set(period["by_treatment_received"]["arms"]) == {"hyde", "raw"}
    power = period["power"]["metrics"]["thumbs_up"]
    assert power["learners_needed"] > 200 and power["more_learners_needed"] == power["learners_needed"] - 200
    assert power["turns_per_learner"] == pytest.approx(1.8 / (1 - 0.4 ** 3), abs=0.2)  # rated turns per rater
    # learners to ENROL: the rated turns needed, over the rated turns an enrolled learner brings (was: raters)
    arms = period["by_assigned_arm"]["arms"]
    rated = arms["hyde"]["thumbs_up"]["n"] + arms["raw"]["thumbs_up"]["n"]
    raters = arms["hyde"]["thumbs_up"]["learners"] + arms["raw"]["thumbs_up"]["learners"]
    turns = required_total(power["base_rate"], 0.05, 0.5) * power["deff"]
    assert power["learners_needed"] == pytest.approx(turns * 200 / rated, abs=1.5)
    assert power["contributing_share"] == pytest.approx(raters / 200, abs=1e-4) and raters < 200
    assert power["learners_needed"] > math.ceil(turns / power["turns_per_learner"])  # more than the raters needed


def _rated_by_few(enrolled: int, raters_per_arm: int) -> MemoryEventLog:
    """``enrolled`` learners with two turns each; only the first ``raters_per_arm`` of each arm rate, both turns,
    one 👍 and one 👎 (so every rate is 0.5 and no learner differs from another: deff exactly 1)."""
    experiment = Experiment("e", hyde_share=0.5)
    log = MemoryEventLog()
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True, timestamp=1))
    rating: dict[str, int] = {"hyde": 0, "raw": 0}
    for i in range(enrolled):
        subject = f"learner-{i}"
        arm = experiment.arm(subject)
        rates = rating[arm] < raters_per_arm
        rating[arm] += rates
        for j in range(2):
            turn = TurnRecord(turn_id=f"{subject}-{j}", subject=subject, conversation_id=subject, experiment="e",
                              arm=arm, timestamp=2, grounded=True, rephrase=False)
            log.add_turn(turn)
            if rates:
                log.add_rating(RatingEvent(turn_id=turn.turn_id, subject=subject, rating=1 if j == 0 else -1))
    assert rating["hyde"] >= raters_per_arm and rating["raw"] >= raters_per_arm
    return log


def test_learners_needed_counts_enrolled_learners_not_the_few_who_rate() -> None:
    """400 enrolled, 20 of them rate (both their turns, 0.5 👍, deff 1). From first principles: 0.5 vs 0.55 at an
    even split needs (1.959964·√(0.525·0.475·4) + 0.841621·√(0.25·2 + 0.2475·2))² / 0.05² = 3129.3 rated turns;
    40 rated turns came from 400 enrolled learners, 0.1 a learner, so 31,294 learners must be enrolled (30,894
    more). The old figure was raters: ⌈3129.3 / 2⌉ = 1,565 "in all", 1,165 "more": twenty times too few."""
    period = outcome_report(_rated_by_few(400, 10), mde=0.05)["periods"][0]
    thumbs = period["power"]["metrics"]["thumbs_up"]
    assert (thumbs["base_rate"], thumbs["deff"], thumbs["contributing_share"]) == (0.5, 1.0, 0.05)
    assert thumbs["turns_needed"] == 3130 and required_total(0.5, 0.05) == pytest.approx(3129.34, abs=0.01)
    assert thumbs["learners_needed"] == 31_294 and thumbs["more_learners_needed"] == 30_894
    assert period["power"]["enrolled"] == 400
    grounded = period["power"]["metrics"]["grounded"]  # every turn has it: every enrolled learner contributes
    assert grounded["contributing_share"] == 1.0
    text = format_outcome_report(outcome_report(_rated_by_few(400, 10), mde=0.05))
    assert "31,294 learners in all (30,894 more)" in text and "5% of learners bring 2.0 each" in text


def test_the_srm_check_tests_the_split_the_configured_arms_make() -> None:
    """``HYDE_EXPERIMENT__ARMS=hyde,raw`` splits learners evenly whatever the share (only ``raw,hyde`` uses it):
    checked against the 20 % share, a healthy even split was a SAMPLE RATIO MISMATCH."""
    log = _log(600, 0.6, 0.6, share=0.2, seed=11, arms=("hyde", "raw"))
    observed = outcome_report(log, arms=("hyde", "raw"))["periods"][0]["srm"]["observed"]
    assert abs(observed["hyde"] - observed["raw"]) < 80  # learners did split evenly
    report = outcome_report(log, arms=("hyde", "raw"))
    period = report["periods"][0]
    assert period["period"]["split"] == {"hyde": 0.5, "raw": 0.5}
    assert period["srm"]["expected"] == {"hyde": 300.0, "raw": 300.0}
    assert not period["srm"]["mismatch"] and not report["warnings"]
    assert period["power"]["share"] == 0.5  # powered at the split the learners really get
    assert "not used: the arms hyde,raw split evenly, hyde 50% / raw 50%" in format_outcome_report(report)
    wrong = outcome_report(log)  # checked against the share (the raw,hyde split): the false alarm
    assert wrong["periods"][0]["srm"]["mismatch"]
    shared = outcome_report(_log(600, 0.6, 0.6, share=0.2, seed=11), arms=("raw", "hyde"))
    assert shared["periods"][0]["period"]["split"] == {"raw": 0.8, "hyde": 0.2} and not shared["warnings"]


def test_ab_report_checks_the_split_of_the_configured_arms(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(600, 0.6, 0.6, share=0.2, seed=11, arms=("hyde", "raw"))
    fake = types.ModuleType("hyde_tutor.experiment.sqlstore")
    fake.open_event_log = lambda url: log  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hyde_tutor.experiment.sqlstore", fake)
    monkeypatch.setenv("HYDE_EXPERIMENT__ARMS", "hyde,raw")
    out = CliRunner().invoke(app, ["ab-report", "--db", "sqlite:///x.db", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert not data["warnings"] and data["periods"][0]["srm"]["expected"] == {"hyde": 300.0, "raw": 300.0}
    monkeypatch.setenv("HYDE_EXPERIMENT__ARMS", "hyde,nope")
    bad = CliRunner().invoke(app, ["ab-report", "--db", "sqlite:///x.db"])
    assert bad.exit_code == 2 and "HYDE_EXPERIMENT__ARMS" in bad.output and "nope" in bad.output


def _timed_out_log() -> MemoryEventLog:
    """The served embedded model: every HyDE-arm search attempted HyDE; 9 of the hyde arm's 12 searches timed
    out (fell back to raw), 1 had no usable hypothesis, 2 were shaped by HyDE."""
    log = MemoryEventLog()
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True, timestamp=1))
    outcomes = ["timeout"] * 9 + ["empty_hypotheses", None, None]
    for i, reason in enumerate(outcomes):
        for arm in ("hyde", "raw"):
            tid = f"{arm}-{i}"
            log.add_turn(TurnRecord(turn_id=tid, subject=tid, conversation_id=tid, experiment="e", arm=arm, timestamp=2,
                                    grounded=arm == "raw" or reason is None))
            hyde = arm == "hyde"
            log.add_retrieval(RetrievalRecord("e", arm, hyde, "experiment", "grammar_search", "grammar",
                                              used_hyde=hyde and reason is None,
                                              fallback_reason=reason if hyde else None), tid)
    return log


def test_treatment_received_is_hyde_only_where_hyde_shaped_the_results() -> None:
    """A search that attempted HyDE and timed out gave the raw treatment: "received" counted it as HyDE, so an
    experiment where HyDE never shaped a result read as if HyDE hurt."""
    report = outcome_report(_timed_out_log())
    period = report["periods"][0]
    received = {arm: row["turns"] for arm, row in period["by_treatment_received"]["arms"].items()}
    assert received == {"hyde": 2, "raw": 22}
    assert period["by_treatment_received"]["arms"]["hyde"]["grounded"]["value"] == 1.0
    assert period["hyde_searches"]["hyde"] == {"searches": 12, "hyde_attempted": 12, "hyde_used": 2, "fell_back": 10,
                                               "fallback_reasons": {"timeout": 9, "empty_hypotheses": 1}}
    assert period["hyde_searches"]["raw"]["hyde_attempted"] == 0
    text = format_outcome_report(report)
    assert "hyde         12 searches, HyDE attempted in 12 → shaped 2; fell back in 10 (timeout 9, " \
           "empty_hypotheses 1)" in text
    assert "raw          12 searches, HyDE attempted in none" in text


def test_the_primary_outcome_line_counts_the_outcomes_the_report_flags() -> None:
    """METHOD spoke of four outcomes; the report gives seven a hyde − raw interval (and a * mark): the six of
    issue 28 and the abandoned rate."""
    from hyde_tutor.experiment.outcomes import METHOD

    report = outcome_report(_log(200, 0.7, 0.6, seed=6))
    flagged = report["periods"][0]["by_assigned_arm"]["differences"]
    n = len(flagged)
    assert n == 7 and "abandoned" in flagged and all("excludes_zero" in row for row in flagged.values())
    assert f"{n} outcomes get a hyde − raw interval" in METHOD["primary"]
    assert all(name in METHOD["primary"] for name in flagged)
    assert f"about {1 - 0.95 ** n:.0%} of runs" in METHOD["primary"] and "30%" in METHOD["primary"]


# -- the CLI -------------------------------------------------------------------------------------------

def test_ab_report_db_prints_the_outcome_report(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(120, 0.8, 0.5, seed=7)
    opened: list[str] = []
    fake = types.ModuleType("hyde_tutor.experiment.sqlstore")
    fake.open_event_log = lambda url: opened.append(url) or log  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hyde_tutor.experiment.sqlstore", fake)
    runner = CliRunner()
    out = runner.invoke(app, ["ab-report", "--db", "sqlite:///x.db", "--json", "--mde", "0.1"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert opened == ["sqlite:///x.db"] and data["mde"] == 0.1 and data["turns"] == len(log.turns())
    text = runner.invoke(app, ["ab-report", "--db", "sqlite:///x.db"]).output
    assert "by assigned arm (intention to treat)" in text and "SRM check" in text and "hyde − raw" in text
    both = runner.invoke(app, ["ab-report", "--db", "sqlite:///x.db", "--file", "m.jsonl"])
    assert both.exit_code == 2 and "Pass one" in both.output
    other = runner.invoke(app, ["ab-report", "--db", "sqlite:///x.db", "--experiment", "no-such"])
    assert other.exit_code == 2 and "No served turns" in other.output and "'no-such'" in other.output


def test_ab_report_db_without_the_sql_store_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hyde_tutor.experiment.sqlstore", None)  # an import of it raises ImportError
    out = CliRunner().invoke(app, ["ab-report", "--db", "sqlite:///x.db"])
    assert out.exit_code == 2 and "--file" in out.output and "sqlstore" in out.output


def test_ab_report_json_on_a_metrics_jsonl_still_works_without_top_scores(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [{"arm": arm, "use_hyde": arm == "hyde", "stages_ms": {"total_ms": 10.0 + i}, "results": 5,
             "top_score": 9.0 if arm == "hyde" else 0.3, "llm_calls": int(arm == "hyde")}
            for i in range(20) for arm in ("hyde", "raw")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = CliRunner().invoke(app, ["ab-report", "--file", str(path), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["n_records"] == 40 and {r["arm"] for r in data["arms"]} == {"hyde", "raw"}
    assert "top_score" not in out.output and "mean_top_score" not in data["arms"][0]
    text = CliRunner().invoke(app, ["ab-report", "--file", str(path)]).output
    assert "top score" not in text and "p50 ms" in text


def test_ab_report_db_that_cannot_be_read_says_so_without_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(url: str) -> MemoryEventLog:
        raise RuntimeError("cannot open the served tutor's database: connection refused")

    fake = types.ModuleType("hyde_tutor.experiment.sqlstore")
    fake.open_event_log = refuse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hyde_tutor.experiment.sqlstore", fake)
    out = CliRunner().invoke(app, ["ab-report", "--db", "postgresql://tutor:s3cret@db.internal/served"])
    assert out.exit_code == 2 and "connection refused" in out.output and "s3cret" not in out.output
    assert "Cannot read the served tutor's event log at postgresql://tutor:***@db.internal/served" in out.output


def test_treatment_received_follows_the_retrievals_and_unassigned_learners_stay_out_of_the_split() -> None:
    log = MemoryEventLog()
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True, timestamp=1))
    rows = [("a", "raw", True), ("b", "raw", False), ("c", "hyde", True), ("d", "unassigned", False),
            ("e", "hyde", None)]  # e: a turn with no search
    for subject, arm, used in rows:
        log.add_turn(TurnRecord(turn_id=subject, subject=subject, conversation_id=subject, experiment="e", arm=arm,
                                timestamp=2, grounded=True))
        if used is not None:
            log.add_retrieval(RetrievalRecord("e", arm, used, "explicit", "grammar_search", "grammar", used_hyde=used),
                              subject)
    period = outcome_report(log)["periods"][0]
    received = {arm: row["turns"] for arm, row in period["by_treatment_received"]["arms"].items()}
    assert received == {"hyde": 2, "raw": 2, "no search": 1}
    assert period["srm"]["observed"] == {"hyde": 2, "raw": 2}  # the unassigned learner is not in the split
    assert set(period["by_assigned_arm"]["arms"]) == {"hyde", "raw", "unassigned"}


def test_ab_report_reads_the_served_database_without_flags_when_there_is_one(tmp_path: Path, monkeypatch) -> None:
    from hyde_tutor.experiment.events import ExperimentEvent, RatingEvent, TurnRecord
    from hyde_tutor.experiment.sqlstore import open_event_log

    monkeypatch.setenv("HYDE_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("HYDE_SERVER__DATABASE_URL", raising=False)
    nothing = CliRunner().invoke(app, ["ab-report", "--json"])  # no served database, no metrics: says so
    assert nothing.exit_code != 0 and "No metrics file" in nothing.output
    from hyde_tutor.config import Settings

    log = open_event_log(Settings())
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True))
    log.add_turn(TurnRecord(turn_id="t1", subject="s1", conversation_id="c", experiment="e", arm="hyde"))
    assert log.add_rating(RatingEvent(turn_id="t1", subject="s1", rating=1))
    log.close()
    out = CliRunner().invoke(app, ["ab-report", "--json"])
    assert out.exit_code == 0, out.output
    arm = json.loads(out.output)["periods"][0]["by_assigned_arm"]["arms"]["hyde"]
    assert (arm["thumbs_up"]["value"], arm["thumbs_up"]["n"]) == (1.0, 1)


def test_the_latency_line_keeps_a_long_arm_name_apart_from_its_figures() -> None:
    """Was ``unassigned10491.0 / 10491.0``: a 10-character arm name ran into its first figure."""
    log = MemoryEventLog()
    log.add_turn(TurnRecord(turn_id="t1", subject="s1", conversation_id="c", experiment=None, arm="unassigned",
                            seconds=10.4910))
    text = format_outcome_report(outcome_report(log))
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("unassigned") and " / " in ln and "|" in ln]
    assert line.split()[0] == "unassigned", line


def _served_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A served database in HYDE_DATA_DIR: 12 learners, turns of 5 to 6 minutes (the embedded model's), rated."""
    from hyde_tutor.config import Settings
    from hyde_tutor.experiment.sqlstore import database_url, open_event_log

    monkeypatch.setenv("HYDE_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("HYDE_SERVER__DATABASE_URL", raising=False)
    for key in ("HYDE_EXPERIMENT__ARMS", "HYDE_EXPERIMENT__HYDE_SHARE"):
        monkeypatch.delenv(key, raising=False)
    log = open_event_log(Settings())
    log.add_experiment_event(ExperimentEvent(change="start", experiment="e", hyde_share=0.5, enabled=True,
                                             timestamp=1))
    experiment = Experiment("e", hyde_share=0.5)
    for i in range(12):
        subject = f"s{i}"
        for j in range(2):
            tid = f"{subject}-{j}"
            log.add_turn(TurnRecord(turn_id=tid, subject=subject, conversation_id=subject, experiment="e",
                                    arm=experiment.arm(subject), timestamp=2, seconds=326.77 + i, first_token_s=14.9,
                                    grounded=j == 0, rephrase=False))
            log.add_rating(RatingEvent(turn_id=tid, subject=subject, rating=1 if (i + j) % 2 else -1))
    log.close()
    return database_url(Settings())


def test_ab_report_plot_draws_the_served_database_and_turns_read_in_seconds(tmp_path: Path, monkeypatch) -> None:
    """Was: ``ab-report --plot x.png`` on a served database said "No metrics file" (the plot was only for the
    metrics JSONL), and a 5-minute turn printed as "326770.0" milliseconds."""
    url = _served_db(tmp_path, monkeypatch)
    chart = tmp_path / "charts" / "x.png"
    out = CliRunner().invoke(app, ["ab-report", "--plot", str(chart)])
    assert out.exit_code == 0, out.output
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"chart: {chart}" in out.output
    assert "by assigned arm" in out.output and "326770" not in out.output
    (latency,) = [ln for ln in out.output.splitlines() if ln.startswith("  hyde ") and " | " in ln]
    turn, first_token, retrieval = latency.split(" | ")
    assert turn.split()[-1] == "s" and 320 < float(turn.split()[1]) < 340 and first_token == "14.90 / 14.90 s"
    again = CliRunner().invoke(app, ["ab-report", "--db", url, "--plot", str(tmp_path / "y.png"), "--json"])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "y.png").is_file() and json.loads(again.stdout)["turns"] == 24


def test_the_outcome_chart_draws_the_reports_figures(tmp_path: Path, monkeypatch) -> None:
    from hyde_tutor.evaluation.plots import OUTCOME_BARS, outcome_figure
    from hyde_tutor.experiment.sqlstore import open_event_log

    log = open_event_log(_served_db(tmp_path, monkeypatch))
    report = outcome_report(log)
    log.close()
    rates, latency = outcome_figure(report).axes
    arms = report["periods"][0]["by_assigned_arm"]["arms"]
    for arm in ("hyde", "raw"):
        heights = [b.get_height() for b in rates.patches if b.get_gid() == arm]
        assert heights == pytest.approx([arms[arm][name]["value"] for name, _ in OUTCOME_BARS])
    p50 = [b.get_height() for b in latency.patches if b.get_gid() == "p50"]
    assert p50 == pytest.approx([arms[a]["latency_ms"]["turn"]["p50"] / 1000 for a in ("hyde", "raw")])
    assert latency.get_ylabel() == "seconds per turn"


def test_the_outcome_chart_draws_a_rate_of_zero() -> None:
    """Wilson's lower bound of 0 of 20 computes a hair above 0, above the rate: a negative error bar matplotlib
    refused (a served database with no failed turn could not be plotted)."""
    from hyde_tutor.evaluation.plots import outcome_figure

    log = _timed_out_log()
    for i in range(8):  # 20 raw turns, none failed
        tid = f"extra-{i}"
        log.add_turn(TurnRecord(turn_id=tid, subject=tid, conversation_id=tid, experiment="e", arm="raw", timestamp=2))
    report = outcome_report(log)
    arms = report["periods"][0]["by_assigned_arm"]["arms"]
    assert arms["raw"]["failed"]["value"] == 0.0 and arms["raw"]["failed"]["low"] > 0.0  # the artefact
    rates, _ = outcome_figure(report).axes
    assert [b.get_height() for b in rates.patches if b.get_gid() == "raw"][-1] == 0.0


def test_a_report_written_before_a_metric_existed_still_prints() -> None:
    """A report saved as JSON before the abandoned rate existed (docs/recorded/simulated_experiment.json) printed
    a KeyError instead of the report; the missing metric now reads as «—»."""
    report = outcome_report(_log(200, 0.6, 0.6, share=0.5, seed=3))
    for period in report["periods"]:
        for view in (period["by_assigned_arm"], period["by_treatment_received"]):
            for arm in view["arms"].values():
                arm.pop("abandoned", None)
            view["differences"].pop("abandoned", None)
    text = format_outcome_report(report)
    assert re.search(r"abandoned\s+—\s+—", text)
