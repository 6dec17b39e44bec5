"""The LLM-free checks of a reply's model sentence (issue 36): the Korean analyser finds an entry's pattern in
its own examples, not in a sentence that merely shares its letters; the model does not see earlier Korean."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from hyde_tutor.tutor.checks import korean_sentences, pattern_sequences, sentence_problem, uses_pattern

GRAMMAR = Path(__file__).resolve().parent.parent / "data" / "grammar.jsonl"


def test_the_entries_own_examples_show_their_pattern_to_the_analyser() -> None:
    """Every entry of data/grammar.jsonl against its own examples. Some examples show a contrast on purpose
    (-는 동안 with «방학 동안», a noun; 의 with «의사»), so not all pass; measured 429 of 480 examples, 119 of 160
    entries with every example passing (on 190 entries: 508 of 570 examples; on 195: 523 of 585; on 200: 538 of 600; on 205: 552 of 615; on 210: 563 of 630, the passive -이/히/리/기- being a suffix no sentence shows to the analyser)."""
    entries = [json.loads(line) for line in GRAMMAR.read_text(encoding="utf-8").splitlines() if line.strip()]
    examples = [(e["pattern"], ex["ko"]) for e in entries for ex in e.get("examples", [])]
    passed = sum(uses_pattern(ko, pattern) for pattern, ko in examples)
    assert len(examples) >= 400 and passed / len(examples) >= 0.85, f"{passed}/{len(examples)}"
    assert all(pattern_sequences(e["pattern"]) for e in entries)  # every notation gives something to look for


def test_the_pattern_is_found_by_morphemes_not_by_letters() -> None:
    assert uses_pattern("먹어 보니까 맛있어요.", "-아/어 보니(까)") and uses_pattern("먹어 보니 맛있어요.", "-아/어 보니(까)")
    assert uses_pattern("비가 오던데요.", "-던데(요)")  # a bracket right after a word: an optional ending
    assert pattern_sequences("-아/어 (반말)") == pattern_sequences("-아/어")  # after a space: a comment
    assert uses_pattern("제가 없는 동안 책을 읽어요.", "-는 동안")
    assert not uses_pattern("방학 동안 책을 읽어요.", "-는 동안")  # 동안 as a noun: no -는 before it
    assert uses_pattern("기차를 놓칠 뻔했어요.", "-(으)ㄹ 뻔하다") and uses_pattern("늦을 뻔했어요.", "-(으)ㄹ 뻔하다")
    assert not uses_pattern("기차를 놓쳤어요.", "-(으)ㄹ 뻔하다")
    assert uses_pattern("부산에 가고 싶었어요.", "-고 싶다") and not uses_pattern("부산에 가고 있어요.", "-고 싶다")
    assert uses_pattern("할머니께서 신문을 읽으세요.", "-(으)시-")  # the honorific fused into 으세요
    assert uses_pattern("수업은 아홉 시부터 한 시까지 해요.", "부터 … 까지")
    assert uses_pattern("친구가 다음 달에 한국에 간다고 했어요.", "-다고 하다")
    assert not uses_pattern("감사합니다.", "Частицы")  # a document's topic: nothing Korean to look for


def test_a_sentences_problems_are_named() -> None:
    examples = ["주말에 부산에 가고 싶어요."]
    assert sentence_problem("부산에 가고 싶어요.", "-고 싶다", examples) is None
    assert sentence_problem("부산에 가고 싶어요 Busan.", "-고 싶다", examples) == "not Hangul and punctuation only"
    assert sentence_problem("부산에 가고 싶", "-고 싶다", examples) == "not a whole sentence"
    assert sentence_problem("부산에 가요.", "-고 싶다", examples) == "the entry's pattern is not in it"
    assert sentence_problem("부산에 가고 싶어요!", "-고 싶다", examples, ["부산에 가고 싶어요."]) == "a sentence shown before"
    assert korean_sentences("Пример: 부산에 가요. — Я еду. 서울에 가고 싶어요!") == ["부산에 가요.", "서울에 가고 싶어요!"]


def test_the_grounded_model_sees_an_earlier_reply_without_its_korean(retriever) -> None:
    """Turn 3 of the issue's chat repeated turn 2's sentence: the model had it in front of it."""
    from hyde_tutor.config import HydeSettings
    from hyde_tutor.hyde import HydeRetriever
    from hyde_tutor.tutor.chat import answer_turn, build_tutor_agent
    from hyde_tutor.plugin.toolset import TutorDeps

    seen: list[str] = []

    def model(messages, info: AgentInfo):
        seen.append("\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts
                              if isinstance(m, (ModelRequest, ModelResponse))))
        return ModelResponse(parts=[TextPart(json.dumps({"entry": 1, "korean": "부산에 가고 싶어요.",
                                                         "russian": "Хочу в Пусан."}, ensure_ascii=False))])

    hr = HydeRetriever(retriever, lambda d: None, HydeSettings(enabled=False))  # type: ignore[arg-type,return-value]
    agent = build_tutor_agent(FunctionModel(model), mode="retrieve-first", grounded=True)
    history = (ModelRequest(parts=[UserPromptPart("Как сказать, что хочу в Пусан?")]),
               ModelResponse(parts=[TextPart("Подойдёт **-고 싶다**.\nПример: 그저 가고 싶었어요. — Просто хотел.")]))
    turn = answer_turn(agent, TutorDeps(retriever=hr), "А в прошедшем времени?", history)
    assert turn.model_error is None
    assert "Подойдёт **-고 싶다**." in seen[-1] and "그저" not in seen[-1]  # the head only, no Korean to repeat


def test_a_sentence_that_says_something_else_than_its_translation_is_not_shown(use_embedder) -> None:
    """The 1.5B model wrote «물고 싶어요» ("I want to bite") translated as «Хочу поехать в Пусан.»: the pattern is
    there, the meaning is not. The cross-lingual sentence embedder (no LLM) tells them apart."""
    from hyde_tutor.tutor.checks import meaning_check
    from hyde_tutor.tutor.grounding import GroundedAnswer, render_answer

    agrees = meaning_check(use_embedder.embed, "Как сказать, что я хочу поехать в Пусан?")
    assert agrees("부산에 가고 싶어요.", "Я хочу поехать в Пусан.")
    assert not agrees("물고 싶어요.", "Хочу поехать в Пусан.")
    assert not agrees("버스를 놓칠 뻔했어요.", "Я чуть не опоздал на поезд.")  # a bus is not a train
    want = {"id": "g-b01", "pattern": "-고 싶다", "name": "хотеть", "explanation": "Желание.",
            "examples": [{"ko": "주말에 부산에 가고 싶어요.", "ru": "На выходных я хочу поехать в Пусан."}]}
    text = render_answer(GroundedAnswer(entry=1, korean="물고 싶어요.", russian="Хочу поехать в Пусан."), [want],
                         agrees=agrees)
    assert "물고" not in text and "주말에 부산에 가고 싶어요." in text
