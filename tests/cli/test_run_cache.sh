# Runs the model-free demo workflow with a fresh persistent cache: a rerun
# executes nothing, --set re-executes exactly the downstream cone, a deleted
# output file re-executes only SaveImage, a saved PNG reruns from its prompt
# chunk, and two concurrent processes share one cache.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_run_cache LoadImage ImageScale ImageInvert SaveImage



mkdir -p "$T/input" "$T/output"
sd_test_write_png "$T/input/example.png"
WF="$SDFLOW_SOURCE_DIR/workflows/image_invert.json"
CACHE="$T/cache.db"

# run NAME [extra args...]: runs the demo, report in $T/NAME.json
run() {
    local name=$1
    shift
    "$SDFLOW_BIN" run "$WF" --cache "$CACHE" --input-dir "$T/input" --output-dir "$T/output" \
        --report "$T/$name.json" "$@" 2> "$T/$name.err"
    local rc=$?
    [ "$rc" -eq 0 ] || fail "$name: exit code $rc: $(cat "$T/$name.err")"
}

expect() { # REPORT NODE STATUS
    local got
    got=$(sd_test_status "$T/$1.json" "$2")
    [ "$got" = "$3" ] || fail "$1: node $2 is '$got', expected '$3'"
}

run first
[ "$(sd_test_count "$T/first.json" executed)" = "4" ] || fail "first: expected 4 executed"
for n in 1 2 3 4; do expect first $n executed; done
n_png=$(ls "$T/output"/sdflow_demo_*.png 2> /dev/null | wc -l)
[ "$n_png" -eq 1 ] || fail "first: expected one PNG, found $n_png"
grep -q '^\[4/4\] SaveImage #4' "$T/first.err" || fail "first: no progress line in: $(cat "$T/first.err")"

run second
first_png=$(ls "$T/output"/sdflow_demo_*.png)
"$SDFLOW_BIN" run "$WF" --cache "$CACHE" --input-dir "$T/input" --output-dir "$T/output" --quiet \
    > "$T/stdout.txt" 2> /dev/null || fail "stdout run failed"
[ "$(cat "$T/stdout.txt")" = "$(cd "$(dirname "$first_png")" && pwd)/$(basename "$first_png")" ] ||
    [ "$(cat "$T/stdout.txt")" = "$first_png" ] || fail "stdout: '$(cat "$T/stdout.txt")', expected $first_png"
[ "$(sd_test_count "$T/second.json" executed)" = "0" ] || fail "second: expected nothing executed"
expect second 4 cached
expect second 1 absent # not even visited: its consumers hit
[ "$(ls "$T/output"/sdflow_demo_*.png | wc -l)" -eq 1 ] || fail "second: wrote a new PNG"

run quiet --quiet
[ -s "$T/quiet.err" ] && fail "quiet: printed $(cat "$T/quiet.err")"

# One literal changed: exactly its downstream cone runs.
run edited --set 2.width=40
[ "$(sd_test_count "$T/edited.json" executed)" = "3" ] || fail "edited: expected 3 executed"
expect edited 1 cached
for n in 2 3 4; do expect edited $n executed; done
sd_test_flat "$T/edited.json" | grep -q 'IMAGE\[1,64,40,3\]F32' || fail "edited: ImageScale output not 40 wide"

# The image file is gone: SaveImage writes it again from the cached image and
# says so (status cached, "delivered"); nothing executes.
rm -f "$T/output"/sdflow_demo_*.png
run refill
[ "$(sd_test_count "$T/refill.json" executed)" = "0" ] || fail "refill: expected 0 executed"
expect refill 4 cached
expect refill 3 cached
sd_test_flat "$T/refill.json" | grep -q '"status":"cached","delivered":true' || fail "refill: node 4 not marked delivered"
grep -q 'SaveImage #4 cached, files written again' "$T/refill.err" || fail "refill: no 'written again' line: $(cat "$T/refill.err")"
[ "$(ls "$T/output"/sdflow_demo_*.png 2> /dev/null | wc -l)" -eq 1 ] || fail "refill: expected the PNG written again"

# The saved PNG carries the workflow: running it needs nothing new.
png=$(ls "$T/output"/sdflow_demo_*.png | head -1)
"$SDFLOW_BIN" run "$png" --cache "$CACHE" --input-dir "$T/input" --output-dir "$T/output" \
    --report "$T/from_png.json" 2> "$T/from_png.err" || fail "from_png: $(cat "$T/from_png.err")"
[ "$(sd_test_count "$T/from_png.json" executed)" = "0" ] || fail "from_png: expected nothing executed"

# The workflow can come on stdin.
"$SDFLOW_BIN" run - --cache "$CACHE" --input-dir "$T/input" --output-dir "$T/output" \
    --report "$T/stdin.json" < "$WF" > /dev/null 2> "$T/stdin.err" || fail "stdin: $(cat "$T/stdin.err")"
[ "$(sd_test_count "$T/stdin.json" executed)" = "0" ] || fail "stdin: expected nothing executed"

# Two processes on one cache at once.
run concurrent_a --set 2.width=24 --quiet &
pa=$!
run concurrent_b --set 2.width=28 --quiet &
pb=$!
wait $pa || fail "concurrent_a failed: $(cat "$T/concurrent_a.err")"
wait $pb || fail "concurrent_b failed: $(cat "$T/concurrent_b.err")"
for name in concurrent_a concurrent_b; do
    [ "$(sd_test_count "$T/$name.json" executed)" = "3" ] || fail "$name: expected 3 executed"
done
run after_concurrent --set 2.width=28
[ "$(sd_test_count "$T/after_concurrent.json" executed)" = "0" ] || fail "after_concurrent: result not cached"

# --dump writes every output tensor, also of nodes that hit the cache.
run dumped --dump "$T/dump" --quiet
[ "$(sd_test_count "$T/dumped.json" executed)" = "0" ] || fail "dumped: expected nothing executed"
for f in 1_0 1_1 2_0 3_0; do
    [ -s "$T/dump/$f.safetensors" ] || fail "dumped: no $f.safetensors"
done
grep -q '"IMAGE"' "$T/dump/3_0.safetensors" || fail "dumped: 3_0 has no tensor named IMAGE"

# The cache sub-commands see the entries.
"$SDFLOW_BIN" cache stats --cache "$CACHE" > "$T/stats.txt" || fail "cache stats failed"
grep -qE 'entries: +[1-9]' "$T/stats.txt" || fail "cache stats: $(cat "$T/stats.txt")"
"$SDFLOW_BIN" cache list --cache "$CACHE" | grep -q ImageInvert || fail "cache list: no ImageInvert"
"$SDFLOW_BIN" cache gc --max-size 1G --cache "$CACHE" | grep -q 'removed 0 entries' || fail "cache gc 1G removed entries"
"$SDFLOW_BIN" cache gc --max-size 0 --cache "$CACHE" > /dev/null || fail "cache gc 0 failed"
"$SDFLOW_BIN" cache stats --cache "$CACHE" | grep -qE 'entries: +0$' || fail "cache gc 0 left entries"
"$SDFLOW_BIN" cache gc --max-size lots --cache "$CACHE" 2> /dev/null && fail "cache gc accepted a bad size"
"$SDFLOW_BIN" cache gc --cache "$CACHE" 2> /dev/null && fail "cache gc without --max-size accepted"
"$SDFLOW_BIN" cache clear --cache "$CACHE" > /dev/null || fail "cache clear failed"
run after_clear
[ "$(sd_test_count "$T/after_clear.json" executed)" -ge 3 ] || fail "after_clear: expected re-execution"

# An unusable cache file: a warning, and the run goes on uncached.
echo "not a database" > "$T/bad.db"
"$SDFLOW_BIN" run "$WF" --cache "$T/bad.db" --input-dir "$T/input" --output-dir "$T/output" \
    --quiet 2> "$T/badcache.err" || fail "bad cache: run failed: $(cat "$T/badcache.err")"
grep -q "warning" "$T/badcache.err" || fail "bad cache: no warning"

# --no-cache stores no output, but keeps using the file-hash memo of the usual
# database (SDFLOW_CACHE here), so big model files are not rehashed per run.
for i in 1 2; do
    SDFLOW_CACHE="$T/memo.db" "$SDFLOW_BIN" run "$WF" --no-cache --input-dir "$T/input" --output-dir "$T/output" \
        --report "$T/nocache$i.json" --quiet 2> "$T/nocache.err" > /dev/null || fail "--no-cache: $(cat "$T/nocache.err")"
    [ "$(sd_test_count "$T/nocache$i.json" cached)" = "0" ] || fail "--no-cache run $i used cached outputs"
done
"$SDFLOW_BIN" cache stats --cache "$T/memo.db" > "$T/memo.txt" 2>&1 || fail "memo stats: $(cat "$T/memo.txt")"
grep -qE 'entries: +0$' "$T/memo.txt" || fail "--no-cache stored outputs: $(cat "$T/memo.txt")"
grep -qE 'file hashes: +[1-9]' "$T/memo.txt" || fail "--no-cache did not memoize file hashes: $(cat "$T/memo.txt")"
# An unusable database under --no-cache is not even worth a warning.
SDFLOW_CACHE="$T/bad.db" "$SDFLOW_BIN" run "$WF" --no-cache --input-dir "$T/input" --output-dir "$T/output" \
    --quiet 2> "$T/nocache_bad.err" > /dev/null || fail "--no-cache with a bad db: $(cat "$T/nocache_bad.err")"
[ -s "$T/nocache_bad.err" ] && fail "--no-cache with a bad db printed: $(cat "$T/nocache_bad.err")"

sd_test_end "all run/cache checks passed"
