"""The page at / (runtime/http/serving/page.py and static/), driven in a real headless Chromium.

Debian's `chromium` and `chromium-driver` (installed by .ci/run) through selenium, told both paths so
it downloads nothing; without them every browser test is skipped with the reason. Tiny Orpheus
speaks into an <audio> element from a blob URL, which plays; fake BAGEL's image appears in an
<img>; the HTTP toy streams a chat answer about an attached PNG; a wrong API key and a refused
request show the server's error as text. Every wait is bounded (WAIT seconds).
"""

from __future__ import annotations

import fnmatch
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.http.server import API_KEY, ROOT, Server, compile_plan

WAIT = 30.0  # seconds any one thing in the browser may take
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
STATIC = ROOT / "runtime" / "http" / "serving" / "static"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium or chromedriver on PATH (apt-get install chromium chromium-driver; .ci/run does)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--mute-audio",
                "--autoplay-policy=no-user-gesture-required", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def orpheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    plan = compile_plan(tmp_path_factory.mktemp("orpheus"), ROOT / "models" / "orpheus.walk")
    server = Server(plan, "--api-key", API_KEY, ready_timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bagel(bagel_plan: Path) -> Iterator[Server]:
    server = Server(bagel_plan, "--fake", "--api-key", API_KEY)
    yield server
    server.stop()


def until(browser: Any, script: str) -> Any:
    """Wait (WAIT seconds at most) until `script` returns something truthy in the page; return it."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT, poll_frequency=0.1).until(lambda b: b.execute_script(script),
                                                                   f"the page never satisfied: {script}")


def open_page(browser: Any, server: Server, key: str, route: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/")
    field = browser.find_element(By.ID, "api-key")
    field.clear()
    field.send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    if route:
        until(browser, f"return !document.querySelector('#{route}').hidden")


def fill(browser: Any, selector: str, text: str) -> None:
    from selenium.webdriver.common.by import By

    element = browser.find_element(By.CSS_SELECTOR, selector)
    element.clear()
    element.send_keys(text)


def error_of(browser: Any, selector: str) -> str:
    return until(browser, f"const e = document.querySelector('{selector}'); return !e.hidden && e.textContent")


def test_the_page_is_static_self_contained_and_outside_the_api(orpheus: Server) -> None:
    page = httpx.get(f"{orpheus.url}/", timeout=10)  # no key: the page is open, its routes are not
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name in ("index.html", "app.js", "style.css"):
        text = (STATIC / name).read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, name  # no external fetch
        assert httpx.get(f"{orpheus.url}/static/{name}", timeout=10).status_code == 200
    missing = httpx.get(f"{orpheus.url}/static/secret.py", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert "/" not in httpx.get(f"{orpheus.url}/openapi.json", timeout=10).json()["paths"]


def test_every_static_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["wgc.runtime.http.serving"]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_typed_text_is_spoken_into_an_audio_element_that_plays(browser: Any, orpheus: Server) -> None:
    open_page(browser, orpheus, API_KEY, "speech")
    assert browser.execute_script("return document.querySelector('#speech [name=voice]').value") == "tara"
    fill(browser, "#speech [name=params]", '{"max_tokens": 84}')
    browser.execute_script("document.querySelector('#speech button[type=submit]').click()")
    audio_seconds = until(browser, "const a = document.querySelector('#speech audio');"
                                   "return a.src.startsWith('blob:') && a.readyState >= 1 && a.error === null && a.duration")
    assert abs(audio_seconds - 9 * 512 / 6000) < 0.01  # 9 windows of 512 samples at the tiny SNAC's 6000 Hz
    played = browser.execute_async_script("const done = arguments[arguments.length - 1];"
                                          "const a = document.querySelector('#speech audio'); a.currentTime = 0;"
                                          "a.play().then(() => done('playing'), (e) => done(e.name));")
    assert played == "playing"
    assert until(browser, "const a = document.querySelector('#speech audio'); return a.currentTime > 0 || a.ended")
    assert browser.execute_script("return document.querySelector('#speech .error').hidden")
    assert "at 6000 Hz" in browser.execute_script("return document.querySelector('#speech .status').textContent")


def test_a_prompt_gives_an_image_on_the_page(browser: Any, bagel: Server) -> None:
    open_page(browser, bagel, API_KEY, "images")
    fill(browser, "#images [name=size]", "64x48")
    fill(browser, "#images [name=params]", '{"steps": 2}')
    browser.execute_script("document.querySelector('#images button[type=submit]').click()")
    size = until(browser, "const i = document.querySelector('#images img');"
                          "return i.complete && i.naturalWidth > 0 && [i.naturalWidth, i.naturalHeight]")
    assert size == [64, 48]
    assert browser.execute_script("return document.querySelector('#images img').src").startswith(
        "data:image/png;base64,")


def test_a_chat_with_an_image_attached_streams_its_answer(browser: Any, toy: Server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    picture = tmp_path / "dot.png"
    Image.new("RGB", (8, 6), (200, 30, 30)).save(picture)
    open_page(browser, toy, API_KEY, "chat")
    fill(browser, "#chat [name=message]", "hello")
    browser.find_element(By.CSS_SELECTOR, "#chat [name=file]").send_keys(str(picture))
    browser.execute_script("document.querySelector('#chat button[type=submit]').click()")
    status = until(browser, "const s = document.querySelector('#chat .status').textContent;"
                            "return s.startsWith('done') && s")
    chunks = int(status.split()[1])
    assert chunks > 3  # the answer came as a stream of chunks, one byte-token each, not as one body
    log = browser.execute_script("return [...document.querySelectorAll('#chat .log li')].map(l => l.textContent)")
    assert log == ["hello", "Echo: hello[image 6x8x3]"]  # the toy names the image it saw: [H, W, C]
    assert browser.execute_script("return document.querySelector('#chat .log li.user img').naturalWidth") == 8


def test_a_wrong_api_key_and_a_refused_request_are_shown_as_text(browser: Any, orpheus: Server) -> None:
    open_page(browser, orpheus, "not-the-key", "")
    message = error_of(browser, "#model-error")
    assert message == "401 invalid_api_key: a valid `Authorization: Bearer <key>` header is required"
    assert browser.execute_script("return document.querySelector('#speech').hidden")
    open_page(browser, orpheus, API_KEY, "speech")
    assert browser.execute_script("return document.querySelector('#model-error').hidden")
    fill(browser, "#speech [name=params]", '{"max_tokens": 0}')  # below the plan's bound 1..8192
    browser.execute_script("document.querySelector('#speech button[type=submit]').click()")
    refused = error_of(browser, "#speech .error")
    assert refused == "422 validation_error: params.max_tokens: Input should be greater than or equal to 1"
    fill(browser, "#speech [name=params]", "{not json")
    browser.execute_script("document.querySelector('#speech button[type=submit]').click()")
    assert until(browser, "const e = document.querySelector('#speech .error').textContent;"
                          "return e.startsWith('params: not JSON') && e")
