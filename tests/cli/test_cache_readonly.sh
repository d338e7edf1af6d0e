# docs/cache.md: a cache database in a folder the user cannot write is opened
# read-only. `sdflow run` says so in one line, serves the hits, runs what
# misses without trying to store it, and leaves the database untouched
# (issue 14: it printed "cache unusable ... readonly database" and ran
# everything uncached). File modes do not bind root, so as root the runs
# that must not write go through setpriv as uid 65534.
set -u
: "${SDFLOW_BIN:?}"
. "$(dirname "$0")/lib.sh"

sd_test_need_nodes LoadImage ImageInvert SaveImage
if [ "$(id -u)" -eq 0 ]; then
    command -v setpriv > /dev/null || { echo "SKIP: running as root without setpriv"; exit 77; }
    as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
else
    as_user() { "$@"; }
fi

# Not under the build tree: uid 65534 must reach the folder and the binary,
# and a checkout under /root (mode 0700) is out of its reach.
T=$(mktemp -d "${TMPDIR:-/tmp}/sdflow-cli-cache-ro.XXXXXX") || { echo "cannot make a scratch folder"; exit 1; }
trap 'chmod -R u+w "$T" 2> /dev/null; rm -rf "$T"' EXIT
mkdir -p "$T/db" "$T/input" "$T/output" "$T/bin"
cp "$SDFLOW_BIN" "$T/bin/sdflow" && chmod 755 "$T/bin" "$T/bin/sdflow"
SDFLOW_BIN="$T/bin/sdflow"
sd_test_write_png "$T/input/pic.png"
chmod 755 "$T" "$T/db" "$T/input" && chmod 777 "$T/output"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cat > "$T/wf.json" <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "pic.png"}},
 "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
 "4": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "ro"}}}
J
chmod 644 "$T/wf.json"
args=("$T/wf.json" --cache "$T/db/cache.db" --input-dir "$T/input" --output-dir "$T/output")

# the owner fills the cache
"$SDFLOW_BIN" run "${args[@]}" > /dev/null 2> "$T/fill.err" || fail "fill: $(cat "$T/fill.err")"
[ -e "$T/db/cache.db-wal" ] && fail "fill: the WAL was left behind (the case below needs it gone)"
chmod 644 "$T/db/cache.db"
[ "$(id -u)" -eq 0 ] || chmod 555 "$T/db"
sum_before=$(sha256sum < "$T/db/cache.db")

# a reader who cannot write the folder: hits served, a one-line notice
as_user "$SDFLOW_BIN" run "${args[@]}" --report "$T/output/ro.json" > /dev/null 2> "$T/ro.err"
rc=$?
[ "$rc" -eq 0 ] || fail "read-only: exit code $rc: $(cat "$T/ro.err")"
grep -q "cache unusable" "$T/ro.err" && fail "read-only: the cache was not used: $(cat "$T/ro.err")"
[ "$(grep -c "is read-only here" "$T/ro.err")" = "1" ] || fail "read-only: no one-line notice: $(cat "$T/ro.err")"
[ "$(sd_test_status "$T/output/ro.json" 4)" = "cached" ] || fail "read-only: SaveImage is $(sd_test_status "$T/output/ro.json" 4)"

# what misses runs, and is not stored (no failed put per node either)
as_user "$SDFLOW_BIN" run "${args[@]}" --set 4.filename_prefix=other --report "$T/output/miss.json" \
    > /dev/null 2> "$T/miss.err"
rc=$?
[ "$rc" -eq 0 ] || fail "miss: exit code $rc: $(cat "$T/miss.err")"
[ "$(sd_test_status "$T/output/miss.json" 4)" = "executed" ] || fail "miss: SaveImage is $(sd_test_status "$T/output/miss.json" 4)"
[ "$(sd_test_status "$T/output/miss.json" 2)" = "cached" ] || fail "miss: ImageInvert is $(sd_test_status "$T/output/miss.json" 2)"
grep -q "warning" "$T/miss.err" && fail "miss: warnings: $(cat "$T/miss.err")"

[ "$(sha256sum < "$T/db/cache.db")" = "$sum_before" ] || fail "the read-only database was changed"
ls "$T/db" | grep -q -- "-wal\|-shm\|-journal" && fail "files were left in the read-only folder: $(ls "$T/db")"
chmod 755 "$T/db"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "read-only cache ok"
