"""Replies teach from the entries found: structured answers rendered with the entry, free text guarded."""

from __future__ import annotations

import json

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.config import HydeSettings
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent
from hyde_tutor.tutor.grounding import REPLACED_LINE, GroundedAnswer, ground_reply, render_answer

SENTENCE_LINE = CHECKED_LINE = "Для вашей ситуации (фраза модели, проверена автоматически):"


def agree(korean: str, russian: str) -> bool:
    """A meaning check that passes everything (the real one: tests/test_reply_checks.py)."""
    return True
from hyde_tutor.plugin.toolset import TutorDeps

WANT = {"id": "g-b01", "pattern": "-고 싶다", "name": "желание «хотеть»", "explanation": "Присоединяется к основе глагола.",
        "examples": [{"ko": "주말에 부산에 가고 싶어요.", "ru": "На выходных я хочу поехать в Пусан."}]}
ALMOST = {"id": "g-c11", "pattern": "-(으)ㄹ 뻔하다", "name": "чуть не", "explanation": "Почти случилось.",
          "examples": [{"ko": "늦을 뻔했어요.", "ru": "Я чуть не опоздал."},
                       {"ko": "늦잠을 자서 비행기를 놓칠 뻔했어요.", "ru": "Я проспал и чуть не опоздал на самолёт."}]}


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
    text = render_answer(GroundedAnswer(entry=2, korean="기차를 놓칠 뻔했어요.", russian="Я чуть не опоздал на поезд."),
                         [WANT, ALMOST], agrees=agree)
    assert text.splitlines() == ["Подойдёт **-(으)ㄹ 뻔하다 — чуть не**.", "Почти случилось.", "Пример: 늦을 뻔했어요. — Я чуть не опоздал.",
                                 "Пример: 늦잠을 자서 비행기를 놓칠 뻔했어요. — Я проспал и чуть не опоздал на самолёт.",
                                 f"{CHECKED_LINE} 기차를 놓칠 뻔했어요. — Я чуть не опоздал на поезд.",
                                 "См. также **-고 싶다 — желание «хотеть»**. 주말에 부산에 가고 싶어요. — На выходных я хочу поехать в Пусан."]


def test_a_weak_structured_answer_still_names_the_entry_and_gives_korean() -> None:
    """What the 1.5B model wrote: an entry number out of range, 'Korean' without Hangul, English."""
    text = render_answer(GroundedAnswer(entry=5, korean="을", russian="I want to go to Pusan."), [WANT, ALMOST],
                         agrees=agree)
    assert text.startswith("Подойдёт **-고 싶다")  # out of range: the top entry
    assert SENTENCE_LINE not in text and "I want" not in text
    assert "Присоединяется к основе глагола." in text and "주말에 부산에 가고 싶어요." in text
    unchecked = render_answer(GroundedAnswer(entry=1, korean="서울에 가고 싶어요.", russian="Хочу в Сеул."), [WANT])
    assert "서울" not in unchecked and "Сеул" not in unchecked  # no meaning check given: its meaning is unchecked


def _shown(korean: str, entry: dict = WANT, earlier: tuple[str, ...] = ()) -> bool:
    """Whether the model's sentence reaches the reply (the entry's own text and example always do)."""
    text = render_answer(GroundedAnswer(entry=1, korean=korean, russian="Перевод."), [entry], earlier=earlier,
                         agrees=agree)
    assert all(ex["ko"] in text for ex in entry["examples"]) and text.startswith(f"Подойдёт **{entry['pattern']}")
    return SENTENCE_LINE in text


def test_a_model_sentence_with_cyrillic_or_latin_inside_is_replaced_by_the_entrys_example() -> None:
    """The 1.5B model wrote «나는 그 цвет을 피우는 중입니다» for -는 동안."""
    while_ = {"id": "g-a28", "pattern": "-는 동안", "name": "пока", "explanation": "Пока идёт действие.",
              "examples": [{"ko": "제가 없는 동안 강아지를 좀 봐 주세요.", "ru": "Пока меня нет, присмотри за собакой."}]}
    assert not _shown("제가 없는 동안 그 цвет을 봐요.", while_)
    assert not _shown("제가 없는 동안 TV를 봐요.", while_)
    assert not _shown("제가 없는 동안 책을 읽어요 да.", while_)  # a whole Korean sentence, and a Russian word
    assert _shown("제가 없는 동안 책을 읽어요.", while_)


def test_a_model_sentence_without_the_entrys_pattern_is_replaced_by_the_entrys_example() -> None:
    """«그러니까 가야해요» for 을/를; «부산에 가고 있어요» shares the syllable 고 with -고 싶다, not the pattern."""
    assert not _shown("부산에 가고 있어요.")
    assert not _shown("여기서 가요.")
    assert _shown("부산에 가고 싶어요.") and _shown("부산에 가고 싶었어요.")  # conjugated: the analyser finds it
    objects = {"id": "g-d15", "pattern": "을/를", "name": "частица прямого дополнения",
               "examples": [{"ko": "저는 아침에 커피를 마셔요.", "ru": "Я пью кофе."}]}
    assert not _shown("그러니까 가야해요", objects) and _shown("저는 부산을 좋아해요.", objects)
    assert _shown("기차를 놓칠 뻔했어요.", ALMOST) and not _shown("기차를 놓쳤어요.", ALMOST)


def test_a_model_sentence_repeating_an_earlier_turn_is_replaced_by_the_entrys_example() -> None:
    """Turn 3 of the issue's chat showed turn 2's «그저 가고 싶었어요» again, for a new question."""
    assert not _shown("그저 가고 싶었어요.", earlier=("그저 가고 싶었어요",))
    assert not _shown("주말에 부산에 가고 싶어요.")  # the entry's own example: already shown above it
    assert _shown("그저 가고 싶었어요.", earlier=("부산에 가고 싶어요.",))


def test_a_model_sentence_cut_off_or_longer_than_the_examples_is_dropped() -> None:
    assert not _shown("부산에 가고 싶")  # a token cap cut it mid-word: no final ending
    assert not _shown("부산에 가고 싶어요. 그리고 서울에도 가고 싶어요.")  # one sentence only
    assert not _shown("저는 이번 주말에 친구들하고 같이 부산에 가고 싶어요.")  # longer than the entry's example


def test_a_cut_falls_at_a_sentence_end() -> None:
    """The entry's text is cut to whole sentences (it read «Фраза зак»), and a translation cut by its cap too."""
    from hyde_tutor.tutor.grounding import RUSSIAN_CHARS, clip_sentences

    long = {**WANT, "explanation": "Первое предложение. " + "Второе длинное предложение про основу. " * 12 + "Обрыв сло…"}
    text = render_answer(GroundedAnswer(entry=1, korean="부산에 가고 싶어요.", russian="Хочу в Пусан."), [long], agrees=agree)
    explanation = text.splitlines()[1]
    assert explanation.startswith("Первое предложение.") and explanation.endswith("основу.") and "Обрыв" not in text
    assert clip_sentences("Одно. Два слова без конца", 100) == "Одно."
    assert clip_sentences("О себе (뭐 하고 싶어요?); о других -고 싶어하다. Прошедшее — -고 싶었", 100) == (
        "О себе (뭐 하고 싶어요?); о других -고 싶어하다.")  # a ? inside brackets ends no sentence
    capped = ("Я хочу поехать в Пусан. " + "Очень " * 30)[:RUSSIAN_CHARS]
    text = render_answer(GroundedAnswer(entry=1, korean="부산에 가고 싶어요.", russian=capped), [WANT], agrees=agree)
    assert text.splitlines()[-1].endswith("부산에 가고 싶어요. — Я хочу поехать в Пусан.")


def test_text_is_unescaped_so_the_page_escapes_it_once() -> None:
    import html

    text = render_answer(GroundedAnswer(entry=1, korean="&amp;#34;부산에 가고 싶어요.&#34;",
                                        russian="&#34;Хочу в Пусан.&amp;quot;"), [WANT], agrees=agree)
    assert "&#34;" not in text and "&amp;" not in text and "&quot;" not in text
    assert '"Хочу в Пусан."' in text and "부산에 가고 싶어요." in text
    assert "&amp;" not in html.escape(text)  # escaped once where shown: a " reads as "


def test_the_parts_known_before_the_model_begin_the_reply() -> None:
    """For streaming: the entry's parts are final once the entry is chosen, the model's sentence comes after."""
    from hyde_tutor.tutor.grounding import SURE_MARGIN, early_headline, reply_parts

    assert early_headline([WANT, ALMOST], SURE_MARGIN) == 1 and early_headline([WANT, ALMOST], 0.01) is None
    early = reply_parts(None, [WANT, ALMOST], margin=SURE_MARGIN)
    full = reply_parts(GroundedAnswer(entry=2, korean="부산에 가고 싶어요.", russian="Хочу в Пусан."), [WANT, ALMOST],
                       margin=SURE_MARGIN, agrees=agree)
    assert full[:len(early)] == early and [p.kind for p in early] == ["headline", "explanation", "example"]
    assert [(p.kind, p.source) for p in full[len(early):]] == [("sentence", "model")]


def _structured(reply: dict):
    def fn(messages, info: AgentInfo):
        return ModelResponse(parts=[TextPart(json.dumps(reply, ensure_ascii=False))])

    return FunctionModel(fn)


def test_the_retrieve_first_chat_turn_renders_a_grounded_answer(retriever) -> None:
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    def model(messages, info: AgentInfo):  # picks the -고 싶다 entry, wherever the search ranked it
        number = next(line.split(".")[0] for line in (info.instructions or "").splitlines() if "-고 싶다" in line)
        return ModelResponse(parts=[TextPart(json.dumps({"entry": int(number), "korean": "가고 싶어요",
                                                         "russian": "Хочу поехать."}, ensure_ascii=False))])

    agent = build_tutor_agent(FunctionModel(model), mode="retrieve-first", grounded=True)
    turn = answer_turn(agent, TutorDeps(retriever=hr), "Как сказать, что хочу поехать?", headline="model")
    assert turn.model_error is None and turn.found
    assert turn.text.startswith("Подойдёт **-고 싶다")
    assert "가고 싶어요" not in turn.text  # the test's hash embedder sees no agreement in meaning: not shown
    assert turn.text == "\n".join(p.text for p in turn.parts)
    assert turn.answer is not None and turn.answer.korean == "가고 싶어요"  # kept for the app


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
    from hyde_tutor.tutor.grounding import names_an_entry

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
    from hyde_tutor.tutor.chat import chat_loop
    from hyde_tutor.plugin.monitor import Monitor

    events: list[str] = []
    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]

    def model(messages, info: AgentInfo):
        events.append("MODEL")
        return ModelResponse(parts=[TextPart(json.dumps({"entry": 1, "korean": "가고 싶어요", "russian": "Хочу."}))])

    agent = build_tutor_agent(FunctionModel(model), mode="retrieve-first", grounded=True)
    deps = TutorDeps(retriever=hr, monitor=Monitor())
    lines = iter(["хочу поехать", None])
    chat_loop(agent, deps, lambda: next(lines), events.append, search_first=True)
    found = next(i for i, e in enumerate(events) if e.startswith("  найдено: "))
    assert found < events.index("MODEL")  # shown before the model was asked
    assert sum(e.startswith("  ← grammar_search") for e in events) == 1  # searched once, not again in the run
    assert events[-1].startswith("Подойдёт **")


def test_the_chat_streams_a_reply_and_reports_time_to_first_token(retriever) -> None:
    import asyncio
    import time

    from pydantic_ai.models.function import DeltaToolCall

    from hyde_tutor.tutor.chat import chat_loop

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
    text = render_answer(GroundedAnswer(entry=2, korean="늦을 뻔했어요", russian="Чуть не опоздал."), [WANT, ALMOST])
    assert text.startswith("Подойдёт **-(으)ㄹ 뻔하다")
    assert text.splitlines()[-1] == "См. также **-고 싶다 — желание «хотеть»**. 주말에 부산에 가고 싶어요. — На выходных я хочу поехать в Пусан."
    same = render_answer(GroundedAnswer(entry=1, korean="가고 싶어요", russian="x"), [WANT, ALMOST])
    assert "См. также" not in same


def test_the_headline_follows_the_rule_whatever_the_model_chose() -> None:
    from hyde_tutor.tutor.grounding import SURE_MARGIN, headline_entry

    second = GroundedAnswer(entry=2, korean="늦을 뻔했어요", russian="Чуть не опоздал.")
    found = [WANT, ALMOST]
    assert headline_entry(second, found, "model") == 2
    assert headline_entry(second, found, "top") == 1
    assert headline_entry(second, found, "unsure", SURE_MARGIN) == 1  # the search is sure: its top entry
    assert headline_entry(second, found, "unsure", SURE_MARGIN / 2) == 2  # unsure: the model chooses
    assert headline_entry(second, found, "unsure", None) == 2
    assert headline_entry(GroundedAnswer(entry=5, korean="", russian=""), found, "model") == 1  # out of range
    text = render_answer(second, found, headline=1)
    assert text.startswith("Подойдёт **-고 싶다") and "뻔" not in text.split("См. также")[0]  # nothing of the other entry
    assert "Присоединяется к основе глагола." in text  # the headline entry's own explanation


def test_the_chat_turns_headline_follows_the_rule(retriever) -> None:
    from hyde_tutor.corpus.rendering import distinct_entries
    from hyde_tutor.tutor.grounding import SURE_MARGIN, _name

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    agent = build_tutor_agent(_structured({"entry": 2, "korean": "가고 싶어요", "russian": "Хочу."}),
                              mode="retrieve-first", grounded=True)
    for rule in ("model", "top", "unsure"):
        deps = TutorDeps(retriever=hr)
        turn = answer_turn(agent, deps, "Как сказать, что хочу поехать?", headline=rule)
        found = distinct_entries(turn.found)
        margin = deps.margins[str(found[0]["id"])]
        sure = rule == "top" or (rule == "unsure" and margin is not None and margin >= SURE_MARGIN)
        want = found[0] if sure else found[1]
        assert turn.text.startswith(f"Подойдёт **{_name(want)}**"), (rule, margin)
