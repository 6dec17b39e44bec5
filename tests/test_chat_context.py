"""A chat sends the model only what fits (issue 32) at the temperature it chose (issue 29).

Unit tests with FunctionModel; the slow test at the end drives a real chat with the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.tutor.chat import CHAT_TEMPERATURE, answer_turn, build_tutor_agent
from hyde_tutor.tutor.context_fit import FitContext, bounded_history, chatml_tokens, drop_last_entry
from hyde_tutor.plugin.toolset import TutorDeps

ANSWER = {"entry": 1, "korean": "가고 싶어요", "russian": "Хочу поехать."}


def _recording_model(seen: list[tuple[list, AgentInfo]]) -> FunctionModel:
    def fn(messages, info: AgentInfo) -> ModelResponse:
        seen.append((list(messages), info))
        return ModelResponse(parts=[TextPart(json.dumps(ANSWER, ensure_ascii=False))])

    return FunctionModel(fn)


def _hr(retriever) -> HydeRetriever:
    return HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]


def test_a_long_chat_sends_only_the_last_exchange_and_the_current_message(retriever) -> None:
    seen: list = []
    agent = build_tutor_agent(_recording_model(seen), mode="retrieve-first", grounded=True)
    deps, history = TutorDeps(retriever=_hr(retriever)), ()
    for i in range(6):
        turn = answer_turn(agent, deps, f"Вопрос номер {i}: как сказать, что хочу поехать?", history)
        assert turn.model_error is None
        history = turn.messages
    messages, info = seen[-1]
    prompts = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["Вопрос номер 4: как сказать, что хочу поехать?", "Вопрос номер 5: как сказать, что хочу поехать?"]
    assert len(history) == 12  # the stored conversation keeps every turn; only the request is bounded
    assert turn.prompt_tokens is not None and turn.prompt_tokens < chatml_tokens(info.instructions or "", list(history), None)


def test_earlier_tool_returns_are_left_out_of_the_request() -> None:
    earlier = [ModelRequest(parts=[UserPromptPart("Хочу?")]),
               ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хочу"}, tool_call_id="c1")]),
               ModelRequest(parts=[ToolReturnPart("grammar_search", {"results": ["ДЛИННАЯ СТАТЬЯ"]}, tool_call_id="c1")]),
               ModelResponse(parts=[TextPart("Скажите 가고 싶어요.")]),
               ModelRequest(parts=[UserPromptPart("А в прошедшем?")])]
    kept = bounded_history(earlier, 1)
    assert [type(m).__name__ for m in kept] == ["ModelRequest", "ModelResponse", "ModelRequest"]
    assert "ДЛИННАЯ" not in repr(kept) and kept[1].parts[0].content == "Скажите 가고 싶어요."
    assert bounded_history(earlier, 0) == [earlier[-1]]


def test_a_request_that_does_not_fit_drops_the_oldest_exchange_then_the_last_entries(retriever) -> None:
    seen: list = []
    fit = FitContext(history_turns=3, n_ctx=1, answer_tokens=0)  # nothing fits: everything that may go, goes
    agent = build_tutor_agent(_recording_model(seen), mode="retrieve-first", grounded=True, fit=fit)
    deps, history = TutorDeps(retriever=_hr(retriever)), ()
    for question in ("Как сказать, что хочу поехать?", "Как сказать «чуть не опоздал»?"):
        turn = answer_turn(agent, deps, question, history)
        history = turn.messages
    messages, info = seen[-1]
    assert len(messages) == 1 and messages[0].parts[0].content == "Как сказать «чуть не опоздал»?"
    assert "1. " in (info.instructions or "") and "\n2. " not in (info.instructions or "")  # only the first entry left
    assert len(deps.found) >= 2  # the search found more; the learner's fallback would still see them


def test_dropping_the_last_entry_keeps_the_numbering_and_the_first_entry() -> None:
    from hyde_tutor.corpus.rendering import reference_block

    text = "Инструкции.\n\nНайденные статьи. " + reference_block("1. -고 싶다: хотеть\n2. -았/었-: прошедшее\n3. 을/를")
    once = drop_last_entry(text)
    assert once is not None and "3. 을/를" not in once and "2. -았/었-" in once and once.endswith("</справочник>")
    assert drop_last_entry(drop_last_entry(once) or "") is None
    assert drop_last_entry("без статей") is None


def test_the_turns_model_call_carries_the_chats_temperature(retriever) -> None:
    seen: list = []
    agent = build_tutor_agent(_recording_model(seen), mode="retrieve-first", grounded=True)
    answer_turn(agent, TutorDeps(retriever=_hr(retriever)), "Как сказать, что хочу поехать?")
    assert seen[-1][1].model_settings["temperature"] == CHAT_TEMPERATURE == 0.0
    warm = build_tutor_agent(_recording_model(seen), mode="retrieve-first", grounded=True, temperature=0.4)
    answer_turn(warm, TutorDeps(retriever=_hr(retriever)), "Как сказать, что хочу поехать?")
    assert seen[-1][1].model_settings["temperature"] == 0.4


@pytest.mark.slow
def test_twelve_questions_in_one_chat_with_the_embedded_model_are_all_answered(long_chat_questions: list[str]) -> None:
    """Issue 32: the whole history used to go to the 2048-token model, and from the fourth question on turns
    ended in ModelContextWindowExceededError. Every turn is now answered, and the request stays bounded."""
    from hyde_tutor.config import Settings
    from hyde_tutor.llm.backends import make_llm

    questions = long_chat_questions
    settings = Settings()
    llm = make_llm(settings)
    hr = HydeRetriever.from_settings(settings)
    try:
        agent = build_tutor_agent(llm, mode="auto")
        deps, history, turns = TutorDeps(retriever=hr), (), []
        for question in questions[:12]:
            turn = answer_turn(agent, deps, question, history)
            turns.append(turn)
            history = turn.messages
    finally:
        hr.close()
        llm.close()
    assert [t.model_error for t in turns] == [None] * 12
    assert len(history) >= 24  # the conversation itself was kept whole
    budget = settings.llm.n_ctx - settings.llm.max_tokens
    assert all(t.prompt_tokens is not None and t.prompt_tokens <= budget for t in turns), [t.prompt_tokens for t in turns]
    assert max(t.prompt_tokens for t in turns[6:]) <= max(t.prompt_tokens for t in turns[:6]) + 400  # no growth with turns


def test_an_earlier_reply_reaches_the_model_as_its_head_only() -> None:
    reply = "Подойдёт **-고 싶다 — желание**.\nПо-корейски: 부산에 가고 싶어요\n" + "Длинное объяснение. " * 40
    kept = bounded_history([ModelRequest(parts=[UserPromptPart("Хочу в Пусан?")]),
                            ModelResponse(parts=[TextPart(reply)]),
                            ModelRequest(parts=[UserPromptPart("А в прошедшем?")])], 1)
    assert kept[1].parts[0].content == "Подойдёт **-고 싶다 — желание**.\nПо-корейски: 부산에 가고 싶어요"


def test_a_structured_answer_gets_a_cap_its_longest_fields_fit() -> None:
    from hyde_tutor.llm.backends import LLMBackend
    from hyde_tutor.tutor.grounding import ANSWER_MAX_TOKENS

    local = LLMBackend(FunctionModel(lambda m, i: None), "local:qwen", "local", extra_settings={"extra_body": {"max_tokens": 200}})
    agent = build_tutor_agent(local, mode="auto")
    assert agent.model_settings["extra_body"]["max_tokens"] == ANSWER_MAX_TOKENS == 320  # the hypotheses keep 200
    assert local.extra_settings["extra_body"]["max_tokens"] == 200


def test_the_structured_tutor_shows_the_model_a_shorter_entry_text(retriever) -> None:
    from hyde_tutor.plugin.capabilities import GROUNDED_ENTRY_CHARS, HydeTutor

    assert HydeTutor(mode="retrieve-first", grounded=True)._retrieve.max_chars == GROUNDED_ENTRY_CHARS == 900
    assert HydeTutor(mode="retrieve-first")._retrieve.max_chars == 1800  # a capable model keeps the longer text
