"""The llama.cpp peer (core/bench/llamacpp.py) without llama-cpp-python: a fake engine with Llama's tokenize / reset /
generate is handed to the peer through its loader argument, so the row building, the tokens/s accounting, the
equality flag, the GGUF labels and the command line's checks run here; the missing package is one line.
"""
from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from core.bench import llamacpp
from core.bench.cli import main, parse_args, validate
from core.bench.peers import peer_of
from core.bench.protocol import run_bench
from core.bench.questions import BenchError
from core.bench.report import summarize_rows, summary_table
from core.bench.rows import make_row
from core.bench.runners import Outcome, timed
from core.engine.config import DecodeConfig, SamplingConfig
from fakes import tiny_tokenizer

EOS = 7


class FakeLlama:
    """Llama's surface the peer uses: tokenize like `tok` (or with one extra id), and greedy `generate` that yields
    `script` (then 1s forever), recording each call."""

    def __init__(self, tok, script: list[int], wrong_tokenizer: bool = False, log: list | None = None):
        self.tok, self.script, self.wrong = tok, script, wrong_tokenizer
        self.resets = 0
        self.calls: list[tuple[list[int], dict]] = []
        self.log = log if log is not None else []

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        ids = self.tok.encode(text.decode("utf-8"), add_special_tokens=False)
        return ids + [0] if self.wrong else ids

    def reset(self) -> None:
        self.resets += 1

    def generate(self, tokens, **kw):
        self.calls.append((list(tokens), kw))
        self.log.append(("llamacpp", list(tokens)))
        yield from self.script
        while True:
            yield 1


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _loader(engine: FakeLlama, seen: list | None = None):
    def load(path: str, threads: int, n_ctx: int) -> FakeLlama:
        if seen is not None:
            seen.append((path, threads, n_ctx))
        return engine
    return load


def _cfg(max_new: int = 8, temperature: float = 0.0) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=max_new, sampling=SamplingConfig(temperature=temperature))


TARGET = SimpleNamespace(eos_ids=frozenset({EOS}))
Q = {"question_id": 3, "group": "coding"}


@pytest.mark.parametrize("name,label", [
    ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"), ("Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf", "Q8_0"),
    ("qwen-coder-bf16.gguf", "BF16"), ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"), ("m-IQ4_XS.gguf", "IQ4_XS"),
    ("qwen2.5-coder-0.5b-instruct-q4.gguf", "Q4"), ("my-model.gguf", "my-model"),
])
def test_a_gguf_is_labelled_by_the_quantisation_its_name_spells(name, label):
    assert llamacpp.gguf_label(f"/models/{name}") == label


def test_each_gguf_is_its_own_row_and_a_shared_label_falls_back_to_the_stem(tmp_path):
    a, b, c = (tmp_path / "x-Q4_K_M.gguf", tmp_path / "x-bf16.gguf", tmp_path / "y-Q4_K_M.gguf")
    for f in (a, b, c):
        f.write_bytes(b"GGUF")
    assert llamacpp.gguf_rows([str(a), str(b)]) == (("llamacpp-Q4_K_M", str(a)), ("llamacpp-BF16", str(b)))
    assert [r for r, _ in llamacpp.gguf_rows([str(a), str(c)])] == ["llamacpp-x-Q4_K_M", "llamacpp-y-Q4_K_M"]
    with pytest.raises(BenchError, match="twice"):
        llamacpp.gguf_rows([str(a), str(a)])
    with pytest.raises(BenchError, match="not found"):
        llamacpp.gguf_rows([str(tmp_path / "missing.gguf")])


def test_the_peer_decodes_our_ids_greedy_from_an_empty_cache_and_stops_at_eos(tok):
    engine, seen = FakeLlama(tok, [5, 6, EOS, 9]), []
    run, digest = llamacpp.runner_for("/m/q-Q4_K_M.gguf", load=_loader(engine, seen))(TARGET, tok, _cfg(8))
    assert seen == [("/m/q-Q4_K_M.gguf", torch.get_num_threads(), llamacpp.CONTEXT)]  # the bench's thread count
    for _ in range(2):  # the same prompt twice: prefilled again each time, never resumed from a cache
        o = timed(run, digest, [11, 12, 13], 0, torch.device("cpu"))
        assert o.tokens == (5, 6, EOS)  # up to and including the first EOS, as our decoders stop
    assert engine.resets == 2 and [ids for ids, _ in engine.calls] == [[11, 12, 13]] * 2
    kw = engine.calls[0][1]
    assert (kw["temp"], kw["top_k"], kw["repeat_penalty"], kw["reset"]) == (0.0, 1, 1.0, True)


def test_the_peer_stops_at_max_new_tokens(tok):
    run, digest = llamacpp.runner_for("/m/q.gguf", load=_loader(FakeLlama(tok, [4, 4, 4, 4, 4])))(TARGET, tok,
                                                                                                   _cfg(3))
    assert digest(run([2], 0), 0.5).tokens == (4, 4, 4)


def test_a_row_counts_tokens_per_second_one_forward_per_token_and_names_the_file(tok):
    run, digest = llamacpp.runner_for("/m/q-Q8_0.gguf", load=_loader(FakeLlama(tok, [5, 6, 8, 9])))(TARGET, tok,
                                                                                                     _cfg(4))
    o = digest(run([1, 2], 0), 2.0)
    row = make_row(Q, "llamacpp-Q8_0", o, Outcome((5, 6, 8, 9), 1.0, 4))
    assert (row["new_tokens"], row["tokens_per_s"], row["target_forwards"], row["tau"]) == (4, 2.0, 4, 1.0)
    assert row["accept_lengths"] == [1, 1, 1, 1] and row["weights"] == "q-Q8_0.gguf"
    assert row["identical_to_baseline"] is True and row["first_mismatch"] is None


def test_a_difference_from_baseline_is_information_not_an_unexplained_mismatch(tok):
    o = Outcome((5, 6, 9), 1.0, 3, step_tokens=(1, 1, 1), weights="q-Q4_K_M.gguf")
    ref = Outcome((5, 6, 8), 1.0, 3, margins=(1.0, 1.0, 1.0), top_logits=(2.0, 2.0, 2.0))
    row = make_row(Q, "llamacpp-Q4_K_M", o, ref)
    assert row["identical_to_baseline"] is False and row["first_mismatch"] == 2 and "divergence" not in row
    rows = [make_row(Q, "baseline", ref, ref), row]
    s = summarize_rows(rows)["llamacpp-Q4_K_M"]
    assert s["mismatches"] == 1 and s["unexplained_mismatches"] is None
    assert "| llamacpp-Q4_K_M | 3.0 |" in summary_table(summarize_rows(rows))
    assert "unexplained" not in summary_table(summarize_rows(rows)).split("llamacpp-Q4_K_M")[1]


def test_the_peer_races_in_the_same_interleaved_run_as_our_lanes(tok):
    log: list[tuple[str, list[int]]] = []
    engine = FakeLlama(tok, [5, 6, EOS], log=log)

    def base_run(ids, seed):
        log.append(("baseline", list(ids)))
        return (5, 6, EOS)

    runners = {"baseline": (base_run, lambda raw, s: Outcome(tuple(raw), s, len(raw), step_tokens=(1,) * len(raw))),
               "llamacpp-Q4_K_M": llamacpp.runner_for("/m/q-Q4_K_M.gguf", load=_loader(engine))(TARGET, tok,
                                                                                                  _cfg(8))}
    questions = [{"question_id": i, "group": "coding"} for i in (1, 2)]
    rows = run_bench(questions, [[3, 4], [3, 4, 5]], runners, ("baseline", "llamacpp-Q4_K_M"), torch.device("cpu"),
                     0, compare=True)
    assert log == [("baseline", [3, 4]), ("llamacpp", [3, 4]),  # one warm-up each, then prompt by prompt,
                   ("baseline", [3, 4]), ("llamacpp", [3, 4]),  # the second prompt starting one method later
                   ("llamacpp", [3, 4, 5]), ("baseline", [3, 4, 5])]
    assert [(r["question_id"], r["method"]) for r in rows] == [(1, "baseline"), (1, "llamacpp-Q4_K_M"),
                                                                (2, "baseline"), (2, "llamacpp-Q4_K_M")]
    assert all(r["identical_to_baseline"] for r in rows)


def test_a_gguf_of_another_tokenizer_or_a_sampled_run_is_refused(tok):
    with pytest.raises(BenchError, match="tokenizes differently"):
        llamacpp.runner_for("/m/other.gguf", load=_loader(FakeLlama(tok, [], wrong_tokenizer=True)))(TARGET, tok,
                                                                                                      _cfg())
    with pytest.raises(BenchError, match="temperature 0"):
        llamacpp.runner_for("/m/q.gguf", load=_loader(FakeLlama(tok, [])))(TARGET, tok, _cfg(temperature=0.7))


def _argv(tmp_path, *extra: str) -> list[str]:
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"question_id": 1, "category": "coding", "turns": ["hi"]}) + "\n")
    return ["--questions", str(q), "--max-new-tokens", "4", "--json", str(tmp_path / "out.json"), *extra]


def test_without_llama_cpp_python_the_method_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # a None entry: find_spec and import both find nothing
    gguf = tmp_path / "q-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    assert main(_argv(tmp_path, "--methods", "baseline,llamacpp", "--gguf", str(gguf))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -r requirements-extra.txt" in err and "compiles llama.cpp" in err
    with pytest.raises(BenchError, match="requirements-extra.txt"):
        llamacpp.load_llama(str(gguf), 2, 512)


def test_the_command_line_turns_each_gguf_into_a_row_of_the_method(tmp_path, monkeypatch):
    present = types.ModuleType("llama_cpp")
    present.__spec__ = importlib.machinery.ModuleSpec("llama_cpp", None)
    monkeypatch.setitem(sys.modules, "llama_cpp", present)  # installed, as far as the checks can tell
    q4, bf16 = tmp_path / "q-Q4_K_M.gguf", tmp_path / "q-bf16.gguf"
    q4.write_bytes(b"GGUF")
    bf16.write_bytes(b"GGUF")
    plan = validate(parse_args(_argv(tmp_path, "--methods", "baseline,llamacpp,eagle2", "--gguf", str(q4),
                                     "--gguf", str(bf16))))
    assert plan.methods == ("baseline", "llamacpp-Q4_K_M", "llamacpp-BF16", "eagle2")
    assert plan.peers == ("llamacpp-Q4_K_M", "llamacpp-BF16") and [s.name for s in plan.lanes] == ["baseline",
                                                                                                   "eagle2"]
    assert plan.files == (("llamacpp-Q4_K_M", "llamacpp", str(q4)), ("llamacpp-BF16", "llamacpp", str(bf16)))
    assert peer_of("llamacpp-BF16", plan.files).scorer is None
    for extra, message in [(("--methods", "baseline", "--gguf", str(q4)), "add llamacpp"),
                           (("--methods", "baseline,llamacpp"), "needs --gguf"),
                           (("--methods", "llamacpp", "--gguf", str(q4), "--temperature", "0.7"), "temperature 0"),
                           (("--methods", "llamacpp", "--gguf", str(q4), "--lane", "llamacpp-Q4_K_M=baseline"),
                            "method name")]:
        with pytest.raises(BenchError, match=message):
            validate(parse_args(_argv(tmp_path, *extra)))
