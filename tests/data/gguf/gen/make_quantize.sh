#!/bin/sh
# make_quantize.sh GGML_DIR OUT_DIR: builds quantize_ref.c against ggml's
# ggml-quants.c from the ggml source tree GGML_DIR (ggml-org/ggml or
# llama.cpp's ggml/) and writes OUT_DIR/input.f32 and OUT_DIR/<TYPE>.bin,
# ggml's reference quantizers' blocks for that input. Built as ISO C
# without fused multiply-adds (-ffp-contract=off), the reference as written.
set -eu
G=$1
OUT=$2
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
CC=${CC:-gcc}
FLAGS="-std=c11 -O2 -ffp-contract=off -DGGML_COMMON_DECL_C -I$G/include -I$G/src -I$G/src/ggml-cpu"
$CC $FLAGS -c "$G/src/ggml-quants.c" -o "$B/q.o"
$CC $FLAGS -c "$(dirname "$0")/quantize_ref.c" -o "$B/d.o"
$CC "$B/d.o" "$B/q.o" -lm -o "$B/quantize_ref"
mkdir -p "$OUT"
"$B/quantize_ref" "$OUT"
echo "ggml: $(git -C "$G" rev-parse HEAD 2>/dev/null || cat "$G/.commit" 2>/dev/null || echo unknown)"
# the "quantize" part of OUT_DIR/../manifest.json
COMMIT=$(git -C "$G" rev-parse HEAD 2>/dev/null || cat "$G/.commit" 2>/dev/null || echo unknown)
python3 - "$OUT" "$COMMIT" <<'PY'
import json, os, sys
out, commit = sys.argv[1], sys.argv[2]
mpath = os.path.join(out, "..", "manifest.json")
man = json.load(open(mpath)) if os.path.exists(mpath) else {}
sub = os.path.basename(os.path.normpath(out))
types = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
n = os.path.getsize(os.path.join(out, "input.f32")) // 4
man["quantize"] = {
    "input": f"{sub}/input.f32",
    "elements": n,
    "input_made_by": "gen/quantize_ref.c make_input: 48 super-blocks of 256 float32 cycling through 12 regimes "
                     "(Gaussian at scales 1e-3..10, one-signed, outliers x40, zero groups, a zero block, "
                     "constants, values below GROUP_MAX_EPS, integers -8..7, halves, offset halves)",
    "reference": {"ggml": commit, "function": "quantize_row_<type>_ref (ggml-quants.c)",
                  "build": "gcc -std=c11 -O2 -ffp-contract=off (ISO C, no fused multiply-adds)"},
    "cases": [{"type": t, "blocks": f"{sub}/{t}.bin"} for t in types],
    "tolerance": "byte-exact blocks",
}
json.dump(man, open(mpath, "w"), indent=1)
PY
