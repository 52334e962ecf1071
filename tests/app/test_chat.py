"""Conversations: the message-history checks and encoding (core/conversation.py), `/run` with a history, the chat
panel's commit and reset (app/chat.py), fp32 losslessness on a second turn, and vLLM's metric names in `/run`."""
from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from app.chat import commit, reset_conversation, toggle_conversation
from app.handlers import Playground
from app.inputs import RunSettings
from core.conversation import answered, check_messages, turn_messages, with_system
from core.engine.metrics_names import mean_acceptance_length, serving_names
from core.prompt import encode_messages
from fakes import CharTokenizer, ReplayDecoder, baseline_events, eagle_events, tiny_stack, tiny_tokenizer

TEMPLATE = ("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")
ANSWER = "Paris is the capital."


def chat_tokenizer():
    tok = tiny_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


class ChatCharTokenizer(CharTokenizer):
    """The replay decoders' character tokenizer (id = code point) with TEMPLATE as its chat template."""

    chat_template = TEMPLATE

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
        text = "".join(f"[{m['role']}]{m['content']}" for m in messages) + ("[assistant]" if add_generation_prompt
                                                                             else "")
        return self.encode(text)


class Recording:
    """A decoder that records the prompt ids of every call and passes the call on (the real decoder's events)."""

    def __init__(self, decoder):
        self.decoder, self.method, self.note, self.target = decoder, decoder.method, decoder.note, decoder.target
        self.prompts: list[list[int]] = []

    def generate(self, prompt_ids, cfg, should_stop=None):
        self.prompts.append(list(prompt_ids))
        return self.decoder.generate(prompt_ids, cfg, should_stop)


def replay_playground(**kw):
    tok = ChatCharTokenizer()
    b = ReplayDecoder("baseline", baseline_events(ANSWER))
    e = ReplayDecoder("eagle2", eagle_events(ANSWER, plan=[2, 3, 0]))
    return Playground(tok, b, e, **kw), tok, b, e


# ------------------------------------------------------------------------------------------ core/conversation.py

def test_check_messages_accepts_a_history_and_refuses_bad_ones_in_one_line():
    ok = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "More?"}]
    assert check_messages(ok) == ok and check_messages(ok) is not ok
    bad = [("not a list", "must be a list"), ([], "is empty"),
           ([{"role": "bot", "content": "x"}], "role 'bot'"),
           ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}],
            "system message may only come first"),
           ([{"role": "user", "content": "  "}], "non-empty text"),
           ([{"role": "user", "content": "a", "name": "x"}], "exactly the keys"),
           ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "last message must be the user"),
           ([{"role": "user", "content": "a"}] * 70, "at most 64")]
    for value, words in bad:
        with pytest.raises(ValueError, match=words):
            check_messages(value)


def test_turn_messages_puts_each_answer_between_the_user_turns():
    msgs = turn_messages(["Q1", "Q2"], ["A1"], system="S")
    assert msgs == [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
                    {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    assert turn_messages(["Q1", "Q2"], []) == [{"role": "user", "content": "Q1"}]
    with pytest.raises(ValueError, match="turn 3"):
        turn_messages(["Q1", "Q2"], ["A1", "A2"])
    assert with_system(msgs, "other") == msgs  # a history with its own system prompt keeps it
    tok = chat_tokenizer()
    assert encode_messages(tok, msgs) == list(tok.encode("[system]S[user]Q1[assistant]A1[user]Q2[assistant]"))
    with pytest.raises(ValueError, match="chat model"):
        encode_messages(tiny_tokenizer(), msgs)


# ------------------------------------------------------------------------------------------ /run with a history

def test_run_with_a_history_encodes_the_whole_conversation_and_returns_it_answered():
    pg, tok, b, e = replay_playground(system="Be brief.")
    history = [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}]
    out = pg.run("And of Italy?", 64, messages=history)
    expected = tok.encode("[system]Be brief.[user]Capital of France?[assistant]Paris.[user]And of Italy?[assistant]")
    assert b.calls[-1][0] == e.calls[-1][0] == list(expected)  # both lanes race on the same history
    assert out["identical"] and out["baseline_text"] == ANSWER
    assert out["messages"] == history + [{"role": "user", "content": "And of Italy?"},
                                         {"role": "assistant", "content": ANSWER}]
    # the history may also end with the user turn itself (prompt left empty)
    again = pg.run("", 64, messages=out["messages"][:-1])
    assert b.calls[-1][0] == list(expected) and again["messages"] == out["messages"]
    # without a history nothing changes: one user turn, no messages in the result
    single = pg.run("And of Italy?", 64)
    assert "messages" not in single and b.calls[-1][0] == pg.encode("And of Italy?")


@pytest.mark.parametrize("messages,words", [
    ([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}], "role"),
    ("hello", "must be a list"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "last message must be the user"),
])
def test_run_refuses_a_bad_history_with_a_clear_message(messages, words):
    pg, *_ = replay_playground()
    with pytest.raises(gr.Error, match=words):
        pg.run("", 8, messages=messages)


def test_a_conversation_needs_a_chat_model():
    tok, baseline, eagle = tiny_stack()  # no chat template: raw mode
    pg = Playground(tok, baseline, eagle)
    with pytest.raises(gr.Error, match="needs a chat model"):
        pg.run("Hi", 4, messages=[])


def test_second_turn_is_lossless_in_fp32_and_drafts_get_accepted():
    """Greedy fp32 on a tiny random Llama: turn 2, asked on a history holding turn 1's baseline answer, decodes the
    same tokens with EAGLE-2 as with plain decoding; a drafter that plants the known continuation makes drafts of
    several depths get accepted on that second turn, so acceptance is exercised, not only the bonus token."""
    tok, baseline, eagle = tiny_stack()
    tok.chat_template = TEMPLATE
    pg = Playground(tok, baseline, eagle)
    first = pg.run("Once upon a time", 24, messages=[])
    assert first["identical"] and first["baseline_token_ids"]
    history = first["messages"]
    assert history[-1] == {"role": "assistant", "content": first["baseline_text"]}
    turn2 = encode_messages(tok, history + [{"role": "user", "content": "And then?"}])
    ref_ids = turn2 + [t for ev in baseline.generate(turn2, pg.prepare(RunSettings("x", 24, 0.0, 1.0, 0, 8, 4, 2))[1])
                       for t in ev.new_token_ids]
    tok2, baseline2, eagle2 = tiny_stack(reference=ref_ids)
    tok2.chat_template = TEMPLATE
    rec_b, rec_e = Recording(baseline2), Recording(eagle2)
    second = Playground(tok2, rec_b, rec_e).run("And then?", 24, 0.0, 1.0, 0, 8, 4, 2, 0, messages=history)
    assert rec_b.prompts[-1] == rec_e.prompts[-1] == turn2  # the first answer is in the second prompt
    assert second["identical"] and second["baseline_token_ids"] == ref_ids[len(turn2):]
    assert second["eagle"]["num_accepted_tokens"] > 0 and second["eagle"]["mean_acceptance_length"] > 1.0


# ------------------------------------------------------------------------------------------ vLLM's metric names

def test_run_reports_vllm_metric_names_beside_the_old_keys():
    pg, *_ = replay_playground()
    out = pg.run("Hi", 64)
    e, b = out["eagle"], out["baseline"]
    # 21 characters: a prefill token, then steps accepting 2, 3, 0, 2, 3, 0, 2 drafts (+1 target token each) and a
    # last step accepting the one remaining character (no bonus: the text ends)
    assert e["num_drafts"] == e["steps"] == 8 and e["num_draft_tokens"] == e["drafted_tokens"]
    assert e["num_accepted_tokens"] == e["accepted_drafts"] == 2 + 3 + 0 + 2 + 3 + 0 + 2 + 1
    assert e["mean_acceptance_length"] == pytest.approx(1 + 13 / 8)
    assert e["draft_acceptance_rate"] == e["accept_rate"] and e["per_position_acceptance_rate"] == e["depth_accept"]
    assert e["tau"] == pytest.approx(21 / 9)  # tau counts the prefill pass too
    assert b["num_drafts"] == 0 and b["mean_acceptance_length"] == 1.0
    assert serving_names({}) == {} and mean_acceptance_length(0, 0) == 1.0


# ------------------------------------------------------------------------------------------ app/chat.py

def test_commit_appends_the_baseline_answer_once_and_reset_clears():
    pg, tok, b, e = replay_playground()
    outs = list(pg.stream("Capital of France?", 64, 0.0, 1.0, 0, 24, 6, 6, messages=[]))
    record = outs[-1][-1]  # the compact record the state keeps
    assert record.messages == [{"role": "user", "content": "Capital of France?"}]
    history, shown, prompt = commit(tok, record, [])
    assert history == shown == [{"role": "user", "content": "Capital of France?"},
                                {"role": "assistant", "content": ANSWER}]
    assert prompt == ""
    again = commit(tok, record, history)  # Stop and the run's end both commit: the second is a no-op
    assert all(x is gr.skip() or x == gr.skip() for x in again)
    assert commit(tok, record, None) == (gr.skip(),) * 3  # chat mode off: nothing kept
    live = outs[0][-1]  # the live record (events, no answer_ids yet): a cancelled run's state
    assert live.answer_ids == () and commit(tok, live, [])[0] == history
    empty = dataclasses.replace(record, answer_ids=(0,))  # only the end-of-turn token: nothing to keep
    assert commit(tok, empty, []) == (gr.skip(),) * 3
    outs = list(pg.stream("And of Italy?", 64, 0.0, 1.0, 0, 24, 6, 6, messages=history))
    assert b.calls[-1][0] == list(tok.encode(
        f"[user]Capital of France?[assistant]{ANSWER}[user]And of Italy?[assistant]"))
    history2, *_ = commit(tok, outs[-1][-1], history)
    assert len(history2) == 4 and history2[:2] == history
    assert reset_conversation(True)[:2] == ([], []) and reset_conversation(False)[:2] == (None, [])
    assert toggle_conversation(False)[0] is None and toggle_conversation(True)[0] == []
    assert answered([], "x") == [{"role": "assistant", "content": "x"}]


def test_the_token_level_lane_races_the_same_conversation():
    """A third lane (prompt lookup) in a conversation turn decodes the same history as the other two, losslessly."""
    from conftest import tiny_drafter

    from core.engine.eagle import Eagle2Decoder

    tok, baseline, eagle = tiny_stack()
    tok.chat_template = TEMPLATE
    rec = {k: Recording(d) for k, d in (("baseline", baseline), ("eagle", eagle),
                                         ("lookup", Eagle2Decoder(baseline.target, tiny_drafter("lookup",
                                                                                                 baseline.target))))}
    pg = Playground(tok, rec["baseline"], rec["eagle"], compare={"lookup": rec["lookup"]})
    history = [{"role": "user", "content": "Once upon a time"}, {"role": "assistant", "content": "there was a fox"}]
    out = pg.run("And then?", 16, compare="lookup", messages=history)
    expected = encode_messages(tok, history + [{"role": "user", "content": "And then?"}])
    assert all(r.prompts[-1] == expected for r in rec.values())
    assert out["identical"] and out["compare_identical"] and out["compare"]["mean_acceptance_length"] >= 1.0
    assert out["messages"][-1] == {"role": "assistant", "content": out["baseline_text"]}
