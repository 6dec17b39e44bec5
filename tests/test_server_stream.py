"""The served reply as text parts on every backend (the embedded model's structured answer included), its head
before the model has finished, and a learner's stored conversation read back for a reloaded page, only by its
own learner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from starlette.testclient import TestClient

from hyde_tutor.server import create_app

from .served_stub import stub_parts
from .test_server_api import _settings, ask

WANT = {"id": "g-want", "pattern": "-고 싶다", "name_ru": "хотеть", "explanation": "Желание говорящего.",
        "examples": [{"ko": "가고 싶어요.", "ru": "Хочу пойти."}]}
ALMOST = {"id": "g-almost", "pattern": "-(으)ㄹ 뻔하다", "name_ru": "чуть не",
          "explanation": "Чуть не случилось.", "examples": [{"ko": "늦을 뻔했어요.", "ru": "Чуть не опоздал."}]}


def _text(chunks: list[dict]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def test_a_structured_answer_reaches_the_client_as_text_parts_head_first(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path), structured=True, token_s=0.01)
    with TestClient(create_app(parts)) as client:
        response, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요")
    types = [c["type"] for c in chunks]
    assert response.status_code == 200 and "text-start" in types and "text-end" in types
    reply = next(c for c in chunks if c["type"] == "data-reply")["data"]
    assert not reply["failed"] and _text(chunks) == reply["text"]  # a stock useChat client shows the same reply
    assert '"entry"' not in _text(chunks)  # the model's JSON is never shown
    first = types.index("text-delta")
    assert types.index("data-entries") < first < types.index("finish-step")  # words before the model is done
    ids = {c["id"] for c in chunks if c["type"].startswith("text-")}
    assert len(ids) == 1 and types.index("text-end") < types.index("data-reply")


def test_the_head_goes_out_when_the_search_is_sure_or_when_the_json_names_its_entry() -> None:
    from hyde_tutor.tutor.reply_stream import ReplyPacer, lead_text

    sure = ReplyPacer([WANT, ALMOST], margin=0.4)
    head = sure.start()
    assert head == lead_text([WANT, ALMOST], 1) and "-고 싶다" in head
    unsure = ReplyPacer([WANT, ALMOST], margin=0.01)
    assert unsure.start() == ""
    assert [unsure.feed(p) for p in ('{"ent', 'ry": ', "2")] == ["", "", ""]  # "2" could still become "23"
    head = unsure.feed(', "korean": "늦')
    assert unsure.headline == 2 and "-(으)ㄹ 뻔하다" in head and unsure.feed('을 뻔했어요"') == ""
    assert unsure.finish(head + "Пример: 늦을 뻔했어요.") == "Пример: 늦을 뻔했어요."
    failed = ReplyPacer([WANT, ALMOST], margin=0.4)
    failed.start()
    assert failed.finish("[модель не смогла ответить (X)]") == "\n\n[модель не смогла ответить (X)]"
    text = ReplyPacer([], None)
    text.streamed("Скажите так: 가고 싶어요.")
    assert text.finish("Скажите так: 가고 싶어요.") == "" and text.finish("другой") == "\n\nдругой"


def test_a_reloaded_page_gets_the_reply_as_read_and_another_learner_gets_nothing(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path), structured=True)
    with TestClient(create_app(parts)) as client:
        _, chunks = ask(client, "Как сказать «хочу»: 가고 싶어요", chat_id="mine")
        data = next(c for c in chunks if c["type"] == "data-reply")["data"]
        reply = data["text"]
        shown = client.get("/api/chat/mine/messages").json()["messages"]
        assert shown == [{"role": "learner", "text": "Как сказать «хочу»: 가고 싶어요"},
                         {"role": "tutor", "text": reply, "turn_id": data["turn_id"]}]  # the reply as read, still rated
        with TestClient(client.app) as other:
            assert other.get("/api/chat/mine/messages").json() == {"messages": []}  # a new learner: nothing
            ask(other, "Другой вопрос 가요", chat_id="mine")  # the other's own chat under the same id
            theirs = other.get("/api/chat/mine/messages").json()["messages"]
        assert [m["text"] for m in theirs if m["role"] == "learner"] == ["Другой вопрос 가요"]
        assert client.get("/api/chat/mine/messages").json()["messages"] == shown  # neither sees the other's
        assert client.get("/api/chat/bad id!/messages").json() == {"messages": []}
        # the stored reply is the one read (the next turn's model request carries it, as `hyde-tutor chat` does)
        (mine,) = [r for r in asyncio.run(parts.store.read_records()) if r.conversation_id.endswith("-mine")
                   and r.scope == parts.tutor.log.turns()[0].subject]
        last = asyncio.run(parts.store.load(mine.conversation_id)).messages[-1]
        assert last.parts[0].content == reply and '"entry"' not in json.dumps(last.parts[0].content)


def test_a_reloaded_page_can_still_rate_each_reply_and_sees_its_earlier_rating(tmp_path: Path) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path), structured=False)
    with TestClient(create_app(parts)) as client:
        turn_ids = []
        for text in ("Как сказать «хочу»: 가고 싶어요", "А в прошедшем времени 갔어요?", "А вежливее 가세요?"):
            _, chunks = ask(client, text, chat_id="rated")
            turn_ids.append(next(c for c in chunks if c["type"] == "data-reply")["data"]["turn_id"])
        shown = client.get("/api/chat/rated/messages").json()["messages"]
        replies = [m for m in shown if m["role"] == "tutor"]
        assert [m.get("turn_id") for m in replies] == turn_ids  # each stored reply names its own turn
        assert all("rating" not in m for m in replies)
        rated = client.post("/api/rating", json={"turn_id": replies[1]["turn_id"], "rating": -1, "reason": "не то"})
        assert rated.status_code == 200
        again = [m for m in client.get("/api/chat/rated/messages").json()["messages"] if m["role"] == "tutor"]
        assert [(m.get("rating"), m.get("reason")) for m in again] == [(None, None), (-1, "не то"), (None, None)]
        by_turn = {t.turn_id: t for t in parts.tutor.log.turns()}
        assert by_turn[turn_ids[1]].rating == -1 and by_turn[turn_ids[0]].rating is None  # tied to its own turn
        with TestClient(client.app) as other:  # another learner sees none of it, and cannot rate it
            assert other.get("/api/chat/rated/messages").json() == {"messages": []}
            other.get("/")
            refused = other.post("/api/rating", json={"turn_id": turn_ids[0], "rating": 1})
            assert refused.status_code == 404


def test_a_reloaded_page_keeps_its_conversation_when_the_ratings_cannot_be_read(tmp_path: Path, caplog) -> None:
    parts = stub_parts(tmp_path, _settings(tmp_path), structured=False)
    with TestClient(create_app(parts)) as client:
        ask(client, "Как сказать «хочу»: 가고 싶어요", chat_id="broken")

        def down(*args):  # type: ignore[no-untyped-def]
            raise ConnectionError("database down")

        parts.tutor.log.rated = down  # type: ignore[method-assign]
        response = client.get("/api/chat/broken/messages")
    shown = response.json()["messages"]
    assert response.status_code == 200 and [m["role"] for m in shown] == ["learner", "tutor"]
    assert "turn_id" in shown[1] and "rating" not in shown[1]  # still rateable; only the earlier rating is unknown
    assert "could not read a learner's ratings" in caplog.text
