#!/bin/sh
# Regenerates cases.json: T5 token ids of hand-picked and random strings
# (corpus.py: combining marks, Hangul jamo, Indic conjuncts, emoji ZWJ and
# flag sequences, CR LF, odd spaces, added tokens inside words, full-width
# and compatibility characters...) from Hugging Face tokenizers 0.22.2 on
# the Flux set's tokenizer.json (ComfyUI's t5_tokenizer). Needs python3, node
# and `npm install @anush008/tokenizers@0.6.0` in NODE_DIR.
# Usage: make_cases.sh TOKENIZER_JSON NODE_DIR/node_modules
set -eu
here=$(dirname "$0")
python3 "$here/corpus.py" 7 400 > /tmp/t5_corpus.$$.json
HF_TOKENIZERS_NODE_MODULES=$2 node "$here/hf_encode.js" "$1" /tmp/t5_corpus.$$.json > /tmp/t5_ids.$$.json
python3 - "$1" /tmp/t5_corpus.$$.json /tmp/t5_ids.$$.json > "$here/cases.json" <<'PY'
import hashlib, json, sys
tok, corpus, ids = sys.argv[1:]
c = json.load(open(corpus)); r = json.load(open(ids))
print(json.dumps({
    "generator": "tests/data/t5_tokenizer/make_cases.sh (corpus.py seed 7, 400 random strings)",
    "reference": "Hugging Face tokenizers 0.22.2 (npm @anush008/tokenizers 0.6.0) Tokenizer.fromFile(tokenizer.json).encode(text) ids, add_special_tokens",
    "tokenizer_sha256": hashlib.sha256(open(tok, "rb").read()).hexdigest(),
    "cases": [{"utf8": b, "ids": i} for b, i in zip(c, r)]}, separators=(",", ":")))
PY
rm -f /tmp/t5_corpus.$$.json /tmp/t5_ids.$$.json
