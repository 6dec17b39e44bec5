"""Replies teach from the entries found: structured answers rendered with the entry, free text guarded."""

from __future__ import annotations

import json

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.plugin.chat import answer_turn, build_tutor_agent
from hyde_tutor.plugin.grounding import REPLACED_LINE, GroundedAnswer, ground_reply, render_answer
from hyde_tutor.plugin.toolset import TutorDeps

WANT = {"id": "g-b01", "pattern": "-고 싶다", "name": "желание «хотеть»", "explanation": "Присоединяется к основе глагола.",
        "examples": [{"ko": "주말에 부산에 가고 싶어요.", "ru": "На выходных я хочу поехать в Пусан."}]}
ALMOST = {"id": "g-c11", "pattern": "-(으)ㄹ 뻔하다", "name": "чуть не", "explanation": "Почти случилось.",
          "examples": [{"ko": "늦을 뻔했어요.", "ru": "Я чуть не опоздал."}]}


def test_a_reply_without_korean_is_replaced_by_the_rendered_entry() -> None:
    text, replaced = ground_reply("Нужно сказать: я хочу поехать в Пусан.", [WANT, ALMOST])
    assert replaced and text.startswith(REPLACED_LINE)
    assert "-고 싶다" in text and "주말에 부산에 가고 싶어요." in text


def test_a_refusal_while_entries_were_found_is_replaced_too() -> None:
    text, replaced = ground_reply("Извините, но в справочнике этого нет.", [ALMOST])
    assert replaced and "늦을 뻔했어요." in text


def test_a_reply_that_teaches_from_a_found_entry_is_kept() -> None:
    reply = "Используйте -(으)ㄹ 뻔하다: 기차를 놓칠 뻔했어요. — Я чуть не опоздал на поезд."
    assert ground_reply(reply, [WANT, ALMOST]) == (reply, False)
    assert ground_reply("Просто ответ.", []) == ("Просто ответ.", False)  # nothing found: nothing to teach from


def test_a_structured_answer_is_rendered_with_the_chosen_entry_and_its_examples() -> None:
    text = render_answer(GroundedAnswer(entry=2, korean="기차를 놓칠 뻔했어요.", explanation="Значит «чуть не»: "
                                        "присоединяется к основе глагола, обычно в прошедшем времени."), [WANT, ALMOST])
    assert "-(으)ㄹ 뻔하다" in text and "기차를 놓칠 뻔했어요." in text and "늦을 뻔했어요." in text


def test_a_weak_structured_answer_still_names_the_entry_and_gives_korean() -> None:
    """What the 1.5B model wrote: an entry number out of range, 'Korean' without Hangul, English."""
    text = render_answer(GroundedAnswer(entry=5, korean="을", explanation="I want to go to Pusan."), [WANT, ALMOST])
    assert text.startswith("Подойдёт **-고 싶다")  # out of range: the top entry
    assert "По-корейски: 을" not in text and "I want" not in text
    assert "Присоединяется к основе глагола." in text and "주말에 부산에 가고 싶어요." in text


def test_a_korean_sentence_not_built_on_the_chosen_entry_is_not_shown() -> None:
    """The 1.5B model wrote «그러니까 가야해요» ("so I have to go") for 을/를, -았/었었- and -(으)려고 하다 alike in
    one transcript; shown as «По-корейски: …» it taught a sentence the entry does not explain."""
    objects = {"id": "g-d15", "pattern": "을/를", "name": "частица прямого дополнения",
               "examples": [{"ko": "커피를 마셔요.", "ru": "Я пью кофе."}]}
    explanation = "Частица отмечает прямое дополнение: после согласной 을, после гласной 를."
    bogus = render_answer(GroundedAnswer(entry=1, korean="그러니까 가야해요", explanation=explanation), [objects])
    assert "그러니까" not in bogus and "커피를 마셔요." in bogus  # the entry's own example stays
    fitting = render_answer(GroundedAnswer(entry=1, korean="저는 부산을 좋아해요.", explanation=explanation), [objects])
    assert "По-корейски: 저는 부산을 좋아해요." in fitting
    contracted = render_answer(GroundedAnswer(entry=2, korean="기차를 놓칠 뻔했어요.", explanation=explanation),
                               [WANT, ALMOST])
    assert "По-корейски: 기차를 놓칠 뻔했어요." in contracted


def test_html_entities_in_a_reply_are_unescaped() -> None:
    text = render_answer(GroundedAnswer(entry=1, korean="&#34;가고 싶어요.&#34;", explanation="x"), [WANT])
    assert '"가고 싶어요."' in text and "&#34;" not in text


def _structured(reply: dict):
    def fn(messages, info: AgentInfo):
        return ModelResponse(parts=[TextPart(json.dumps(reply, ensure_ascii=False))])

    return FunctionModel(fn)


def test_the_retrieve_first_chat_turn_renders_a_grounded_answer(retriever) -> None:
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    agent = build_tutor_agent(_structured({"entry": 1, "korean": "가고 싶어요", "explanation": "Желание: основа "
                                           "глагола плюс -고 싶다, вежливо -고 싶어요."}), mode="retrieve-first", grounded=True)
    turn = answer_turn(agent, TutorDeps(retriever=hr), "Как сказать, что хочу поехать?")
    assert turn.model_error is None and turn.found
    assert turn.text.startswith("Подойдёт **") and "По-корейски: 가고 싶어요" in turn.text
    assert turn.answer is not None and (turn.answer.entry, turn.answer.korean) == (1, "가고 싶어요")  # kept for the app


def test_the_tools_chat_turn_replaces_a_reply_without_korean(retriever) -> None:
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]

    def capable(messages, info: AgentInfo):
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("Нужно сказать: я хочу поехать в Пусан.")])
        return ModelResponse(parts=[ToolCallPart("grammar_search", {"query": "хочу поехать"})])

    turn = answer_turn(build_tutor_agent(FunctionModel(capable), mode="tools"), TutorDeps(retriever=hr), "Хочу?")
    assert turn.replaced and turn.text.startswith(REPLACED_LINE) and any("가" <= c <= "힣" for c in turn.text)
    assert turn.answer is None  # free text: no structured answer


def test_a_conjugated_pattern_counts_as_naming_the_entry() -> None:
    from hyde_tutor.plugin.grounding import names_an_entry

    assert names_an_entry("Скажите: 부산에 가고 싶어요.", [WANT])
    assert names_an_entry("기차를 놓칠 뻔했어요.", [ALMOST])
    assert not names_an_entry("감사합니다.", [WANT, ALMOST])


def test_the_embedded_model_gets_the_grounded_agent_by_default() -> None:
    from pydantic_ai import NativeOutput

    from hyde_tutor.llm.backends import LLMBackend

    local = build_tutor_agent(LLMBackend(FunctionModel(lambda m, i: None), "local:qwen", "local"), mode="auto")
    assert isinstance(local.output_type, NativeOutput)
    capable = build_tutor_agent(LLMBackend(FunctionModel(lambda m, i: None), "x", "openai-compatible"), mode="auto")
    assert capable.output_type is str


def test_a_search_first_chat_shows_the_entries_before_the_model_answers(retriever) -> None:
    from hyde_tutor.plugin.chat import chat_loop
    from hyde_tutor.plugin.monitor import Monitor

    events: list[str] = []
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]

    def model(messages, info: AgentInfo):
        events.append("MODEL")
        return ModelResponse(parts=[TextPart(json.dumps({"entry": 1, "korean": "가고 싶어요, 갈 수 있어요",
                                                         "explanation": "x"}))])

    agent = build_tutor_agent(FunctionModel(model), mode="retrieve-first", grounded=True)
    deps = TutorDeps(retriever=hr, monitor=Monitor())
    lines = iter(["хочу поехать", None])
    chat_loop(agent, deps, lambda: next(lines), events.append, search_first=True)
    found = next(i for i, e in enumerate(events) if e.startswith("  найдено: "))
    assert found < events.index("MODEL")  # shown before the model was asked
    assert sum(e.startswith("  ← grammar_search") for e in events) == 1  # searched once, not again in the run
    assert "По-корейски: 가고 싶어요, 갈 수 있어요" in events[-1]


def test_the_chat_streams_a_reply_and_reports_time_to_first_token(retriever) -> None:
    import asyncio
    import time

    from pydantic_ai.models.function import DeltaToolCall

    from hyde_tutor.plugin.chat import chat_loop

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    arrivals: list[tuple[float, str]] = []

    async def slow_tokens(messages, info):
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            for token in ["Используйте -고 싶다: ", "부산에 ", "가고 ", "싶어요."]:
                await asyncio.sleep(0.15)
                yield token
        else:
            yield {0: DeltaToolCall(name="grammar_search", json_args='{"query": "хочу поехать"}')}

    agent = build_tutor_agent(FunctionModel(stream_function=slow_tokens), mode="tools")
    lines = iter(["Как сказать, что хочу поехать?", None])
    out: list[str] = []
    started = time.perf_counter()
    chat_loop(agent, TutorDeps(retriever=hr), lambda: next(lines), out.append, show_time=True,
              stream=lambda t: arrivals.append((time.perf_counter() - started, t)))
    assert [t for _, t in arrivals] == ["Используйте -고 싶다: ", "부산에 ", "가고 ", "싶어요."]
    assert arrivals[-1][0] - arrivals[0][0] >= 0.4  # tokens arrived one by one, not at the end
    assert "первый токен через" in out[-1]
    assert "Используйте -고 싶다" not in "".join(out[:-1])  # not printed twice


def test_when_the_model_passes_over_the_top_entry_it_is_shown_too() -> None:
    text = render_answer(GroundedAnswer(entry=2, korean="늦을 뻔했어요", explanation="Почти случилось, но нет: "
                                        "так говорят о том, что едва не произошло."), [WANT, ALMOST])
    assert text.startswith("Подойдёт **-(으)ㄹ 뻔하다")
    assert text.splitlines()[-1] == "См. также **-고 싶다 — желание «хотеть»**. 주말에 부산에 가고 싶어요. — На выходных я хочу поехать в Пусан."
    same = render_answer(GroundedAnswer(entry=1, korean="가고 싶어요", explanation="x"), [WANT, ALMOST])
    assert "См. также" not in same


def test_the_headline_follows_the_rule_whatever_the_model_chose() -> None:
    from hyde_tutor.plugin.grounding import SURE_MARGIN, headline_entry

    second = GroundedAnswer(entry=2, korean="늦을 뻔했어요", explanation="Почти случилось: -(으)ㄹ 뻔하다.")
    found = [WANT, ALMOST]
    assert headline_entry(second, found, "model") == 2
    assert headline_entry(second, found, "top") == 1
    assert headline_entry(second, found, "unsure", SURE_MARGIN) == 1  # the search is sure: its top entry
    assert headline_entry(second, found, "unsure", SURE_MARGIN / 2) == 2  # unsure: the model chooses
    assert headline_entry(second, found, "unsure", None) == 2
    assert headline_entry(GroundedAnswer(entry=5, korean="", explanation=""), found, "model") == 1  # out of range
    text = render_answer(second, found, headline=1)
    assert text.startswith("Подойдёт **-고 싶다") and "뻔" not in text.split("См. также")[0]  # nothing of the other entry
    assert "Присоединяется к основе глагола." in text  # the headline entry's own explanation


def test_the_chat_turns_headline_follows_the_rule(retriever) -> None:
    from hyde_tutor.corpus.rendering import distinct_entries
    from hyde_tutor.plugin.grounding import SURE_MARGIN, _name

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    agent = build_tutor_agent(_structured({"entry": 2, "korean": "가고 싶어요", "explanation": "Так говорят о желании."}),
                              mode="retrieve-first", grounded=True)
    for rule in ("model", "top", "unsure"):
        deps = TutorDeps(retriever=hr)
        turn = answer_turn(agent, deps, "Как сказать, что хочу поехать?", headline=rule)
        found = distinct_entries(turn.found)
        margin = deps.margins[str(found[0]["id"])]
        sure = rule == "top" or (rule == "unsure" and margin is not None and margin >= SURE_MARGIN)
        want = found[0] if sure else found[1]
        assert turn.text.startswith(f"Подойдёт **{_name(want)}**"), (rule, margin)
