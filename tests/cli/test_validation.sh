# One bad workflow per validation error kind: exit code 1, nothing ran, and
# the message names the node id, class_type and input.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_validation LoadImage ImageScale ImageInvert SaveImage


mkdir -p "$T/input" "$T/output"
sd_test_write_png "$T/input/pic.png"

# run_bad NAME KIND NODE_ID CLASS_TYPE INPUT (INPUT "-" when none): workflow on stdin
run_bad() {
    local name=$1 kind=$2 id=$3 class=$4 input=$5
    cat > "$T/$name.json"
    rm -f "$T/$name.report.json"
    "$SDFLOW_BIN" run "$T/$name.json" --no-cache --quiet --input-dir "$T/input" \
        --output-dir "$T/output" --report "$T/$name.report.json" 2> "$T/$name.err"
    local rc=$?
    [ "$rc" -eq 1 ] || fail "$name: exit code $rc, expected 1"
    grep -q "$kind" "$T/$name.err" || fail "$name: no '$kind' in: $(cat "$T/$name.err")"
    if [ "$id" != "-" ]; then
        local want="node $id ($class)"
        [ "$input" != "-" ] && want="$want input '$input'"
        grep -qF "$want: $kind" "$T/$name.err" || fail "$name: no \"$want: $kind\" in: $(cat "$T/$name.err")"
    fi
    [ "$(sd_test_count "$T/$name.report.json" executed)" = "0" ] || fail "$name: report says something executed"
    sd_test_flat "$T/$name.report.json" | grep -q '"nodes":{}' || fail "$name: report lists nodes"
    [ -z "$(ls -A "$T/output")" ] || fail "$name: something was written to the output dir"
}

run_bad unknown_class invalid_prompt 5 NoSuchNode - <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "5": {"class_type": "NoSuchNode", "inputs": {"image": ["1", 0]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "v"}}}
J
run_bad missing_input required_input_missing 9 SaveImage images <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x"}}}
J
# A literal input with a default is required all the same: ComfyUI refuses
# such a prompt rather than guessing the value, and so does the CLI.
run_bad missing_literal required_input_missing 9 SaveImage filename_prefix <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}}}
J
grep -q "1 problem" "$T/missing_literal.err" || fail "missing_literal: not the only problem: $(cat "$T/missing_literal.err")"
run_bad missing_combo required_input_missing 2 ImageScale crop <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "nearest-exact", "width": 8, "height": 8}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "v"}}}
J
run_bad missing_node bad_linked_input 9 SaveImage images <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["42", 0], "filename_prefix": "v"}}}
J
run_bad bad_index bad_linked_input 3 ImageInvert image <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "3": {"class_type": "ImageInvert", "inputs": {"image": ["1", 7]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}}}
J
run_bad type_mismatch return_type_mismatch 3 ImageInvert image <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "3": {"class_type": "ImageInvert", "inputs": {"image": ["1", 1]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}}}
J
run_bad wrong_kind invalid_input_type 2 ImageScale width <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "width": "64", "height": 64, "upscale_method": "nearest-exact", "crop": "disabled"}},
 "3": {"class_type": "ImageInvert", "inputs": {}},
 "8": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "v"}}}
J
run_bad literal_for_link invalid_input_type 9 SaveImage images <<'J'
{"9": {"class_type": "SaveImage", "inputs": {"images": "pic.png", "filename_prefix": "v"}}}
J
run_bad too_big value_bigger_than_max 2 ImageScale height <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "width": 64, "height": 100000, "upscale_method": "nearest-exact", "crop": "disabled"}},
 "3": {"class_type": "ImageInvert", "inputs": {}},
 "8": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "v"}}}
J
run_bad too_small value_smaller_than_min 2 ImageScale width <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "width": -8, "height": 64, "upscale_method": "nearest-exact", "crop": "disabled"}},
 "3": {"class_type": "ImageInvert", "inputs": {}},
 "8": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "v"}}}
J
run_bad not_in_list value_not_in_list 2 ImageScale upscale_method <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "magic", "width": 64, "height": 64, "crop": "disabled"}},
 "3": {"class_type": "ImageInvert", "inputs": {}},
 "8": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "v"}}}
J
run_bad missing_file value_not_in_list 1 LoadImage image <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "nope.png"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "v"}}}
J
run_bad cycle dependency_cycle 3 ImageInvert image <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "3": {"class_type": "ImageInvert", "inputs": {"image": ["4", 0]}},
 "4": {"class_type": "ImageInvert", "inputs": {"image": ["3", 0]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["4", 0], "filename_prefix": "v"}}}
J
run_bad no_output prompt_no_outputs - - - <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "3": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}}}
J

# All problems of one workflow are reported at once.
cat > "$T/many.json" <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "nope.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "width": "64", "height": 100000, "upscale_method": "nearest-exact", "crop": "disabled"}},
 "3": {"class_type": "ImageInvert", "inputs": {}},
 "8": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "v"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "v"}}}
J
"$SDFLOW_BIN" run "$T/many.json" --no-cache --quiet --input-dir "$T/input" --output-dir "$T/output" 2> "$T/many.err"
[ $? -eq 1 ] || fail "many: exit code"
for k in value_not_in_list invalid_input_type value_bigger_than_max required_input_missing; do
    grep -q "$k" "$T/many.err" || fail "many: $k not reported"
done
grep -q "4 problems" "$T/many.err" || fail "many: expected '4 problems' in: $(cat "$T/many.err")"

# Parse errors name line and column.
printf '{\n  "1": {"class_type": "SaveImage",\n   "inputs": {,}}}\n' > "$T/syntax.json"
"$SDFLOW_BIN" run "$T/syntax.json" --no-cache 2> "$T/syntax.err"
[ $? -eq 1 ] || fail "syntax: exit code"
grep -q "syntax.json:3:" "$T/syntax.err" || fail "syntax: no line/column in: $(cat "$T/syntax.err")"

# --set errors: unknown node, unknown input.
cp "$SDFLOW_SOURCE_DIR/workflows/image_invert.json" "$T/good.json"
"$SDFLOW_BIN" run "$T/good.json" --no-cache --set 77.width=3 2> "$T/set1.err"
[ $? -eq 1 ] && grep -q "no node '77'" "$T/set1.err" || fail "set: unknown node"
"$SDFLOW_BIN" run "$T/good.json" --no-cache --set 2.widht=3 2> "$T/set2.err"
[ $? -eq 1 ] && grep -q "has no input 'widht'" "$T/set2.err" || fail "set: unknown input"

# The control: the same nodes, well wired, run.
"$SDFLOW_BIN" run "$T/good.json" --no-cache --quiet --set 1.image=pic.png --input-dir "$T/input" \
    --output-dir "$T/output" 2> "$T/good.err"
[ $? -eq 0 ] || fail "good workflow failed: $(cat "$T/good.err")"
ls "$T/output"/sdflow_demo_*.png > /dev/null 2>&1 || fail "good workflow wrote no image"

# Leftover nodes no output needs (an unconnected loader of a missing file, a
# half-edited branch) neither run nor stop the run, as in ComfyUI; they are
# named in a notice. Unknown class_types stop it wherever they are.
cat > "$T/leftover.json" <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "LoadImage", "inputs": {"image": "no-such-file.png"}},
 "3": {"class_type": "ImageScale", "inputs": {"image": ["2", 0], "upscale_method": "bogus",
       "width": 8, "height": 8, "crop": "disabled"}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "leftover"}}}
J
rm -rf "$T/output" && mkdir -p "$T/output"
"$SDFLOW_BIN" run "$T/leftover.json" --no-cache --input-dir "$T/input" --output-dir "$T/output" \
    --report "$T/leftover.report.json" > /dev/null 2> "$T/leftover.err" ||
    fail "leftover nodes stopped the run: $(cat "$T/leftover.err")"
grep -q "2 nodes no output needs left out: 2 (LoadImage), 3 (ImageScale)" "$T/leftover.err" ||
    fail "leftover: no notice naming the nodes: $(cat "$T/leftover.err")"
ls "$T/output"/leftover_*.png > /dev/null 2>&1 || fail "leftover: no image written"
[ "$(sd_test_status "$T/leftover.report.json" 2)" = "absent" ] || fail "leftover: node 2 was visited"
sed 's/"ImageScale"/"NoSuchScale"/' "$T/leftover.json" > "$T/leftover_unknown.json"
if "$SDFLOW_BIN" run "$T/leftover_unknown.json" --no-cache --input-dir "$T/input" --output-dir "$T/output" \
    > /dev/null 2> "$T/leftover_unknown.err"; then
    fail "an unknown class_type on a leftover node was accepted"
fi
grep -q "NoSuchScale" "$T/leftover_unknown.err" || fail "leftover unknown: not named: $(cat "$T/leftover_unknown.err")"

# A missing file names the folder searched and the option that adds one,
# not the folder's contents.
grep -q "not in list: no such file in $T/input" "$T/many.err" ||
    fail "missing file: the folder searched is not named: $(cat "$T/many.err")"
grep -q -- "--input-dir DIR" "$T/many.err" || fail "missing file: no option named: $(cat "$T/many.err")"
grep -q "pic.png" "$T/many.err" && fail "missing file: the folder's contents are listed: $(cat "$T/many.err")"

sd_test_end "all validation checks passed"
