# One option parser for every command: `sdflow --help` lists the commands,
# every command answers --help (and `sdflow help CMD`) on stdout with exit 0,
# unknown options and bad values fail with exit 1 naming them; export and
# nodes take --set / --models-dir / SDFLOW_MODELS_DIR as run does; a JSON
# syntax error quotes the text with its line and column.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_options

"$SDFLOW_BIN" --help > "$T/help" || fail "sdflow --help exited non-zero"
cmds=$(sed -n '/^commands:/,/^$/p' "$T/help" | awk 'NR > 1 && NF { print $1 }')
[ -n "$cmds" ] || fail "sdflow --help lists no commands: $(cat "$T/help")"
for c in run export repl nodes cache synth version; do
    printf '%s\n' "$cmds" | grep -qx "$c" || fail "sdflow --help does not list '$c'"
done
for c in $cmds; do
    out=$("$SDFLOW_BIN" "$c" --help 2> "$T/err") || fail "sdflow $c --help exited non-zero: $(cat "$T/err")"
    printf '%s\n' "$out" | head -1 | grep -q "^usage: sdflow $c" || fail "sdflow $c --help: no usage line: $out"
    printf '%s\n' "$out" | grep -q -- '--help' || fail "sdflow $c --help does not list --help"
    [ -s "$T/err" ] && fail "sdflow $c --help wrote on stderr: $(cat "$T/err")"
    [ "$("$SDFLOW_BIN" help "$c")" = "$out" ] || fail "sdflow help $c differs from sdflow $c --help"
    "$SDFLOW_BIN" "$c" -h > /dev/null || fail "sdflow $c -h exited non-zero"
    # every option a command's help shows is one the parser knows (help
    # and parser come from one table): none of them is "unknown". Probed as
    # "--opt=x --bogus-probe" so that parsing always ends in an error and
    # nothing runs (no REPL, no server, no file written): a flag refuses
    # "=x", a valued option takes it and the probe is then unknown.
    for opt in $(printf '%s\n' "$out" | grep -o '^  \(-[a-zA-Z], \)\?--[a-z0-9-]*' | sed 's/.*--/--/'); do
        [ "$opt" = --help ] && continue
        if "$SDFLOW_BIN" "$c" "$opt=x" --bogus-probe < /dev/null > /dev/null 2> "$T/probe"; then
            fail "sdflow $c $opt=x --bogus-probe succeeded"
        fi
        grep -q "unknown option '$opt'" "$T/probe" && fail "sdflow $c: help lists $opt, parser refuses it"
    done
done
"$SDFLOW_BIN" run --help | grep -q -- '--set ID.INPUT=VALUE' || fail "run --help lacks --set"
"$SDFLOW_BIN" export --help | grep -q -- '--models-dir' || fail "export --help lacks --models-dir"
"$SDFLOW_BIN" nodes --help | grep -q -- '--models-dir' || fail "nodes --help lacks --models-dir"

# usage errors: exit 1, the option named, nothing on stdout
check_usage() { # expected-text args...
    local want="$1"
    shift
    if "$SDFLOW_BIN" "$@" > "$T/out" 2> "$T/err"; then fail "sdflow $* succeeded"; return; fi
    grep -q -- "$want" "$T/err" || fail "sdflow $*: stderr lacks '$want': $(cat "$T/err")"
    [ -s "$T/out" ] && fail "sdflow $*: wrote on stdout"
}
check_usage "unknown option '--bogus'" run x.json --bogus
check_usage "unknown option '--bogus'" nodes --bogus
check_usage "unknown option '--bogus'" cache stats --bogus
check_usage "--precision must be one of f32|bf16|f16, not 'f64'" run x.json --precision f64
check_usage "--precision must be one of f32|bf16|f16, not 'f64'" export --json x.json --precision=f64
check_usage "--vae-precision must be one of f32|bf16|f16, not 'fp16'" run x.json --vae-precision fp16
check_usage "--clip-precision must be one of f32|bf16|f16, not 'f8'" run x.json --clip-precision=f8
check_usage "--seed needs a whole number" synth --seed x1
check_usage "needs a value" run x.json --set
check_usage "unexpected argument 'y.json'" run x.json y.json
check_usage "usage: sdflow run" run
check_usage "unknown command 'bogus'" bogus

# --set applies to export as to run
cat > "$T/wf.json" << 'J'
{"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
 "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}
J
"$SDFLOW_BIN" export --json "$T/wf.json" --set 1.width=128 --set=1.batch_size=3 > "$T/set.json" 2> "$T/err" ||
    fail "export --set: $(cat "$T/err")"
tr -d ' \t\n' < "$T/set.json" | grep -q '"width":128' || fail "export --set did not change width: $(cat "$T/set.json")"
tr -d ' \t\n' < "$T/set.json" | grep -q '"batch_size":3' || fail "export --set= did not change batch_size"
"$SDFLOW_BIN" export --lua "$T/wf.json" --set 1.height=96 2> "$T/err" | grep -q 'height = 96' ||
    fail "export --lua --set: $(cat "$T/err")"
check_usage "no node" export --json "$T/wf.json" --set 9.width=1

# --models-dir and SDFLOW_MODELS_DIR reach nodes --json (the checkpoint list)
mkdir -p "$T/m1/checkpoints" "$T/m2/checkpoints"
: > "$T/m1/checkpoints/from-option.safetensors"
: > "$T/m2/checkpoints/from-env.safetensors"
"$SDFLOW_BIN" nodes --json --models-dir "$T/m1" > "$T/n1.json" || fail "nodes --json --models-dir"
grep -q 'from-option.safetensors' "$T/n1.json" || fail "nodes --json ignores --models-dir"
SDFLOW_MODELS_DIR="$T/m2" "$SDFLOW_BIN" nodes --json > "$T/n2.json" || fail "nodes --json with SDFLOW_MODELS_DIR"
grep -q 'from-env.safetensors' "$T/n2.json" || fail "nodes --json ignores SDFLOW_MODELS_DIR"
SDFLOW_MODELS_DIR="$T/m2" "$SDFLOW_BIN" nodes --json --models-dir "$T/m1" > "$T/n3.json"
grep -q 'from-env' "$T/n3.json" && fail "--models-dir does not override SDFLOW_MODELS_DIR"

# a JSON syntax error: file, line, column, the text and a caret under it
printf '{"1": {"class_type": "EmptyLatentImage",\n  "inputs": {"width": 64 "height": 64}}}\n' > "$T/bad.json"
for c in "run $T/bad.json" "export --json $T/bad.json"; do
    if "$SDFLOW_BIN" $c > /dev/null 2> "$T/err"; then fail "$c succeeded on bad JSON"; continue; fi
    grep -q "bad.json:2:26: invalid JSON near '\"height\": 64}}}'" "$T/err" || fail "$c: $(cat "$T/err")"
    grep -q '^  2 |   "inputs": {"width": 64 "height": 64}}}$' "$T/err" || fail "$c: the line is not quoted"
    grep -q '^    |                          \^$' "$T/err" || fail "$c: no caret under column 26: $(cat "$T/err")"
done
printf '{"1": {"class_type": "X", "inputs": {},}}' > "$T/comma.json"
"$SDFLOW_BIN" export --json "$T/comma.json" 2>&1 | grep -q 'comma.json:1:39: invalid JSON.*comma before a closing' ||
    fail "trailing comma: $("$SDFLOW_BIN" export --json "$T/comma.json" 2>&1)"

sd_test_end "options ok"
