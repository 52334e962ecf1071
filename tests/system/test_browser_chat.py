"""Chat mode in a real browser (Debian chromium driven by Playwright) on a tiny model with a chat template: two
turns, each raced on the same history, the second asked with the first turn's baseline answer in its prompt; trees
and statistics per turn; Reset starts a new conversation. Screenshots go to artifacts/ (gitignored). Like
tests/system/test_browser.py it FAILS, not skips, without playwright or chromium."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app.ui import build_demo, launch_options  # noqa: E402
from core.prompt import encode_messages  # noqa: E402
from fakes import tiny_stack  # noqa: E402
from test_browser import ARTIFACTS, browser, open_page, set_max_new_tokens  # noqa: E402,F401  (fixture)
from test_chat import TEMPLATE, Recording  # noqa: E402

N = 16
FIRST, SECOND, THIRD = "Once upon a time", "And then?", "The capital of France"


@pytest.fixture(scope="module")
def chat_app(tmp_path_factory):
    """The app on a tiny Llama whose tokenizer has a chat template; both lanes record the prompts they decode."""
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, baseline, eagle = tiny_stack()
    tok.chat_template = TEMPLATE
    rec_b, rec_e = Recording(baseline), Recording(eagle)
    demo = build_demo(tok, rec_b, rec_e, info="Target **tiny-llama** (chat browser test)")
    _, local_url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    yield local_url, tok, rec_b, rec_e
    demo.close()


def messages_shown(page) -> int:
    return page.locator("#chat-log [data-testid='user'], #chat-log [data-testid='bot']").count()


def ask(page, text: str, shown_after: int) -> None:
    """Type a turn, Run, and wait until the conversation shows `shown_after` messages (the turn committed)."""
    page.fill("#prompt textarea", text)
    page.click("#run")
    page.wait_for_function(
        "n => document.querySelectorAll(\"#chat-log [data-testid='user'], #chat-log [data-testid='bot']\").length"
        " === n", arg=shown_after)


def test_two_turns_then_reset(browser, chat_app):
    url, tok, rec_b, rec_e = chat_app
    ctx, page = open_page(browser, url)
    try:
        assert page.locator("#chat-log").is_visible() and page.locator("#chat-reset").is_visible()
        assert page.is_checked("#chat-keep input[type=checkbox]")  # a chat model starts in chat mode
        set_max_new_tokens(page, N)

        ask(page, FIRST, 2)
        assert page.input_value("#prompt textarea") == ""  # the turn moved into the conversation
        first = [{"role": "user", "content": FIRST}]
        assert rec_b.prompts[-1] == rec_e.prompts[-1] == encode_messages(tok, first)
        assert "token-identical" in page.inner_text("#stats")
        answer1 = page.inner_text("#chat-log [data-testid='bot']").strip()
        assert answer1  # the model's own words (rendered as markdown by the chat view)
        page.wait_for_selector("#draft-tree .js-plotly-plot .scatterlayer .trace")

        ask(page, SECOND, 4)
        # the second turn was raced, by both lanes, on the history holding the first turn's baseline answer
        ids_answer1 = rec_b.prompts[-1]
        assert rec_e.prompts[-1] == ids_answer1
        shown_answer = tok.decode(_answer_ids(rec_b, 0), skip_special_tokens=True)
        second = first + [{"role": "assistant", "content": shown_answer}, {"role": "user", "content": SECOND}]
        assert ids_answer1 == encode_messages(tok, second)
        assert page.locator("#chat-log [data-testid='user']").nth(1).inner_text().strip() == SECOND
        # statistics and tree are per turn: the panels count this turn's tokens only
        assert f"{N} tokens" in page.inner_text("#baseline-output .panel-meta") or "done" in page.inner_text(
            "#baseline-output .panel-meta")
        assert "token-identical" in page.inner_text("#stats")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser_chat.png"), full_page=True)

        page.click("#chat-reset")
        page.wait_for_function(
            "() => document.querySelectorAll(\"#chat-log [data-testid='user']\").length === 0")
        ask(page, THIRD, 2)
        assert rec_b.prompts[-1] == encode_messages(tok, [{"role": "user", "content": THIRD}])  # a new conversation
    finally:
        ctx.close()


def _answer_ids(recorder: Recording, call: int) -> list[int]:
    """The tokens the recorded decoder produced on its `call`-th prompt, by decoding that prompt again (greedy,
    deterministic): what the app committed as the answer."""
    from core.engine.config import DecodeConfig

    return [t for ev in recorder.decoder.generate(recorder.prompts[call], DecodeConfig(max_new_tokens=N))
            for t in ev.new_token_ids]
