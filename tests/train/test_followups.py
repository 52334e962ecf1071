"""Second-turn training data (core/train/followups.py) on a tiny Llama with a word tokenizer and a chat template.

Guards: every second-turn sequence starts from the conversation [prompt, the target's own first answer, follow-up]
in the chat template; a row's own follow-up wins over a generic one; conversations over the prompt limit are left
out, not cut; a model without a chat template is refused with one line.
"""
from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from conftest import tiny_model
from core.train.__main__ import main as train_main
from core.train.followups import main
from core.train.tokens import read_shard_ids
from test_generate_cli import word_tokenizer

TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}w100{% else %}w101{% endif %} {{ m['content'] }} "
            "w102 {% endfor %}{% if add_generation_prompt %}w101 {% endif %}")


@pytest.fixture(scope="module")
def first_round(tmp_path_factory):
    root = tmp_path_factory.mktemp("followups")
    tiny_model("llama").save_pretrained(root / "model")
    tok = word_tokenizer()
    tok.chat_template = TEMPLATE
    tok.save_pretrained(root / "model")
    rows = [{"id": "own", "prompt": "w5 w6 w7 w8", "followups": ["w40 w41 w42", "w50"]},
            *({"id": f"p{i}", "prompt": f"w{10 + i} w{20 + i} w{30 + i}"} for i in range(5))]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert train_main(["--model", str(root / "model"), "--out", str(root / "r1"), "--prompts",
                       str(root / "prompts.jsonl"), "--n-prompts", "6", "--n-text", "0", "--batch", "3",
                       "--new-tokens", "12", "--chat", "--data-only", "--dtype", "fp32"]) == 0
    return root, tok


def test_second_turns_hold_the_first_answer_and_the_followup(first_round):
    root, tok = first_round
    assert main(["--model", str(root / "model"), "--prompts", str(root / "prompts.jsonl"), "--first-turns",
                 str(root / "r1" / "shards"), "--out", str(root / "r2"), "--generic-share", "1.0",
                 "--batch", "4", "--new-tokens", "8", "--dtype", "fp32"]) == 0
    firsts = {}
    for shard in sorted((root / "r1" / "shards").glob("shard_*.safetensors")):
        for ids, g in zip(*read_shard_ids(shard)):
            firsts[tuple(ids[: len(ids) - g])] = ids[len(ids) - g:]
    seconds = [s for shard in sorted((root / "r2" / "shards").glob("*.safetensors"))
               for s in zip(*read_shard_ids(shard))]
    assert len(seconds) == sum(1 for a in firsts.values() if a)  # every answered first turn got a second one
    for ids, g in seconds:
        prompt = ids[: len(ids) - g]
        first = next(k for k in firsts if tuple(prompt[: len(k)]) == k)  # starts as the first turn ...
        answer = tok.decode(firsts[first], skip_special_tokens=True).strip()
        text = tok.decode(prompt, skip_special_tokens=True)
        assert answer in text and text.rstrip().endswith("w102 w101")  # ... holds the answer, asks for a reply
        if "w5 w6 w7 w8" in text:  # the row with its own follow-ups: the first one, never a generic one
            assert "w40 w41 w42" in text and "w50" not in text and "<unk>" not in tok.decode(prompt)
        else:  # a generic follow-up: English words, <unk> to the word tokenizer, in the last user turn
            assert tok.decode(prompt).rsplit("w100", 1)[1].split()[0] == "<unk>"
    stored = [load_file(str(p)) for p in sorted((root / "r2" / "shards").glob("*.safetensors"))]
    assert sum(int(d["generated"].sum()) for d in stored) > 0  # the target answered


def test_too_long_conversations_are_left_out_and_no_template_is_refused(first_round, tmp_path, capsys):
    root, _ = first_round
    assert main(["--model", str(root / "model"), "--prompts", str(root / "prompts.jsonl"), "--first-turns",
                 str(root / "r1" / "shards"), "--out", str(tmp_path / "short"), "--max-prompt", "6",
                 "--generic-share", "1.0", "--dtype", "fp32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "'own_followups': 0, 'generic_followups': 0, 'too_long': 6" in err and err.startswith("[core.train")
    plain = tmp_path / "plain"
    tiny_model("llama").save_pretrained(plain)
    word_tokenizer().save_pretrained(plain)
    assert main(["--model", str(plain), "--prompts", str(root / "prompts.jsonl"), "--first-turns",
                 str(root / "r1" / "shards"), "--out", str(tmp_path / "x"), "--dtype", "fp32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the model loader's progress bars
    assert "no chat template" in err and err.startswith("[core.train.followups] error:")
