"""The relevance judge: sampled by turn id, capped, never failing a turn, its calls and tokens counted, and
replayable offline from ``judge`` recordings."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel

from hyde_tutor.config import JudgeSettings
from hyde_tutor.hyde.requests import render_recording
from hyde_tutor.llm.recorder import RecordingWriter
from hyde_tutor.llm.recordings import RecordingBook, ReplayModel
from hyde_tutor.experiment.events import MemoryEventLog, TurnRecord
from hyde_tutor.experiment.judge import JudgeBudget, RelevanceJudge, render_entries, sampled, verdict_json

QUESTION = "Как сказать, что я хочу поехать в Корею?"
ENTRIES = [{"id": "g-b01", "pattern": "-고 싶다", "name_ru": "желание",
            "examples": [{"ko": "가고 싶어요", "ru": "Хочу пойти"}]},
           {"id": "g-a01", "pattern": "-고", "name_ru": "перечисление"}]


def _turn(turn_id: str = "t-1") -> TurnRecord:
    return TurnRecord(turn_id=turn_id, subject="s", conversation_id="c", experiment="e", arm="hyde")


def _model(reply: str | Exception, seen: list | None = None, delay: float = 0.0) -> FunctionModel:
    async def answer(messages, info):  # noqa: ANN001, ANN202
        if seen is not None:
            seen.append((info.instructions, messages))
        if delay:
            await asyncio.sleep(delay)
        if isinstance(reply, Exception):
            raise reply
        return ModelResponse(parts=[TextPart(reply)])

    return FunctionModel(answer)


def test_a_sampled_turn_is_judged_and_its_call_and_tokens_counted() -> None:
    seen: list = []
    judge = RelevanceJudge(_model(verdict_json(2, "first entry is -고 싶다"), seen), JudgeSettings(share=1.0))
    outcome = asyncio.run(judge.maybe_judge(_turn(), QUESTION, ENTRIES))
    assert outcome is not None and outcome["judge_score"] == 1.0 and outcome["judge_calls"] == 1
    assert outcome["judge_tokens"] > 0 and judge.stats.judged == 1
    instructions, messages = seen[0]
    assert instructions.startswith(judge.system.text.strip()[:40])  # the prompt file, plus the JSON schema
    user = next(p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, UserPromptPart))
    assert QUESTION in user and "-고 싶다" in user and "가고 싶어요 — Хочу пойти" in user and "g-b01" not in user
    log = MemoryEventLog()
    log.add_turn(_turn())
    assert log.update_turn("t-1", **outcome) and log.turns()[0].judge_score == 1.0


def test_sampling_is_by_turn_id_at_the_configured_share() -> None:
    ids = [f"turn-{i}" for i in range(4000)]
    picked = [i for i in ids if sampled(i, 0.1)]
    assert 0.08 < len(picked) / len(ids) < 0.12
    assert picked == [i for i in ids if sampled(i, 0.1)]  # every worker picks the same turns
    assert not any(sampled(i, 0.0) for i in ids[:200])
    judge = RelevanceJudge(_model(verdict_json(2, "x")), JudgeSettings(share=0.0))
    assert asyncio.run(judge.maybe_judge(_turn(), QUESTION, ENTRIES)) is None
    always = RelevanceJudge(_model(verdict_json(2, "x")), JudgeSettings(share=1.0))
    assert asyncio.run(always.maybe_judge(_turn(), QUESTION, [])) is None  # nothing found: nothing to judge


@pytest.mark.parametrize("reply", [RuntimeError("provider down"), '{"score": 7, "reason": "?"}', "not json"])
def test_a_failed_judgement_never_raises_sets_no_score_and_is_counted(reply) -> None:  # noqa: ANN001
    judge = RelevanceJudge(_model(reply), JudgeSettings(share=1.0))
    outcome = asyncio.run(judge.maybe_judge(_turn(), QUESTION, ENTRIES))
    assert outcome == {"judge_calls": 1, "judge_tokens": 0}
    assert judge.stats.failed == 1 and judge.stats.last_error


def test_a_late_verdict_is_a_failure_after_the_timeout() -> None:
    judge = RelevanceJudge(_model(verdict_json(2, "x"), delay=5.0), JudgeSettings(share=1.0, timeout_s=0.05))
    outcome = asyncio.run(asyncio.wait_for(judge.maybe_judge(_turn(), QUESTION, ENTRIES), 3.0))
    assert outcome == {"judge_calls": 1, "judge_tokens": 0} and "Timeout" in (judge.stats.last_error or "")


def test_the_caps_stop_judging_and_reopen_when_the_window_passes() -> None:
    now = [1000.0]
    settings = JudgeSettings(share=1.0, max_calls_per_hour=2, max_calls_per_day=3, max_tokens_per_day=10_000)
    judge = RelevanceJudge(_model(verdict_json(1, "x")), settings, clock=lambda: now[0])
    run = lambda i: asyncio.run(judge.maybe_judge(_turn(f"t{i}"), QUESTION, ENTRIES))  # noqa: E731
    assert run(1) and run(2) and run(3) is None
    assert judge.stats.over_budget == {"max_calls_per_hour": 1}
    now[0] += 3601
    assert run(4) and run(5) is None and judge.stats.over_budget["max_calls_per_day"] == 1
    now[0] += 86400
    assert run(6)
    budget = JudgeBudget(JudgeSettings(max_tokens_per_day=100), clock=lambda: now[0])
    assert budget.take() is None
    budget.spend(150)
    assert budget.take() == "max_tokens_per_day"


def test_entries_are_rendered_without_ids_and_cut_to_top_n() -> None:
    text = render_entries(ENTRIES + [{"id": "x", "pattern": "third"}], 2)
    assert text.startswith("[1]\npattern: -고 싶다") and "[2]" in text and "third" not in text and "g-b01" not in text


def test_a_recorded_verdict_replays_offline_and_an_unrecorded_one_fails_softly(tmp_path: Path) -> None:
    path = tmp_path / "judge.jsonl"
    live = RelevanceJudge(_model(verdict_json(2, "the first entry")), JudgeSettings(share=1.0),
                          model_name="capable-model", recorder=RecordingWriter(path))
    assert asyncio.run(live.maybe_judge(_turn(), QUESTION, ENTRIES))["judge_score"] == 1.0
    row = json.loads(path.read_text(encoding="utf-8"))
    assert row["kind"] == "judge" and row["model"] == "capable-model"
    assert row["prompt_refs"] == ["judge_relevance@v1", "judge_relevance_request@v1"]
    book = RecordingBook.load([path], render=render_recording)
    assert len(book) == 1 and book.stale == 0  # the request rendered from today's prompt files matches
    replayed = RelevanceJudge(ReplayModel(book), JudgeSettings(share=1.0))
    outcome = asyncio.run(replayed.maybe_judge(_turn("t-2"), QUESTION, ENTRIES))
    assert outcome is not None and outcome["judge_score"] == 1.0
    other = asyncio.run(replayed.maybe_judge(_turn("t-3"), "Что значит -지만?", ENTRIES))
    assert other == {"judge_calls": 1, "judge_tokens": 0} and "NotRecorded" in (replayed.stats.last_error or "")
