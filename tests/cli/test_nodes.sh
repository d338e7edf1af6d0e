# `sdflow nodes` and `sdflow nodes --json` (ComfyUI /object_info shape),
# `sdflow version` and `sdflow --help`.
set -u
: "${SDFLOW_BIN:?}" "${SDFLOW_SOURCE_DIR:?}"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$SDFLOW_BIN" version | grep -q '^sdflow [0-9]' || fail "version"
"$SDFLOW_BIN" --help | grep -q '^  run ' || fail "--help"
"$SDFLOW_BIN" frobnicate 2> /dev/null && fail "unknown command accepted"
"$SDFLOW_BIN" nodes --bogus 2> /dev/null && fail "unknown nodes option accepted"

list=$("$SDFLOW_BIN" nodes) || fail "nodes failed"
printf '%s\n' "$list" | grep -q '^ImageScale ' || { echo "FAIL: node type ImageScale is not registered"; exit 1; }
json=$("$SDFLOW_BIN" nodes --json | tr -d ' \t\n') || fail "nodes --json failed"
case "$json" in "{"*"}") ;; *) fail "nodes --json is not an object" ;; esac
# Every class of the table appears in the JSON with the object_info keys; the
# CLI's aliases (CLIPEncode, ...) are listed by the table only, as aliases.
n_table=$(printf '%s\n' "$list" | grep -vc ' alias of ')
printf '%s\n' "$list" | grep -q '^CLIPEncode  *alias of CLIPTextEncode' || fail "nodes: CLIPEncode not listed as an alias"
printf '%s' "$json" | grep -q '"CLIPEncode":' && fail "nodes --json lists the alias CLIPEncode"
n_json=$(printf '%s' "$json" | grep -o '"output_node":' | wc -l)
[ "$n_table" -eq "$n_json" ] || fail "nodes: $n_table in the table, $n_json in --json"
for key in input input_order output output_is_list output_name name display_name description category output_node; do
    printf '%s' "$json" | grep -q "\"$key\":" || fail "nodes --json: no '$key'"
done
scale=$(printf '%s' "$json" | sed 's/.*"ImageScale":{"input":{"required":{//; s/"name":"ImageScale".*//')
[ "$scale" != "$json" ] || fail "nodes --json: ImageScale.input.required missing"
printf '%s' "$scale" | grep -q '"image":\["IMAGE"\]' || fail "ImageScale image spec: $scale"
printf '%s' "$scale" | grep -q '"width":\["INT",{"default":512,"min":0,"max":16384,"step":1' || fail "ImageScale width spec: $scale"
# Seeds: ComfyUI's max 0xffffffffffffffff with every digit, not a rounded double.
if "$SDFLOW_BIN" nodes | grep -q '^KSampler '; then
    "$SDFLOW_BIN" nodes --json | tr -d ' \t\n' | grep -q '"seed":\["INT",{"default":0,"min":0,"max":18446744073709551615,' ||
        fail "KSampler seed spec lacks max 18446744073709551615"
fi
printf '%s' "$scale" | grep -q '"upscale_method":\[\["nearest-exact",[^]]*\]\]' || fail "ImageScale combo spec: $scale"
printf '%s' "$json" | grep -q '"input_order":{"required":\["image","upscale_method","width","height","crop"\]}' \
    || fail "ImageScale input_order"
printf '%s' "$json" | grep -q '"output":\["IMAGE"\],"output_is_list":\[false\],"output_name":\["IMAGE"\],"name":"ImageScale"' \
    || fail "ImageScale outputs"
printf '%s' "$json" | grep -q '"name":"SaveImage","display_name":"[^"]*","description":"[^"]*","python_module":"[^"]*","category":"[^"]*","output_node":true' \
    || fail "SaveImage output_node"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all nodes checks passed"
