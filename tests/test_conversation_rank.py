"""The offline follow-up ranker (issue 39): its features, its weights file, and what it changes in a search.
The search tests use the real USE embedder and BM25 over the bundled grammar corpus."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from hyde_tutor import EdgeStore, Retriever
from hyde_tutor.config import HydeSettings
from hyde_tutor.corpus.documents import iter_jsonl_documents
from hyde_tutor.corpus.ingest import IngestRequest, ingest_documents
from hyde_tutor.hyde import HydeRetriever
from hyde_tutor.hyde.conversation_rank import (FEATURES, ConversationRanker, FollowUp, default_ranker, feature_matrix,
                                               taught_entries)

DATA = Path(__file__).resolve().parent.parent / "data"
NOTATIONS = {"g-b01": "-고 싶다", "g-b02": "-고 싶어하다", "g-a06": "-(으)면", "g-c03": "-았/었-"}
WISH = (("user", "Как сказать, что я хочу поехать на Чеджу?"),
        ("assistant", "Желание говорящего передаётся через -고 싶다: 제주도에 가고 싶어요."))


def test_the_entry_the_reply_teaches_is_read_from_its_notation() -> None:
    follow_up = FollowUp.from_history(WISH, "А если это не я хочу, а мама?")
    assert follow_up.reply.startswith("Желание") and follow_up.previous.startswith("Как сказать")
    assert taught_entries(follow_up.reply, NOTATIONS) == {"g-b01"}  # not -고 싶어하다, which only contains it
    assert taught_entries("Условие — -(으)면: 내일 날씨가 좋으면 소풍 가요.", NOTATIONS) == {"g-a06"}
    assert taught_entries("Скажите так: 가고 싶어요.", NOTATIONS) == frozenset()  # names no construction
    assert taught_entries(follow_up.reply, {}) == frozenset()


def test_each_candidate_gets_every_feature_and_only_the_messages_top_its_own() -> None:
    searches = [[("g-c03", 2.0), ("g-b01", 1.0)], [("g-b01", 3.0), ("g-b02", 1.5)], [("g-b01", 2.5), ("g-a06", 1.0)]]
    follow_up = FollowUp.from_history(WISH, "А в прошедшем времени?")
    candidates, x = feature_matrix(follow_up, searches, ["g-b01", "g-c03", "g-b02", "g-a06"], NOTATIONS)
    assert candidates == ["g-c03", "g-b01", "g-b02", "g-a06"] and x.shape == (4, len(FEATURES))
    row = dict(zip(FEATURES, x[1], strict=True))  # g-b01: second alone, first after the reply, taught
    assert row["msg_rr"] == 0.5 and row["msg_score"] == 0.5 and row["reply_rr"] == 1.0 and row["taught"] == 1.0
    assert row["fused_top"] == 1.0 and all(row[f] == 0 for f in FEATURES if f.startswith("msg_top_x_"))
    top = dict(zip(FEATURES, x[0], strict=True))  # g-c03: the message's own top, not in the reply's top 5
    assert top["msg_top_x_not_in_reply_top5"] == 1.0 and top["msg_top_x_margin"] == 1.0 and top["taught"] == 0
    assert top["msg_rr_x_opener"] == 1.0  # «А…» opens it
    with pytest.raises(ValueError, match="three searches"):
        feature_matrix(follow_up, searches[:2], [], NOTATIONS)


def test_the_ranking_follows_the_weights_and_keeps_the_rest_of_the_fusion() -> None:
    searches = [[("a", 1.0)], [("b", 1.0)], [("b", 1.0)]]
    follow_up = FollowUp("А так?", "", "")
    only_the_message = ConversationRanker(tuple(1.0 if f == "msg_rr" else 0.0 for f in FEATURES))
    assert [d for d, _ in only_the_message.rank(follow_up, searches, ["b", "a", "z"], {})] == ["a", "b", "z"]
    only_the_reply = ConversationRanker(tuple(1.0 if f == "reply_rr" else 0.0 for f in FEATURES))
    ranked = only_the_reply.rank(follow_up, searches, ["b", "a", "z"], {})
    assert [d for d, _ in ranked] == ["b", "a", "z"] and ranked[-1][1] == 0.0
    scores = [score for _, score in ranked]  # probabilities: positive, non-increasing, the tail at 0
    assert scores[0] > scores[1] > 0 and abs(sum(scores) - 1.0) < 1e-9


def test_weights_for_other_features_or_of_another_length_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retrain with scripts/train_conversation_ranker.py"):
        ConversationRanker((0.0,) * len(FEATURES), ("msg_rr",) * len(FEATURES))
    with pytest.raises(ValueError, match=f"needs {len(FEATURES)} finite weights"):
        ConversationRanker((0.0,) * 3)
    with pytest.raises(ValueError, match="finite"):
        ConversationRanker((float("nan"),) * len(FEATURES))
    (tmp_path / "other.json").write_text(json.dumps({"weights": [0.5]}))
    with pytest.raises(ValueError, match="not a ranker file"):
        ConversationRanker.load(tmp_path / "other.json")
    path = tmp_path / "ranker.json"
    path.write_text(json.dumps({"features": list(FEATURES), "weights": [0.5] * len(FEATURES), "trained_on": "x"}))
    assert ConversationRanker.load(path) == ConversationRanker((0.5,) * len(FEATURES), FEATURES, "x")


def test_the_shipped_weights_say_what_they_were_learned_on_and_not_on() -> None:
    ranker = default_ranker()
    assert ranker.features == FEATURES and np.isfinite(ranker.weights).all()
    assert "never on heldout+fresh12" in ranker.trained_on and "fresh11" in ranker.trained_on


@pytest.fixture(scope="module")
def grammar(tmp_path_factory: pytest.TempPathFactory, use_embedder, bm25) -> Iterator[HydeRetriever]:
    """The bundled grammar corpus in an edge store, real USE + BM25, HyDE off."""
    store = EdgeStore(tmp_path_factory.mktemp("rank-grammar") / "edge")
    docs = [p.document for p in iter_jsonl_documents(DATA / "grammar.jsonl") if p.document is not None]
    ingest_documents(docs, IngestRequest(collection="grammar", progress=False), store, use_embedder, bm25)
    yield HydeRetriever(Retriever(store, use_embedder, bm25), lambda d: None,  # type: ignore[arg-type,return-value]
                        HydeSettings(enabled=False))
    store.close()  # the USE embedder is the session's


def _top(hr: HydeRetriever, text: str, history: tuple, conversation: str | None = None) -> str:
    result = asyncio.run(hr.search("grammar", text, history=history, use_hyde=False, top_k=5,
                                   conversation=conversation))  # type: ignore[arg-type]
    return result.results[0].id


@pytest.mark.parametrize(("history", "text", "want"), [
    ((("user", "Как сказать «если завтра будет солнечно, поедем на пикник»?"),
      ("assistant", "Условие — -(으)면: 내일 날씨가 좋으면 소풍 가요.")),
     "А если условие почти фантастическое — ну, «если бы я вдруг стал миллионером»?", "g-e29"),
    ((("user", "Как сказать, что я решил бросить курить?"),
      ("assistant", "Принятое решение выражается через -기로 하다: 담배를 끊기로 했어요.")),
     "А если я ещё не решил окончательно, только подумываю?", "g-b11"),
])
def test_a_wordy_follow_up_is_not_held_to_the_entry_just_taught(grammar: HydeRetriever, history, text, want) -> None:
    # the three searches fused by RRF alone put the entry the tutor just taught first (the message asks another)
    assert _top(grammar, text, history, conversation="reply") != want
    assert _top(grammar, text, history) == want  # the default reads the follow-up with the learned ranker


def test_a_new_question_mid_chat_is_not_ranked_by_the_follow_up_model(grammar: HydeRetriever) -> None:
    text = "Как сказать, что я чуть не опоздал на поезд?"
    assert _top(grammar, text, WISH) == _top(grammar, text, ())


def test_hypotheses_fuse_with_the_rrf_ranking_and_the_learned_order_stands_alone(grammar: HydeRetriever) -> None:
    import time

    from hyde_tutor.hyde import stages
    from hyde_tutor.hyde.conversation import conversation_queries, fuse_rankings

    history = (("user", "Как сказать, что я решил бросить курить?"),
               ("assistant", "Принятое решение выражается через -기로 하다: 담배를 끊기로 했어요."))
    text = "А если я ещё не решил окончательно, только подумываю?"
    queries = conversation_queries(history, text)
    r = grammar.retriever
    encoding = r.encode([q for q, _ in queries], "grammar")
    raw = stages.search_raw(r, "grammar", text, 30, False, encoding=encoding, started=time.perf_counter(),
                            conversation=stages.ConversationSearches(
                                tuple(w for _, w in queries), FollowUp.from_history(history, text), "pattern"))
    searches = r.store.search_batch("grammar", [r.request(encoding, i, 30, collection="grammar") for i in range(3)])
    rrf = [d for d, _ in fuse_rankings([[h.doc_id for h in hits] for hits in searches], [1.0, 1.0, 1.0])]
    assert [h.doc_id for h in raw.channels[stages.RAW]] == rrf[:30]  # what the hypotheses fuse with
    assert raw.ranked is not None and raw.ranked[0].doc_id == "g-b11" != rrf[0]  # what stands without them
    assert raw.alone[stages.RAW] == raw.ranked and raw.ranked[0].payload["pattern"] == "-(으)ㄹ까 하다"


def test_the_messages_own_top_entry_stays_within_the_first_two_of_the_learned_order() -> None:
    only_the_reply = ConversationRanker(tuple(1.0 if f == "reply_rr" else 0.0 for f in FEATURES))
    searches = [[("own", 1.0)], [("a", 1.0), ("b", 0.9), ("c", 0.8)], [("a", 1.0)]]
    ranked = only_the_reply.rank(FollowUp("А так?", "", ""), searches, ["a", "b", "own", "c"], {})
    assert [d for d, _ in ranked] == ["a", "own", "b", "c"]
    scores = [score for _, score in ranked]
    assert scores == sorted(scores, reverse=True) and scores[1] == scores[2]  # moved up: the score it passed


def test_a_title_serves_as_the_notation_where_the_payload_has_no_pattern() -> None:
    from hyde_tutor.hyde.conversation_rank import rank_hits
    from hyde_tutor.retrieval.store import Hit

    taught = ConversationRanker(tuple(1.0 if f == "taught" else 0.0 for f in FEATURES))
    searches = [[Hit("g-c03", 1.0, {"title": "-았/었- — прошедшее время"})],
                [Hit("g-c03", 1.0, {"title": "-았/었- — прошедшее время"}), Hit("g-b01", 0.9, {"title": "-고 싶다 — желание"})],
                [Hit("g-b01", 1.0, {"title": "-고 싶다 — желание"})]]
    ranked = rank_hits(FollowUp.from_history(WISH, "А так?"), searches, ["g-c03", "g-b01"], "pattern", taught)
    assert ranked is not None and ranked[0][0] == "g-b01"  # the reply names -고 싶다: read from the title


def test_a_missing_weights_file_turns_the_ranker_off_once_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from hyde_tutor.hyde import conversation_rank

    monkeypatch.setattr(conversation_rank, "_PATH", tmp_path / "gone.json")
    default_ranker.cache_clear()
    try:
        assert default_ranker() is None and default_ranker() is None
        assert caplog.text.count("the follow-up ranker is off") == 1
        assert conversation_rank.rank_hits(FollowUp("А так?", "", ""), [[], [], []], [], "pattern") is None
    finally:
        default_ranker.cache_clear()


def test_the_margin_is_unknown_when_the_learned_order_heads_another_entry() -> None:
    from hyde_tutor.hyde import stages
    from hyde_tutor.retrieval.store import Hit

    rrf = [Hit("a", 1.0), Hit("b", 0.5)]
    plain = stages.RawChannel({stages.RAW: rrf}, None, 0.0)  # type: ignore[arg-type]
    assert plain.margin == 0.5
    same = stages.RawChannel({stages.RAW: rrf}, None, 0.0, ranked=[Hit("a", 0.7), Hit("b", 0.3)])  # type: ignore[arg-type]
    assert same.margin == 0.5
    other = stages.RawChannel({stages.RAW: rrf}, None, 0.0, ranked=[Hit("b", 0.7), Hit("a", 0.3)])  # type: ignore[arg-type]
    assert other.margin is None and other.alone[stages.RAW][0].doc_id == "b"


def test_a_failing_ranker_leaves_the_rrf_ranking_and_the_search_goes_on(
        grammar: HydeRetriever, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from hyde_tutor.hyde import named

    def broken(names: object, notation: str) -> tuple[int, ...]:
        raise RuntimeError("kiwi failed")

    history = (("user", "Как сказать, что я решил бросить курить?"),
               ("assistant", "Принятое решение выражается через -기로 하다: 담배를 끊기로 했어요."))
    text = "А если я ещё не решил окончательно, только подумываю?"
    monkeypatch.setattr(named, "name_strength", broken)  # the reply's notation is read with it
    assert _top(grammar, text, history) == _top(grammar, text, history, conversation="reply") != "g-b11"
    assert "the follow-up ranker failed; the RRF ranking stands" in caplog.text


def test_a_ranked_follow_up_keeps_its_results_under_a_relative_threshold(grammar: HydeRetriever) -> None:
    hr = HydeRetriever(grammar.retriever, lambda d: None, HydeSettings(enabled=False, threshold_start=0.5))  # type: ignore[arg-type,return-value]
    history = (("user", "Как сказать, что я решил бросить курить?"),
               ("assistant", "Принятое решение выражается через -기로 하다: 담배를 끊기로 했어요."))
    result = asyncio.run(hr.search("grammar", "А если я ещё не решил окончательно, только подумываю?",
                                   history=history, use_hyde=False, top_k=30))
    assert result.results and result.results[0].id == "g-b11"
    assert all(0 <= d.score <= 1 for d in result.results)  # probabilities (the tail at 0), not raw sums or -inf


def test_the_eval_arm_ranks_a_follow_up_as_the_pipeline_does(grammar: HydeRetriever) -> None:
    from types import SimpleNamespace

    from hyde_tutor.evaluation.arms import ConversationArm

    history = (("user", "Как сказать, что я решил бросить курить?"),
               ("assistant", "Принятое решение выражается через -기로 하다: 담배를 끊기로 했어요."))
    item = SimpleNamespace(text="А если я ещё не решил окончательно, только подумываю?", history=history)
    ranked = ConversationArm(grammar.retriever, "grammar", 5, "auto", name_field="pattern")([item])[0]
    rrf = ConversationArm(grammar.retriever, "grammar", 5, "auto")([item])[0]
    assert ranked[0] == "g-b11" != rrf[0]
    assert ranked == [d.id for d in asyncio.run(grammar.search("grammar", item.text, history=history, use_hyde=False,
                                                                top_k=5)).results]


@pytest.mark.parametrize(("flags", "says"), [
    (["--train", "tune,fresh99"], "unknown set(s) ['fresh99']"),
    (["--train", "tune,fresh14"], "['fresh14'] both trained on and reported"),
    (["--train", "tune,fresh,fresh"], "named twice"),
    (["--train", "tune"], "at least two sets"),
])
def test_the_training_script_refuses_an_unknown_set_or_one_both_trained_on_and_reported(flags, says) -> None:
    import subprocess
    import sys

    script = DATA.parent / "scripts" / "train_conversation_ranker.py"
    done = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and says in done.stderr  # refused before anything is searched or fitted
