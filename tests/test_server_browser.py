"""The chat page in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium) against
the app on a real uvicorn on 127.0.0.1, on a stub model: a question, the streamed reply and the entry cards,
a 👍 that reaches the report, and a corpus entry holding ``<script>`` shown as text, never run."""

from __future__ import annotations

import json

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hyde_tutor.config import Settings
from hyde_tutor.server import create_app

from .pg_cluster import require
from .served_stub import XSS, XSS_DOC, stub_parts

TOKEN = "browser-op-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def live_server(tmp_path: Path) -> Iterator[tuple[str, object]]:
    import uvicorn

    port = _free_port()
    settings = Settings(data_dir=tmp_path / "data", server={"operator_token": TOKEN, "port": port})
    parts = stub_parts(tmp_path, settings, token_s=0.05, extra_docs=[XSS_DOC])
    server = uvicorn.Server(uvicorn.Config(create_app(parts), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", parts
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture()
def browser() -> Iterator[object]:
    require("Chromium", bool(shutil.which("chromium")) and bool(shutil.which("chromedriver")),
            "apt-get install chromium chromium-driver fonts-noto-cjk")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _open(driver, url: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    WebDriverWait(driver, 30).until(lambda d: d.title == "Репетитор корейского" and d.find_elements(By.ID, "send"))


def _ask(driver, text: str, n: int):  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.ID, "question").send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.tutor .rate")) >= n)
    wait.until(ec.element_to_be_clickable((By.ID, "send")))
    return driver.find_elements(By.CSS_SELECTOR, ".msg.tutor")[n - 1]


def test_the_page_streams_a_reply_with_cards_and_a_thumbs_up_reaches_the_report(live_server, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, parts = live_server
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{url}/api/operator/experiment", json={"action": "start", "share": 0.5, "name": "web"},
                      headers=auth).status_code == 200
    _open(browser, url)
    browser.find_element(By.ID, "question").send_keys("Как сказать «хочу»: 가고 싶어요")
    browser.find_element(By.ID, "send").click()
    partial = WebDriverWait(browser, 60).until(
        lambda d: (d.find_elements(By.CSS_SELECTOR, ".msg.tutor .reply") or [None])[0])
    WebDriverWait(browser, 60).until(lambda d: "가고" in partial.text)
    seen_partial = "." not in partial.text  # the reply was on the page before its last token arrived
    message = _ask_done(browser)
    assert seen_partial
    assert "부산에 가고 싶어요 — это -고 싶다." in message.find_element(By.CLASS_NAME, "reply").text
    patterns = [c.text for c in message.find_elements(By.CSS_SELECTOR, ".card .pattern")]
    assert patterns and patterns[0] == "-고 싶다"
    message.find_element(By.CLASS_NAME, "reason").send_keys("понятно")
    message.find_element(By.CLASS_NAME, "rate-up").click()
    WebDriverWait(browser, 30).until(lambda d: "сохранена" in message.find_element(By.CLASS_NAME, "rated").text)
    (turn,) = parts.tutor.log.turns("web")
    assert (turn.rating, turn.rating_reason) == (1, "понятно") and turn.turn_id == message.get_attribute("data-turn-id")
    report = httpx.get(f"{url}/api/operator/report", params={"experiment": "web"}, headers=auth).json()
    (period,) = report["periods"]
    thumbs = period["by_assigned_arm"]["arms"][turn.arm]["thumbs_up"]
    assert (thumbs["value"], thumbs["n"], report["turns"]) == (1.0, 1, 1)  # the one turn's 👍, in its arm
    from typer.testing import CliRunner

    from hyde_tutor.cli import app
    from hyde_tutor.experiment.sqlstore import database_url

    out = CliRunner().invoke(app, ["ab-report", "--db", database_url(parts.settings), "--experiment", "web", "--json"])
    assert out.exit_code == 0, out.output
    cli_arm = json.loads(out.output)["periods"][0]["by_assigned_arm"]["arms"][turn.arm]
    assert (cli_arm["thumbs_up"]["value"], cli_arm["thumbs_up"]["n"]) == (1.0, 1)  # the same rating, from `ab-report`


def _ask_done(driver):  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.tutor .rate"))
    return driver.find_elements(By.CSS_SELECTOR, ".msg.tutor")[-1]


def test_a_corpus_entry_holding_script_is_shown_as_text(live_server, browser) -> None:
    from selenium.webdriver.common.by import By

    url, parts = live_server
    _open(browser, url)
    message = _ask(browser, "опасная статья 위험해요 скрипт", 1)
    card = message.find_elements(By.CSS_SELECTOR, ".card")[0]
    assert card.get_attribute("data-id") == "g-xss"
    assert card.find_element(By.CLASS_NAME, "pattern").text == XSS  # the markup, as text
    assert XSS in message.find_element(By.CLASS_NAME, "reply").text
    assert browser.find_elements(By.CSS_SELECTOR, "#log script, #log img") == []
    assert browser.title == "Репетитор корейского"  # neither the script nor the onerror ran
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1  # app.js only
