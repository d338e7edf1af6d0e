# Hostile strings at the command line (issue 14): a workflow whose node ids
# and class_types hold terminal escape sequences gets error lines with the
# sequences escaped (no raw ESC, BEL or CR reaches stderr); "\u0000" in a
# prompt, bytes that are not UTF-8 and a raw NUL in the file are refused with
# node, input and byte offset, exit 1 and nothing run; --set too.
set -u
: "${SDFLOW_BIN:?}"
. "$(dirname "$0")/lib.sh"

sd_test_need_nodes LoadImage ImageInvert SaveImage

T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_hostile_text"
rm -rf "$T" && mkdir -p "$T/input" "$T/output"
sd_test_write_png "$T/input/pic.png"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() { "$SDFLOW_BIN" run "$@" --no-cache --input-dir "$T/input" --output-dir "$T/output"; }
raw_controls() { LC_ALL=C grep -c $'[\x01-\x08\x0b-\x1f\x7f]' "$1"; }

# ---- escape sequences in ids and class_types are printed escaped ---------------------
printf '%s' '{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "7\u001b[2J\u001b]0;pwned\u0007": {"class_type": "Evil\u001b[31mNode\r", "inputs": {"image": ["1", 0]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}}}' > "$T/esc.json"
run "$T/esc.json" --quiet > /dev/null 2> "$T/esc.err"
rc=$?
[ "$rc" -eq 1 ] || fail "escapes: exit code $rc, expected 1: $(cat -v "$T/esc.err")"
[ "$(raw_controls "$T/esc.err")" = "0" ] || fail "escapes: raw control characters on stderr: $(cat -v "$T/esc.err")"
grep -qF 'node 7\e[2J\e]0;pwned\x07 (Evil\e[31mNode\r): invalid_prompt' "$T/esc.err" ||
    fail "escapes: no escaped node line in: $(cat -v "$T/esc.err")"

# the REPL shows such a graph escaped too
printf 'show()\n' | "$SDFLOW_BIN" repl "$T/esc.json" --no-history --no-cache > "$T/repl.out" 2>&1
[ "$(raw_controls "$T/repl.out")" = "0" ] || fail "repl show(): raw control characters: $(cat -v "$T/repl.out")"
grep -qF '#7\e[2J\e]0;pwned\x07 Evil\e[31mNode\r' "$T/repl.out" || fail "repl show(): $(cat -v "$T/repl.out")"

# an error found outside validation (a --set naming an input the node lacks)
# goes through the other error printer: escaped as well
printf '%s' '{"1\u001b[5m": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1\u001b[5m", 0]}}}' > "$T/esc2.json"
run "$T/esc2.json" --set $'1\e[5m.nope=1' > /dev/null 2> "$T/esc2.err"
[ $? -eq 1 ] || fail "--set on an escaped id: not an error"
[ "$(raw_controls "$T/esc2.err")" = "0" ] || fail "--set error: raw control characters: $(cat -v "$T/esc2.err")"
grep -qF 'node 1\e[5m (LoadImage) input '"'nope'" "$T/esc2.err" || fail "--set error: $(cat -v "$T/esc2.err")"

# ---- strings that cannot pass are refused, naming node, input and offset ---------------
bad() { # NAME EXPECTED-TEXT: workflow file $T/NAME.json
    run "$T/$1.json" --quiet > /dev/null 2> "$T/$1.err"
    local rc=$?
    [ "$rc" -eq 1 ] || fail "$1: exit code $rc, expected 1"
    grep -qF "$2" "$T/$1.err" || fail "$1: no \"$2\" in: $(cat -v "$T/$1.err")"
    [ -z "$(ls -A "$T/output")" ] || fail "$1: something was written"
}
printf '%s' '{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png\u0000/../../etc/passwd"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}' > "$T/nul.json"
bad nul "node 1 (LoadImage) input 'image':"
grep -qF "holds a NUL character at byte 7" "$T/nul.err" || fail "nul: no offset in: $(cat "$T/nul.err")"
printf '{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},\n "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "ab\xfe"}}}' > "$T/utf8.json"
bad utf8 "node 9 (SaveImage) input 'filename_prefix':"
grep -qF "not valid UTF-8 at byte 2" "$T/utf8.err" || fail "utf8: no offset in: $(cat "$T/utf8.err")"
printf '{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}}}\0 {"9": 0}' > "$T/rawnul.json"
bad rawnul "holds a NUL byte at byte 66"

# --set refuses what a workflow file may not hold
printf '%s' '{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "ok"}}}' > "$T/good.json"
run "$T/good.json" --quiet --set '9.filename_prefix="a\u0000b"' > /dev/null 2> "$T/set.err"
[ $? -eq 1 ] || fail "--set: a \\u0000 value was accepted"
grep -qF "node 9 (SaveImage) input 'filename_prefix'" "$T/set.err" || fail "--set: $(cat "$T/set.err")"
[ -z "$(ls -A "$T/output")" ] || fail "--set: something was written"
run "$T/good.json" --quiet --set "9.filename_prefix=caf$(printf '\xc3\xa9')" > /dev/null 2> "$T/ok.err" ||
    fail "valid UTF-8 refused: $(cat "$T/ok.err")"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "hostile text ok"
