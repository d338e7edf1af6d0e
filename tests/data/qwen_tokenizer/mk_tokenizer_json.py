# Writes the tokenizer.json transformers' Qwen2Converter builds from ComfyUI's
# qwen25_tokenizer files. Usage: mk_tokenizer_json.py QWEN25_TOKENIZER_DIR OUT.json
import json, sys
d = sys.argv[1]
vocab = json.load(open(d + "/vocab.json", encoding="utf-8"))
merges = []
for line in open(d + "/merges.txt", encoding="utf-8").read().split("\n"):
    if line.startswith("#version") or not line.strip():
        continue
    a, b = line.split(" ")
    merges.append([a, b])
cfg = json.load(open(d + "/tokenizer_config.json", encoding="utf-8"))
added = []
for k, v in sorted(cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0])):
    added.append({"id": int(k), "content": v["content"], "single_word": v["single_word"],
                  "lstrip": v["lstrip"], "rstrip": v["rstrip"], "normalized": v["normalized"],
                  "special": v["special"]})
tok = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": merges}}
json.dump(tok, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
