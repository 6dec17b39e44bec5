"""The screenshot of docs/serving.png: the chat page of a running `hyde-tutor serve`, one question asked in
headless Chromium (Debian's chromium + chromium-driver, fonts-noto-cjk for the Hangul), after its reply.

    hyde-tutor serve --port 8000 &        # with HYDE_SERVER__OPERATOR_TOKEN=... to show the operator view
    python scripts/serving_screenshot.py --url http://127.0.0.1:8000 --token "$HYDE_SERVER__OPERATOR_TOKEN"
"""

from __future__ import annotations

import argparse
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", help="operator token: the page then shows the arm, why HyDE ran, the hypotheses")
    parser.add_argument("--question", default="Как сказать, что я хочу поехать в Пусан?")  # the README's
    parser.add_argument("--out", type=Path, default=Path("docs/serving.png"))
    parser.add_argument("--wait-s", type=float, default=900)
    args = parser.parse_args()
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,1400", "--lang=ru"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(args.url + "/" + (f"#operator={args.token}" if args.token else ""))
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.ID, "send"))
        driver.find_element(By.ID, "question").send_keys(args.question)
        driver.find_element(By.ID, "send").click()
        WebDriverWait(driver, args.wait_s).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.tutor .rate"))
        message = driver.find_elements(By.CSS_SELECTOR, ".msg.tutor")[-1]
        message.find_element(By.CLASS_NAME, "reason").send_keys("понятно, спасибо")
        message.find_element(By.CLASS_NAME, "rate-up").click()
        WebDriverWait(driver, 30).until(lambda d: "сохранена" in message.find_element(By.CLASS_NAME, "rated").text)
        driver.execute_script("window.scrollTo(0, 0)")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        try:  # a small PNG: 64 colours are plenty for a page of text
            from PIL import Image

            Image.open(args.out).convert("RGB").quantize(64).save(args.out, optimize=True)
        except ImportError:
            pass
        print(f"{args.out}: {args.out.stat().st_size} bytes")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
