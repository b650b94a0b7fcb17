"""The HTML page in headless Debian Chromium through Playwright.

Needs the `playwright` Python package and Debian's `chromium` (`apt-get install -y chromium`); the tests
skip, saying which is missing, without them. Playwright's own browser download does not work offline,
so the system Chromium is launched with flags that keep it off the network.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.viewer.html import bar_count, write_html
from rlm_adapters.viewer.log_build import load
from tests.viewer.conftest import NESTED_PROMPT, SUB_RESULT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# Marks, not a module-level skip: each browser test is reported as skipped, with what to install.
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="needs the playwright Python package (pip install playwright, or pip install -e '.[dev]')",
    ),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="needs Debian's Chromium browser (apt-get install chromium)"
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (starting it is the slow part)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


class Opened:
    """A page with what it logged and requested."""

    def __init__(self, page: Any, url: str) -> None:
        self.page = page
        self.url = url
        self.console: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        page.on("pageerror", lambda error: self.console.append(f"pageerror: {error}"))
        page.on("request", lambda request: self.requests.append(request.url))
        page.goto(url)
        # Selector waits, not wait_for_function: the page's CSP forbids the eval that one needs.
        page.wait_for_selector("#tree details.run[open]")


@pytest.fixture
def opened(browser: Any, recorded_log: Path, tmp_path: Path) -> Iterator[Opened]:
    """The recorded run's page, opened in a fresh browser context."""
    html = write_html(recorded_log, tmp_path / "run.html")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Opened(context.new_page(), html.as_uri())
    finally:
        context.close()


def test_page_loads_without_errors_or_network(opened: Opened) -> None:
    opened.page.locator("details.iter > summary").first.click()
    assert opened.console == []
    assert opened.requests == [opened.url]
    assert opened.page.locator("header h1").inner_text().startswith("RLM run")
    assert "42" in opened.page.locator("header .answer").inner_text()


def test_timeline_draws_one_bar_per_turn_cell_and_batch(opened: Opened, recorded_log: Path) -> None:
    expected = bar_count(load(recorded_log))
    assert expected == 11
    assert opened.page.locator("#timeline .bar").count() == expected
    assert opened.page.locator("#timeline .bar.bar-batch").count() == 2
    assert opened.page.locator("#timeline .lane").count() == 2  # the run and its nested run


def test_expanding_a_cell_shows_its_code_and_output(opened: Opened) -> None:
    page = opened.page
    assert page.locator("pre.code").count() == 0  # nothing is built before it is opened
    page.locator("details.iter > summary").first.click()
    page.locator("details.cell > summary").first.click()
    assert "print(context[:60])" in page.locator("details.cell pre.code").first.inner_text()
    assert "line 19" in page.locator("details.cell pre.output").first.inner_text()


def test_search_finds_a_sub_call_and_reveals_it(opened: Opened) -> None:
    page = opened.page
    page.fill("#search", SUB_RESULT.lower())
    page.wait_for_selector("#results .hit")
    assert page.locator("#results .count").inner_text() == "1 match"
    page.locator("#results .hit").first.click()
    call = page.locator(".call", has_text=SUB_RESULT)
    assert call.is_visible() and "Find the needle in part 3" in call.inner_text()
    # A nested run's sub-call is found too, and revealing it opens the nested run.
    page.fill("#search", NESTED_PROMPT)
    page.locator("#results .count", has_text="matches").wait_for()
    page.locator("#results .hit", has_text="llm_query prompt").click()
    assert page.locator(".call", has_text=NESTED_PROMPT).is_visible()
    assert page.locator("details.run[data-ref='run:1']").get_attribute("open") is not None
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "viewer.png"), full_page=True)
    assert opened.console == [] and opened.requests == [opened.url]


def test_clicking_a_bar_opens_its_item(opened: Opened) -> None:
    page = opened.page
    page.locator("#timeline .bar.bar-batch").first.click()
    assert page.locator("details.batch[open] .call").count() == 4


def _synthetic_log(path: Path, batches: int, per_batch: int) -> Path:
    """One turn whose cell sends `batches` batches of `per_batch` calls, one second apart."""
    base = {"type": "event", "run_id": "a" * 32, "depth": 0, "parent_run_id": None}
    records: list[dict[str, Any]] = [
        {"type": "header", "run_id": "a" * 32, "time": 0.0, "query": "big", "context": {}, "config": {}},
        {**base, "kind": "run_start", "time": 0.0, "query": "big", "context_description": {}, "root_model": "m"},
        {
            **base,
            "kind": "root_call",
            "time": 1.0,
            "iteration": 1,
            "messages_sent": [],
            "reply": "go",
            "model": "m",
            "input_tokens": 1,
            "output_tokens": 1,
            "cost": 0.0,
            "duration": 1.0,
        },
    ]
    for n in range(batches * per_batch):
        call = {**base, "call_id": f"c{n}", "batch_id": f"b{n // per_batch}", "call_kind": "llm_query", "model": "s"}
        records.append(
            {
                **call,
                "kind": "sub_call_start",
                "time": 1.0 + n // per_batch,
                "batch_size": per_batch,
                "prompt": f"prompt {n}",
            }
        )
        records.append(
            {
                **call,
                "kind": "sub_call_end",
                "time": 1.5 + n // per_batch,
                "response": f"reply {n}",
                "error": None,
                "input_tokens": 1,
                "output_tokens": 1,
                "cost": 0.0,
                "duration": 0.5,
            }
        )
    end = 2.0 + batches
    records.append(
        {
            **base,
            "kind": "cell",
            "time": end,
            "iteration": 1,
            "index": 1,
            "code": "fan_out()",
            "output": "",
            "error": None,
            "duration": end - 1.0,
        }
    )
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n", encoding="utf-8")
    return path


def test_big_batches_render_a_page_at_a_time(browser: Any, tmp_path: Path) -> None:
    log = _synthetic_log(tmp_path / "wide.jsonl", batches=1, per_batch=120)
    context = browser.new_context()
    try:
        opened = Opened(context.new_page(), write_html(log, tmp_path / "wide.html").as_uri())
        page = opened.page
        assert page.locator(".call").count() == 0 and page.locator("details.batch").count() == 0
        page.locator("#timeline .bar.bar-batch").click()
        assert page.locator(".call").count() == 50
        more = page.locator("button.more")
        assert more.inner_text() == "show 50 more of 70"
        more.click()
        assert page.locator(".call").count() == 100 and more.inner_text() == "show 20 more of 20"
        # Revealing a call past what is drawn draws up to it.
        page.fill("#search", "reply 117")
        page.locator("#results .hit").click()
        assert page.locator("#call-117").is_visible() and page.locator(".call").count() == 118
        assert opened.console == []
    finally:
        context.close()


def test_a_crowded_timeline_merges_bars_closer_than_a_pixel(browser: Any, tmp_path: Path) -> None:
    log = _synthetic_log(tmp_path / "crowded.jsonl", batches=3000, per_batch=1)
    assert bar_count(load(log)) == 3002
    context = browser.new_context()
    try:
        opened = Opened(context.new_page(), write_html(log, tmp_path / "crowded.html").as_uri())
        bars = opened.page.locator("#timeline .bar")
        # Batches 1 s apart on a 3000 s axis are closer than its 1.5 s merge step: one bar, plus turn and cell.
        assert bars.count() == 3
        assert opened.page.locator("#timeline .bar.merged").count() > 0
        opened.page.locator("#timeline .bar.bar-batch").first.click()
        assert opened.page.locator("details.batch[open]").count() == 1
        # The cell's 3000 batches are drawn 50 at a time too.
        assert opened.page.locator("details.batch").count() == 50
        assert opened.console == []
    finally:
        context.close()


def test_summary_cards_cannot_be_misread(opened: Opened) -> None:
    """Model usage below the root counts nested runs' root turns; REPL sub-calls do not (issue 17, item 7)."""
    cards = {
        card.locator(".k").inner_text().lower(): card.locator(".v").inner_text()
        for card in opened.page.locator("#summary .card").all()
    }
    assert "sub" not in cards and "sub-calls" not in cards
    assert cards["root model (depth 0)"].startswith("3 calls")
    # 4 + 1 llm_query from the REPLs, plus the 2 root turns of the run nested by rlm_query.
    assert cards["other model calls (incl. nested roots)"].startswith("7 calls")
    assert cards["llm_query sub-calls (all runs)"] == "5 in 2 batches"
    assert cards["runs"] == "2 (1 nested)"


def test_the_page_runs_only_its_own_script(browser: Any, recorded_log: Path, tmp_path: Path) -> None:
    """The policy allows the viewer's script by hash: should an escape slip, an injected script does not run."""
    page_text = write_html(recorded_log, tmp_path / "run.html").read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page_text)
    assert policy is not None and "'unsafe-inline'" not in policy[1].split("script-src", 1)[1].split(";")[0]
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/]+=*';", policy[1])
    # An escaping slip, simulated: raw HTML closing the data element, an inline script and an event handler.
    injected = (
        "</script><script>document.body.setAttribute('data-pwned', 'script')</script>"
        "<img src=x onerror=\"document.body.setAttribute('data-pwned', 'handler')\"><script type=\"application/json\">"
    )
    slipped = page_text.replace('<script type="application/json" id="rlm-data">', injected + '<script id="x">', 1)
    (tmp_path / "slipped.html").write_text(slipped, encoding="utf-8")
    context = browser.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text))
        page.goto((tmp_path / "slipped.html").as_uri())
        page.wait_for_selector("#app:not(:has(.loading))")
        assert page.locator("body[data-pwned]").count() == 0
        assert any("Content Security Policy" in text for text in errors), errors
        # The viewer's own script ran and said why it cannot show the run, instead of staying on "Loading".
        assert "This page cannot show the trajectory" in page.locator("#app").inner_text()
    finally:
        context.close()


def test_a_log_with_odd_but_valid_values_opens(browser: Any, recorded_log: Path, tmp_path: Path) -> None:
    """NaN and infinities in the free-form configuration, lone surrogates in texts: the page still renders."""
    lines = recorded_log.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["config"]["limits"] = {"max_cost": float("inf"), "odd": float("nan")}
    start = json.loads(lines[1])
    assert start["kind"] == "run_start"
    header["query"] = start["query"] = "half \udc80 a character"
    odd = tmp_path / "odd.jsonl"
    odd.write_text("\n".join([json.dumps(header), json.dumps(start), *lines[2:]]) + "\n", encoding="utf-8")
    context = browser.new_context()
    try:
        opened = Opened(context.new_page(), write_html(odd, tmp_path / "odd.html").as_uri())
        assert "half \\udc80 a character" in opened.page.locator("header .query").inner_text()
        assert opened.console == []
    finally:
        context.close()
