"""The chat page in a real headless Chromium on the embedded model's reply shape (a structured answer, stubbed),
on a real uvicorn: the reply's words arrive before the model is done and its text is escaped once, a reload
keeps the conversation and each reply's rating bar (with the rating given before), and the rating buttons read
without an emoji font."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyde_tutor.config import Settings
from hyde_tutor.server import create_app

from .served_stub import stub_parts
from .test_server_browser import _ask, _ask_done, _free_port, _open, browser  # noqa: F401 - the fixture

QUESTION = "Как сказать «хочу»: 가고 싶어요"


@pytest.fixture()
def structured_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import uvicorn

    # the stub's hash embedder cannot judge meaning: the meaning check (real USE, tests/test_reply_checks.py)
    # is replaced by one that agrees, so the model's sentence reaches the page and its escaping can be seen
    monkeypatch.setattr("hyde_tutor.tutor.served.meaning_check_of", lambda *args: (lambda korean, russian: True))

    port = _free_port()
    settings = Settings(data_dir=tmp_path / "data", server={"port": port})
    parts = stub_parts(tmp_path, settings, structured=True, token_s=0.1)
    server = uvicorn.Server(uvicorn.Config(create_app(parts), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_structured_reply_shows_its_head_early_and_its_quotes_escaped_once(structured_server, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, structured_server)
    browser.find_element(By.ID, "question").send_keys(QUESTION)
    browser.find_element(By.ID, "send").click()
    reply = WebDriverWait(browser, 60).until(lambda d: (d.find_elements(By.CSS_SELECTOR, ".msg.tutor .reply") or [None])[0])
    WebDriverWait(browser, 60).until(lambda d: "Подойдёт" in reply.text)
    early = not browser.find_elements(By.CSS_SELECTOR, ".msg.tutor .rate")  # words on the page before the end
    message = _ask_done(browser)
    assert early
    text = message.find_element(By.CLASS_NAME, "reply").text
    assert '부산에 갈 수 있어요. — Я могу поехать в "Пусан".' in text  # the model's checked sentence
    assert "&#34;" not in text and "&quot;" not in text and "&amp;" not in text


def test_the_rating_buttons_read_without_an_emoji_font(structured_server, browser) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, structured_server)
    buttons = _ask(browser, QUESTION, 1).find_elements(By.CSS_SELECTOR, ".rate button")
    assert len(buttons) == 2
    for button in buttons:
        label = button.text.strip()
        assert label in ("Помогло", "Не помогло")  # readable words, no emoji that needs a font to show
        assert all(ord(ch) < 0x2000 for ch in button.get_attribute("textContent"))
        assert button.find_element(By.TAG_NAME, "svg").size["width"] > 0  # the icon draws without a font


def test_a_reload_keeps_the_conversation(structured_server, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, structured_server)
    first = _ask(browser, QUESTION, 1).find_element(By.CLASS_NAME, "reply").text
    browser.refresh()
    WebDriverWait(browser, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 2)
    learner, tutor = browser.find_elements(By.CSS_SELECTOR, ".msg")
    assert learner.text == QUESTION and tutor.find_element(By.CLASS_NAME, "reply").text == first
    tutor.find_element(By.CSS_SELECTOR, ".rate .rate-up").click()  # a restored reply can still be rated
    WebDriverWait(browser, 30).until(lambda d: "сохранена" in tutor.find_element(By.CLASS_NAME, "rated").text)
    browser.refresh()  # and the next reload shows that rating
    WebDriverWait(browser, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg .rate")) == 1)
    up = browser.find_element(By.CSS_SELECTOR, ".msg.tutor .rate-up")
    assert up.get_attribute("aria-pressed") == "true"
    _ask(browser, "А ещё пример 가고 싶어요?", 1)  # the conversation goes on in the same chat
    assert len(browser.find_elements(By.CSS_SELECTOR, ".msg.tutor")) == 2
    assert len(browser.find_elements(By.CSS_SELECTOR, ".msg.tutor .rate")) == 2
    browser.find_element(By.ID, "new-chat").click()
    browser.refresh()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "send"))
    time.sleep(1)  # the (empty) stored conversation of the new chat has been fetched
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
