#!/bin/sh
# Regenerates cases.json: Qwen2 token ids of hand-picked and random strings
# (corpus.py) from Hugging Face tokenizers 0.22.2 running the pipeline
# transformers' Qwen2Converter builds from ComfyUI's qwen25_tokenizer files
# (mk_tokenizer_json.py writes it as a tokenizer.json: NFC, the Qwen2 Split
# regex, ByteLevel, BPE, the added tokens of tokenizer_config.json). Needs
# python3, node and `npm install @anush008/tokenizers@0.6.0` in NODE_DIR.
# Usage: make_cases.sh QWEN25_TOKENIZER_DIR NODE_DIR/node_modules
set -eu
here=$(dirname "$0")
python3 "$here/mk_tokenizer_json.py" "$1" /tmp/qwen_tok.$$.json
python3 "$here/corpus.py" 11 600 > /tmp/qwen_corpus.$$.json
HF_TOKENIZERS_NODE_MODULES=$2 node "$here/../t5_tokenizer/hf_encode.js" /tmp/qwen_tok.$$.json /tmp/qwen_corpus.$$.json > /tmp/qwen_ids.$$.json
python3 - "$1" /tmp/qwen_corpus.$$.json /tmp/qwen_ids.$$.json > "$here/cases.json" <<'PY'
import hashlib, json, sys
d, corpus, ids = sys.argv[1:]
c = json.load(open(corpus)); r = json.load(open(ids))
sha = {f: hashlib.sha256(open(d + "/" + f, "rb").read()).hexdigest()
       for f in ("vocab.json", "merges.txt", "tokenizer_config.json")}
print(json.dumps({
    "generator": "tests/data/qwen_tokenizer/make_cases.sh (corpus.py seed 11, 600 random strings)",
    "reference": "Hugging Face tokenizers 0.22.2 (npm @anush008/tokenizers 0.6.0) on the tokenizer.json mk_tokenizer_json.py builds as transformers' Qwen2Converter does; encode(text).ids",
    "files_sha256": sha,
    "cases": [{"utf8": b, "ids": i} for b, i in zip(c, r)]}, separators=(",", ":")))
PY
rm -f /tmp/qwen_tok.$$.json /tmp/qwen_corpus.$$.json /tmp/qwen_ids.$$.json
