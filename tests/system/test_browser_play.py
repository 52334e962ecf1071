"""Browser tests of what visitors do around a run (same setup as tests/system/test_browser.py: Debian chromium driven by
Playwright, tiny random models built in code): reopen a past run from the session's history, download its record,
a link that restores the prompt and settings, plots in dark mode, the "why this speedup" panel, and the model and
head picker. Screenshots go to artifacts/ (gitignored; docs/img/dark_mode.png is a copy of browser_dark.png)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app.startup import verify_costs  # noqa: E402
from app.ui import build_demo, launch_options  # noqa: E402
from test_browser import ARTIFACTS, browser, open_page, set_max_new_tokens  # noqa: E402,F401

from fakes import tiny_stack  # noqa: E402



@pytest.fixture(scope="module")
def play_url(tmp_path_factory):
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, info="Target **tiny-llama** (browser test)", examples=[],
                      verify_ms=verify_costs(baseline.target))
    _, local_url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    yield local_url
    demo.close()


ROWS_JS = ("() => parseInt(document.querySelector('#history-table [role=grid]')?.getAttribute('aria-rowcount') "
           "|| '1') - 1")


def history_rows(page) -> int:
    """Runs listed in the (open) history table: the grid's row count less its header."""
    return page.evaluate(ROWS_JS)


def run_prompt(page, prompt: str) -> None:
    """Type a prompt, Run, and wait until the run has landed in the session's (open) history table."""
    before = history_rows(page)
    page.fill("#prompt textarea", prompt)
    page.click("#run")
    page.wait_for_selector("#stats .stats-table")
    page.wait_for_function(f"n => ({ROWS_JS})() > n", arg=before)


def test_history_reopens_a_past_run_and_downloads_its_record(browser, play_url):  # noqa: F811
    ctx, page = open_page(browser, play_url)
    try:
        set_max_new_tokens(page, 12)
        page.click("#history-accordion button, #history-accordion .label-wrap")
        run_prompt(page, "The capital of France")
        first = page.inner_text("#eagle-output .gen-text")
        run_prompt(page, "def add(a, b):")
        assert history_rows(page) == 2
        table = page.inner_text("#history-table")
        assert "The capital of France" in table and "def add(a, b):" in table and "tiny-llama" in table
        # the "why" panel of the last run: the arithmetic on its own numbers and the what-if from the profile
        why = page.inner_text("#why")
        assert "predicted" in why and "measured" in why and "plain decoding step" in why
        assert "head nodes" in why  # the what-if table
        # reopen the first run: its text comes back in the panels, its prompt in the box
        page.click("#history-pick input")
        page.click("[data-testid=dropdown-option]:has-text('The capital of France')")
        page.wait_for_function("t => document.querySelector('#eagle-output .gen-text').innerText === t", arg=first)
        assert page.input_value("#prompt textarea") == "The capital of France"
        assert "tokens / s" in page.inner_text("#stats")
        page.wait_for_selector("#draft-tree .js-plotly-plot .scatterlayer .trace")
        # download the reopened run's full record
        with page.expect_download() as dl:
            page.click("#download-run")
        record = json.loads(Path(dl.value.path()).read_text())
        assert record["prompt"] == "The capital of France"
        assert record["settings"]["max_new_tokens"] == 12
        assert set(record["lanes"]) == {"baseline", "eagle2"}
        assert len(record["lanes"]["eagle2"]["token_ids"]) == 12 and record["lanes"]["eagle2"]["trees"]
        assert record["why"][0]["lane"] == "EAGLE-2" and record["why"][0]["predicted_speedup"] > 0
        with page.expect_download() as dl:
            page.click("#download-history")
        lines = Path(dl.value.path()).read_text().splitlines()
        assert len(lines) == 3 and lines[0].startswith("run,time,prompt,model")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser_history.png"), full_page=True)
    finally:
        ctx.close()


def test_a_link_restores_prompt_and_settings(browser, play_url):  # noqa: F811
    ctx, page = open_page(browser, play_url)
    try:
        page.fill("#prompt textarea", "Once upon a time, in a link")
        set_max_new_tokens(page, 37)
        page.click("#copy-link")
        page.wait_for_function("() => document.querySelector('#link textarea, #link input').value.includes('?')")
        link = page.input_value("#link textarea, #link input")
        assert "prompt=Once+upon+a+time" in link and "max_new_tokens=37" in link
    finally:
        ctx.close()
    ctx, page = open_page(browser, link.replace("temperature=0", "temperature=0.7"))
    try:
        page.wait_for_function("() => document.querySelector('#prompt textarea').value.length > 0")
        assert page.input_value("#prompt textarea") == "Once upon a time, in a link"
        page.click("#settings button, #settings .label-wrap")
        assert page.input_value("#max-new-tokens input[type=number]") == "37"
        assert page.input_value("#temperature input[type=number]") == "0.7"
    finally:
        ctx.close()


def test_dark_mode_plots_are_dark(browser, play_url):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(play_url)
        page.wait_for_selector("#prompt textarea")
        assert page.evaluate("() => document.body.classList.contains('dark') || "
                             "document.documentElement.classList.contains('dark') || "
                             "!!document.querySelector('.gradio-container.dark, .dark')")
        set_max_new_tokens(page, 24)
        page.fill("#prompt textarea", "Once upon a time")
        page.click("#run")
        page.wait_for_selector("#stats .stats-table")
        page.wait_for_selector("#draft-tree .js-plotly-plot .scatterlayer .trace")
        page.wait_for_selector("#stats-charts .js-plotly-plot .barlayer")
        for plot in ("#draft-tree", "#stats-charts"):
            bg = page.eval_on_selector(f"{plot} .main-svg", "e => getComputedStyle(e).backgroundColor")
            assert bg in ("rgba(0, 0, 0, 0)", "transparent"), bg
            paper = page.eval_on_selector(f"{plot} .main-svg .bg", "e => e.style.fill || e.getAttribute('style')")
            assert "255, 255, 255" not in paper and "white" not in paper
        for label in ("#stats-charts .xtick text", "#stats-charts .y3tick text", "#draft-tree .xtick text"):
            fill = page.eval_on_selector(label, "e => getComputedStyle(e).fill")
            r, g, b = (int(x) for x in fill[fill.index("(") + 1:fill.index(")")].split(",")[:3])
            assert min(r, g, b) > 150, (label, fill)  # light text on the dark page
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser_dark.png"), full_page=True)  # docs/img/dark_mode.png: a copy
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def picker_url(tmp_path_factory):
    """The tiny stack with two fake presets to switch between (a tiny Llama each, seeds 1 and 2)."""
    from app.picker import Bundle

    loads = []

    def loader(name: str) -> Bundle:
        loads.append(name)
        tok, baseline, eagle = tiny_stack(seed={"tiny-a": 1, "tiny-b": 2}[name])
        return Bundle(name, tok, baseline, eagle, {}, None, f"Target **{name}** (fake preset)")

    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, info="Target **tiny-llama**", examples=[], presets=["tiny-a", "tiny-b"],
                      loader=loader)
    _, local_url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    yield local_url, loads
    demo.close()


def test_switch_preset_and_refuse_a_head_of_the_wrong_shape(browser, picker_url, tmp_path):  # noqa: F811
    import torch

    from core.drafters.draft_head import HeadConfig, init_head, save_head

    url, loads = picker_url
    wrong = tmp_path / "wrong-head"
    save_head(init_head(HeadConfig.for_target(32, 320)), wrong, dtype=torch.float32)  # hidden 32, target has 64
    ctx, page = open_page(browser, url)
    try:
        page.click("#picker button, #picker .label-wrap")
        page.click("#model-choice input")
        page.click("[data-testid=dropdown-option]:has-text('tiny-b')")
        page.wait_for_function("() => document.querySelector('#picker-status').innerText.includes('loaded in')")
        assert "Serving tiny-b" in page.inner_text("#picker-status") and loads == ["tiny-b"]
        page.wait_for_function("() => document.querySelector('#model-info').innerText.includes('tiny-b')")
        page.click("#history-accordion button, #history-accordion .label-wrap")
        set_max_new_tokens(page, 8)
        run_prompt(page, "Once upon a time")
        assert "tiny-b" in page.inner_text("#history-table")  # the run was served by the new model
        # a head trained for another hidden size: refused with a message, the served head stays
        page.fill("#head-path textarea, #head-path input", str(wrong))
        page.click("#use-head")
        page.wait_for_function("() => document.querySelector('#picker-status').innerText.includes('refused')")
        status = page.inner_text("#picker-status")
        assert "does not fit tiny-b" in status and "hidden size 32" in status, status
        assert "tiny-b" in page.inner_text("#model-info")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser_picker.png"), full_page=True)
    finally:
        ctx.close()
