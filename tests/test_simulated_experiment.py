"""The simulated experiment (a simulation, not learners) on a small slice: real split, real toolset and store, the
recorded agent replayed; ratings follow the qrels; the A/A variant searches plain in both arms; dropping learners
breaks the split. The embedder here is the tests' hash embedder (the script uses the real one)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor import EdgeStore, Retriever
from hyde_tutor.config import Settings
from hyde_tutor.corpus.ingest import IngestRequest, ingest_file
from hyde_tutor.experiment.abreport import outcome_report
from hyde_tutor.evaluation.agent_replay import load_agent_turns
from hyde_tutor.experiment.simulation import SimulationConfig, drop_learners, load_questions, simulate
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.hypotheses import HypothesisGenerator
from hyde_tutor.llm.backends import LLMBackend
from hyde_tutor.experiment.assignment import Experiment

from .conftest import DATA


@pytest.fixture()
def sim_retriever(tmp_path: Path, hash_embedder, bm25) -> Iterator[HydeRetriever]:  # noqa: ANN001
    store = EdgeStore(tmp_path / "edge")
    for collection in ("grammar", "docs"):
        ingest_file(DATA / f"{collection}.jsonl", IngestRequest(collection=collection, progress=False), store, hash_embedder, bm25)
    backend = LLMBackend(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("Конструкция: -고\nПример: 먹고")])),
                         "fake", "test")
    hr = HydeRetriever(Retriever(store, hash_embedder, bm25),
                       lambda d: HypothesisGenerator.for_backend(backend, d, llm=Settings().llm))
    yield hr
    hr.close()


def _run(hr: HydeRetriever, **config):  # noqa: ANN003, ANN202
    turns = load_agent_turns(sorted((DATA / "recordings" / "agent").glob("*.jsonl")))
    questions = load_questions(DATA / "eval", turns, sets=("grammar_holdout", "followups"))
    log, stats = asyncio.run(simulate(hr, turns, questions, SimulationConfig(**{"learners": 24, "seed": 3, **config})))
    return log, stats, {(q.set_name, q.id): q for q in questions}


def test_a_simulated_run_writes_real_turns_ratings_from_the_qrels_and_the_real_split(sim_retriever) -> None:  # noqa: ANN001
    log, stats, questions = _run(sim_retriever)
    turns = log.turns()
    assert stats.not_recorded == 0 and stats.stale == 0 and stats.served == len(turns) >= 48
    experiment = Experiment("hyde-vs-raw", hyde_share=0.5)
    assert {t.arm for t in turns} == {"hyde", "raw"}
    assert log.experiment_events()[0].actor == "simulation"
    rated = 0
    for t in turns:
        assert t.arm == experiment.arm(t.subject) and not t.failed
        records = [r for _, r in log.retrievals(t.turn_id)]
        assert records and all(r.arm == t.arm and r.use_hyde == (t.arm == "hyde") for r in records)
        grades = next(q.grades for (s, i), q in questions.items() if t.conversation_id.endswith(f"-{s}-{i}"))
        top_relevant = bool(t.found_ids) and t.found_ids[0] in grades
        if t.rating is not None:
            rated += 1
            assert t.rating == (1 if top_relevant else -1)
        assert t.grounded == any(f in grades for f in t.found_ids)
        assert not (top_relevant and t.rephrase)
    assert 0.4 < rated / len(turns) < 0.8  # 60 % rated
    hyde_records = [r for t in turns if t.arm == "hyde" for _, r in log.retrievals(t.turn_id)]
    assert any("agent" in r.hypothesis_sources for r in hyde_records)  # the agent's own hypothesis was searched
    report = outcome_report(log)
    period = report["periods"][0]
    assert set(period["by_assigned_arm"]["arms"]) == {"hyde", "raw"} and period["srm"]["p_value"] is not None
    assert period["by_assigned_arm"]["arms"]["hyde"]["cost_per_turn"]["hypothesis_tokens"] > 0


def test_the_a_a_run_searches_plain_in_both_arms_for_the_same_learners_and_questions(sim_retriever) -> None:  # noqa: ANN001
    log, _, _ = _run(sim_retriever, plain_both=True, learners=12)
    served, _, _ = _run(sim_retriever, learners=12)
    asked = lambda lg: sorted((t.turn_id, t.conversation_id, t.arm) for t in lg.turns())  # noqa: E731
    assert asked(log) == asked(served)  # a paired comparison: only the treatment differs
    hyde_records = [r for t in log.turns() if t.arm == "hyde" for _, r in log.retrievals(t.turn_id)]
    assert hyde_records and not any(r.used_hyde for r in hyde_records)
    assert all(r.n_hypotheses == 0 for r in hyde_records)


def test_dropping_learners_of_one_arm_breaks_the_split(sim_retriever) -> None:  # noqa: ANN001
    """The copy keeps everything but the dropped learners' turns, retrievals and ratings, and the SRM check run
    over it raises the alarm that the whole log does not (the test never ran the check before)."""
    log, _, _ = _run(sim_retriever, learners=40)
    skewed, dropped = drop_learners(log, "raw", 0.9, seed=1)  # 40 learners: a small loss hides
    raw_before = {t.subject for t in log.turns() if t.arm == "raw"}
    raw_after = {t.subject for t in skewed.turns() if t.arm == "raw"}
    assert dropped == round(0.9 * len(raw_before)) and len(raw_after) == len(raw_before) - dropped
    assert {t.subject for t in skewed.turns() if t.arm == "hyde"} == {t.subject for t in log.turns() if t.arm == "hyde"}
    kept = {t.turn_id for t in skewed.turns()}
    assert {tid for tid, _ in skewed.retrievals()} == kept
    assert skewed.ratings() == [r for r in log.ratings() if r.turn_id in kept] and skewed.ratings()
    assert skewed.experiment_events() == log.experiment_events()
    whole = outcome_report(log)
    assert not whole["periods"][0]["srm"]["mismatch"] and not whole["warnings"]
    broken = outcome_report(skewed)
    srm = broken["periods"][0]["srm"]
    assert srm["observed"]["raw"] == len(raw_after) and srm["mismatch"] and srm["p_value"] < 0.001
    assert any("SAMPLE RATIO MISMATCH" in w for w in broken["warnings"])


def test_the_top_found_entry_follows_the_agents_call_order_not_the_finishing_order() -> None:
    """Two searches of one response run concurrently; ``TutorDeps.found`` keeps the order they finished in, which
    made the simulated reply's entry (and the known effect) change between runs."""
    from pydantic_ai.messages import ModelRequest, ToolCallPart, ToolReturnPart

    from hyde_tutor.experiment.simulation import _found_in_call_order

    messages = [ModelResponse(parts=[ToolCallPart("docs_search", {}, tool_call_id="call-0"),
                                     ToolCallPart("grammar_search", {}, tool_call_id="call-1")]),
                ModelRequest(parts=[ToolReturnPart("grammar_search", {"results": [{"id": "g-1"}]}, tool_call_id="call-1"),
                                    ToolReturnPart("docs_search", {"results": [{"id": "d-1"}, {"id": "d-2"}]},
                                                   tool_call_id="call-0")])]
    assert _found_in_call_order(messages) == ["d-1", "d-2", "g-1"]
