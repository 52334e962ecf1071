"""Conversations: a message history ({role, content} dicts) checked here and encoded with the model's chat template
by core.prompt.encode_messages (the one place prompts become ids).

A multi-turn race keeps one history: every new user turn is decoded by each method on the same prompt ids (the
history so far, the new user turn, the opened assistant turn), and the history then takes the target's own answer,
the plain-decoding lane's text (in fp32 greedy EAGLE-2's is the same token for token). This is how Spec-Bench and
EAGLE run MT-bench's second turns: the first turn's answer goes back into the conversation as text. Pure functions
of a tokenizer; nothing here loads a model.
"""
from __future__ import annotations

ROLES = ("system", "user", "assistant")
MAX_MESSAGES = 64  # a request's history, at most; the token cap bounds the rest


def check_messages(messages: object, max_messages: int = MAX_MESSAGES) -> list[dict[str, str]]:
    """A message history as given by a client -> a fresh list of {"role", "content"} dicts, or ValueError with one
    line. Roles are system, user and assistant; a system message may only come first; the last message is the user
    turn to answer; content is non-empty text."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages must be a list of {{role, content}} objects, got {type(messages).__name__}")
    if not messages:
        raise ValueError("messages is empty: give at least one user message")
    if len(messages) > max_messages:
        raise ValueError(f"messages has {len(messages)} entries; at most {max_messages} are accepted")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) - {"role", "content"} or not {"role", "content"} <= set(m):
            raise ValueError(f"message {i} must be an object with exactly the keys role and content")
        role, content = m["role"], m["content"]
        if role not in ROLES:
            raise ValueError(f"message {i} has role {role!r}; use one of {', '.join(ROLES)}")
        if role == "system" and i:
            raise ValueError(f"message {i}: a system message may only come first")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"message {i} ({role}) needs non-empty text content")
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "user":
        raise ValueError("the last message must be the user turn to answer")
    return out


def with_system(messages: list[dict[str, str]], system: str | None) -> list[dict[str, str]]:
    """The history with the app's system prompt in front, unless it has no system prompt or starts with its own."""
    if not system or not system.strip() or (messages and messages[0]["role"] == "system"):
        return list(messages)
    return [{"role": "system", "content": system}, *messages]



def answered(messages: list[dict[str, str]], answer: str) -> list[dict[str, str]]:
    """The history after the turn: the messages asked plus the target's answer as the assistant's turn."""
    return [*messages, {"role": "assistant", "content": answer}]


def turn_messages(turns: list[str], answers: list[str], system: str | None = None) -> list[dict[str, str]]:
    """Turn k of a multi-turn question (k = len(answers) + 1): user turns 1..k with the answers to turns 1..k-1
    between them, as MT-bench's second turns are asked."""
    if len(answers) >= len(turns):
        raise ValueError(f"turn {len(answers) + 1} asked of a question with {len(turns)} turns")
    msgs: list[dict[str, str]] = []
    for q, a in zip(turns, answers):
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return with_system(msgs + [{"role": "user", "content": turns[len(answers)]}], system)
