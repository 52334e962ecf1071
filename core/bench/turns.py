"""The bench's second turns (`--turns 2`): MT-bench's follow-up questions asked as the second turn of a conversation.

As Spec-Bench and EAGLE run them (Spec-Bench evaluation/eval.py: the first turn's output text goes back into the
conversation, `conv.messages[-1][-1] = output`, before the second turn's prompt is built), the conversation holds
the first turn's answer as text, and every method answers the second turn on the same prompt: the chat template
over [user turn 1, the answer, user turn 2]. The answer is the `baseline` method's (the target's own greedy or
sampled output; in fp32 greedy every lossless method's is the same token for token). Pure given a tokenizer.
"""
from __future__ import annotations

from core.bench.questions import BenchError
from core.conversation import turn_messages
from core.prompt import encode_messages


def check_turns(turns: int, methods: tuple[str, ...], raw: bool) -> None:
    """--turns: 1 or 2; the second turn needs the baseline's first answer and a chat template."""
    if turns not in (1, 2):
        raise BenchError(f"--turns must be 1 or 2, got {turns}")
    if turns == 2 and "baseline" not in methods:
        raise BenchError("--turns 2 puts the baseline's first answer into the conversation: add the method baseline")
    if turns == 2 and raw:
        raise BenchError("--turns 2 asks the second turn in the chat template: leave out --raw")


def second_turns(questions: list[dict], rows: list[dict], tokenizer) -> tuple[list[dict], list[list[int]]]:
    """(questions, prompt ids) of the second turns: each question with two or more turns, marked turn 2, its prompt
    the conversation [turn 1, the baseline's answer to it (decoded, special tokens dropped), turn 2]. `rows` are the
    first turn's bench rows, which carry each method's token_ids."""
    answers = {r["question_id"]: r["token_ids"] for r in rows if r["method"] == "baseline" and r.get("turn", 1) == 1}
    out_q, out_p = [], []
    for q in questions:
        if len(q["turns"]) < 2:
            continue
        if q["question_id"] not in answers:
            raise BenchError(f"question {q['question_id']}: no baseline answer to its first turn")
        answer = tokenizer.decode(answers[q["question_id"]], skip_special_tokens=True)
        out_q.append({**q, "turn": 2})
        out_p.append(encode_messages(tokenizer, turn_messages(q["turns"][:2], [answer])))
    return out_q, out_p


def rows_of_turn(rows: list[dict], turn: int) -> list[dict]:
    return [r for r in rows if r.get("turn", 1) == turn]
