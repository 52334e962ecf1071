"""Chat mode of the playground: a conversation kept across runs, each new user turn raced on the same history.

The history is a plain list of {role, content} dicts in a gr.State (None while chat mode is off). Run sends it with
the prompt (Playground.stream's `messages`: the prompt is the new user turn), so every lane decodes the same
conversation; when the run ends or is stopped, `commit` appends the user turn and the target's own answer, the
plain-decoding lane's text (core/conversation.py says why), and clears the prompt box. Trees, colours and statistics
stay per turn: each run is a fresh RunRecord. Reset empties the history. No model work here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gradio as gr

from app.state import STATE_TTL_S, RunRecord
from core.conversation import answered


@dataclass(frozen=True)
class ChatControls:
    """The chat mode's components (built inside the page's Blocks by `chat_controls`)."""

    history: gr.State
    log: gr.Chatbot
    keep: gr.Checkbox
    reset: gr.Button


def chat_controls(enabled: bool) -> ChatControls:
    """The conversation view, the 'keep the conversation' switch and the reset button; visible only for a chat
    model (`enabled`), and then on by default. Call inside a gr.Blocks context where they should appear."""
    history = gr.State([] if enabled else None, time_to_live=STATE_TTL_S)
    log = gr.Chatbot([], label="Conversation: each turn is raced on this history, which keeps the plain-decoding "
                     "lane's answer (the target's own)", elem_id="chat-log", height=None, min_height=120,
                     max_height=640, visible=enabled,
                     buttons=[], feedback_options=None, group_consecutive_messages=False)
    with gr.Row(visible=enabled):
        keep = gr.Checkbox(enabled, label="Chat: keep the conversation", elem_id="chat-keep", scale=3,
                           info="off: every run is a single question")
        reset = gr.Button("Reset conversation ↺", elem_id="chat-reset", scale=1, size="sm")
    return ChatControls(history, log, keep, reset)


def commit(tokenizer, record: RunRecord | None, history: list | None) -> tuple:
    """After a turn (its end or Stop): (history, conversation view, prompt box). The turn is appended once: only
    when it was asked on exactly this history, so a second call for the same turn, a refused request or chat mode
    switched off changes nothing (gr.skip()); an empty answer is not kept (a history needs text in every turn)."""
    skip = (gr.skip(),) * 3
    if history is None or not isinstance(record, RunRecord) or record.messages is None:
        return skip
    if list(record.messages[:-1]) != list(history):
        return skip
    ids = list(record.answer_ids) or record.ids("baseline")  # a compact record, or a live one (a cancelled run)
    answer = tokenizer.decode(ids, skip_special_tokens=True)
    if not answer.strip():  # nothing to keep (stopped at once, or only an end-of-turn token): the turn is not kept
        return skip
    new = answered(list(record.messages), answer)
    return new, new, ""


def reset_conversation(keep: bool) -> tuple:
    """Reset button: an empty conversation (None when chat mode is off), an empty view."""
    return ([] if keep else None), []


def toggle_conversation(keep: bool) -> tuple:
    """The switch: on starts an empty conversation, off runs single questions; the view follows."""
    return ([] if keep else None), gr.Chatbot(value=[], visible=keep)


def wire(controls: ChatControls, tokenizer_of: Callable[[RunRecord], object], run_event, stop_event,
         state: gr.State, prompt: gr.Textbox) -> None:
    """Listeners: commit after a run ends and after Stop (the answer decoded by `tokenizer_of(record)`, the
    tokenizer of the model the turn ran on); reset (the button or the view's own bin); the switch."""
    c = controls

    def after_turn(record, history):
        if not isinstance(record, RunRecord):
            return (gr.skip(),) * 3
        return commit(tokenizer_of(record), record, history)

    for event in (run_event, stop_event):
        event.then(after_turn, [state, c.history],
                   [c.history, c.log, prompt], queue=False, api_visibility="private", show_progress="hidden")
    c.reset.click(reset_conversation, [c.keep], [c.history, c.log], queue=False, api_visibility="private")
    c.log.clear(reset_conversation, [c.keep], [c.history, c.log], queue=False, api_visibility="private")  # its bin
    c.keep.input(toggle_conversation, [c.keep], [c.history, c.log], queue=False, api_visibility="private")
