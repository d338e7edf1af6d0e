# Output files (issue 14, issue 12 point 2), model-free (EmptyImage ->
# SaveImage):
#  - 8 concurrent runs into one folder with one prefix, 20 times: every run's
#    image is there under its own name, holding its own picture; nothing is
#    lost or overwritten and no temporary is left; with a shared cache, each
#    rerun's hit names that run's own image;
#  - a run killed with -9 leaves temporaries that the next run removes;
#  - a subfolder of the output folder that is a symbolic link is refused and
#    nothing is written through it; links at candidate names are not followed;
#  - a rerun whose SaveImage is a cache hit delivers its image into a new
#    --output-dir (ComfyUI counter naming) and says it came from the cache.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_output_files EmptyImage SaveImage




# wf PREFIX SIZE BATCH: a workflow saving a SIZExSIZE image of colour 1 (set per run)
wf() {
    cat <<JSON
{
  "1": {"class_type": "EmptyImage", "inputs": {"width": $2, "height": $2, "batch_size": $3, "color": 1}},
  "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "$1"}}
}
JSON
}
wf race 8 1 > "$T/race.json"

# --- 8 concurrent runs, 20 trials -------------------------------------------------------
N=8
TRIALS=${SDFLOW_TEST_RACE_TRIALS:-20}
lost=0
for trial in $(seq 1 "$TRIALS"); do
    out="$T/race$trial"
    pids=""
    for i in $(seq 1 $N); do
        # A distinct colour per run: each image says whose it is.
        "$SDFLOW_BIN" run "$T/race.json" --no-cache --quiet --output-dir "$out" \
            --set "1.color=$((trial * 100 + i))" > "$T/race.$i.out" 2> "$T/race.$i.err" &
        pids="$pids $!"
    done
    i=0
    for p in $pids; do
        i=$((i + 1))
        wait "$p" || fail "trial $trial run $i failed: $(cat "$T/race.$i.err")"
    done
    n_png=$(ls "$out"/race_*_.png 2> /dev/null | wc -l)
    [ "$n_png" -eq $N ] || { lost=$((lost + 1)); fail "trial $trial: $n_png PNGs for $N runs: $(ls "$out")"; }
    for i in $(seq 1 $N); do
        f=$(cat "$T/race.$i.out")
        [ -f "$f" ] || { fail "trial $trial run $i: printed '$f', which is not there"; continue; }
        # The prompt chunk is stored uncompressed: the colour is readable.
        grep -aq "\"color\": $((trial * 100 + i))[,}]" "$f" ||
            fail "trial $trial run $i: $f holds another run's image"
    done
    [ "$(sort "$T"/race.*.out | uniq | wc -l)" -eq $N ] || fail "trial $trial: two runs printed one file"
    ls -a "$out" | grep -q '^\.sdflow-tmp-' && fail "trial $trial: temporaries left: $(ls -a "$out")"
done
echo "race: $TRIALS trials of $N concurrent runs, $lost with a lost image"

# Once more with one shared cache: afterwards each rerun is a cache hit that
# names the run's own image, never one that another run wrote.
out="$T/race_cached"
pids=""
for i in $(seq 1 $N); do
    "$SDFLOW_BIN" run "$T/race.json" --cache "$T/race.db" --quiet --output-dir "$out" \
        --set "1.color=$i" > "$T/race.$i.out" 2> "$T/race.$i.err" &
    pids="$pids $!"
done
for p in $pids; do wait "$p" || fail "shared-cache race: a run failed"; done
for i in $(seq 1 $N); do
    "$SDFLOW_BIN" run "$T/race.json" --cache "$T/race.db" --quiet --output-dir "$out" \
        --set "1.color=$i" --report "$T/rerun.json" > "$T/rerun.out" 2> "$T/rerun.err" ||
        fail "shared-cache rerun $i: $(cat "$T/rerun.err")"
    [ "$(cat "$T/rerun.out")" = "$(cat "$T/race.$i.out")" ] ||
        fail "shared-cache rerun $i printed $(cat "$T/rerun.out"), its run wrote $(cat "$T/race.$i.out")"
    grep -aq "\"color\": $i[,}]" "$(cat "$T/rerun.out")" || fail "shared-cache rerun $i: another run's image"
    [ "$(sd_test_count "$T/rerun.json" executed)" = 0 ] || fail "shared-cache rerun $i executed something"
done
[ "$(ls "$out" | wc -l)" -eq $N ] || fail "shared-cache reruns wrote files: $(ls "$out")"

# --- kill -9 leftovers ----------------------------------------------------------------
out="$T/killed"
mkdir -p "$out"
host=$(uname -n | tr -c 'A-Za-z0-9._\n' '_' | cut -c1-63)
# And a real kill -9 somewhere in a run writing big images (whatever it had
# reached, the next run leaves no temporary of it behind).
wf killed 1024 8 > "$T/big.json"
"$SDFLOW_BIN" run "$T/big.json" --no-cache --quiet --output-dir "$out" > /dev/null 2>&1 &
big=$!
sleep 0.2
kill -9 $big 2> /dev/null
wait $big 2> /dev/null
(exit 0) &
dead=$!
wait $dead
# What a writer killed before publishing leaves (the pid is gone now).
printf 'half a png' > "$out/.sdflow-tmp-$dead-0-abcdef-$host"
# One of a live process (this shell) stays.
printf 'being written' > "$out/.sdflow-tmp-$$-0-ghijkl-$host"
"$SDFLOW_BIN" run "$T/race.json" --no-cache --output-dir "$out" > /dev/null 2> "$T/killed.err" ||
    fail "run after kill -9: $(cat "$T/killed.err")"
[ -e "$out/.sdflow-tmp-$dead-0-abcdef-$host" ] && fail "the dead writer's temporary is still there"
[ -e "$out/.sdflow-tmp-$$-0-ghijkl-$host" ] || fail "a live writer's temporary was removed"
left=$(ls -a "$out" | grep '^\.sdflow-tmp-' | grep -v -- "-$$-0-ghijkl-")
[ -z "$left" ] || fail "temporaries of killed runs left: $left"
grep -q "removed .* unfinished file" "$T/killed.err" || fail "the cleanup was not reported: $(cat "$T/killed.err")"
rm -f "$out/.sdflow-tmp-$$-0-ghijkl-$host"

# --- links ---------------------------------------------------------------------------
out="$T/links"
mkdir -p "$out" "$T/outside"
ln -s "$T/outside" "$out/sub"
wf sub/pic 8 1 > "$T/sub.json"
if "$SDFLOW_BIN" run "$T/sub.json" --no-cache --output-dir "$out" > /dev/null 2> "$T/sub.err"; then
    fail "saved through a linked subfolder"
fi
grep -q "symbolic link" "$T/sub.err" || fail "the error does not name the link: $(cat "$T/sub.err")"
grep -q "SaveImage" "$T/sub.err" || fail "the error does not name the node: $(cat "$T/sub.err")"
[ -z "$(ls -A "$T/outside")" ] || fail "something was written through the link: $(ls -A "$T/outside")"
# Links at the names SaveImage would pick: one to a file outside, one dangling.
printf 'precious' > "$T/outside/precious.txt"
ln -s "$T/outside/precious.txt" "$out/race_00001_.png"
ln -s "$T/outside/new.png" "$out/race_00002_.png"
"$SDFLOW_BIN" run "$T/race.json" --no-cache --quiet --output-dir "$out" > "$T/links.out" 2> "$T/links.err" ||
    fail "run beside links: $(cat "$T/links.err")"
[ "$(cat "$T/outside/precious.txt")" = precious ] || fail "a link's target was overwritten"
[ -e "$T/outside/new.png" ] && fail "a dangling link was followed"
saved=$(cat "$T/links.out")
[ -f "$saved" ] && [ ! -L "$saved" ] || fail "the image is not a plain file: '$saved'"

# --- a cached SaveImage delivers into a new --output-dir --------------------------------
C="$T/cache.db"
wf again 8 1 > "$T/again.json"
run_to() { # OUTDIR NAME
    "$SDFLOW_BIN" run "$T/again.json" --cache "$C" --output-dir "$T/$1" --report "$T/$2.json" \
        > "$T/$2.out" 2> "$T/$2.err" || fail "$2: $(cat "$T/$2.err")"
}
run_to out1 first
run_to out2 second
[ -f "$T/out2/again_00001_.png" ] || fail "rerun into out2 wrote nothing there: $(ls "$T/out2" 2>&1)"
[ "$(cat "$T/second.out")" = "$T/out2/again_00001_.png" ] ||
    [ "$(cat "$T/second.out")" = "$(cd "$T/out2" && pwd -P)/again_00001_.png" ] ||
    fail "rerun printed '$(cat "$T/second.out")', not the file in out2"
cmp -s "$T/out1/again_00001_.png" "$T/out2/again_00001_.png" || fail "the delivered image differs"
[ "$(sd_test_status "$T/second.json" 2)" = cached ] || fail "second: SaveImage is $(sd_test_status "$T/second.json" 2)"
[ "$(sd_test_status "$T/second.json" 1)" = cached ] || fail "second: EmptyImage is $(sd_test_status "$T/second.json" 1)"
[ "$(sd_test_count "$T/second.json" executed)" = 0 ] || fail "second: something executed"
sd_test_flat "$T/second.json" | grep -q '"delivered":true' || fail "second: report does not say delivered"
grep -q 'SaveImage #2 cached, files written again' "$T/second.err" || fail "second: $(cat "$T/second.err")"
# Into out2 again: the file there is this run's, nothing new is written.
run_to out2 third
[ "$(ls "$T/out2" | wc -l)" -eq 1 ] || fail "third: wrote again into out2: $(ls "$T/out2")"
sd_test_flat "$T/third.json" | grep -q '"delivered"' && fail "third: delivered again"
# The saved PNG run again into a third folder (its embedded workflow).
"$SDFLOW_BIN" run "$T/out1/again_00001_.png" --cache "$C" --output-dir "$T/out3" --report "$T/png.json" \
    > "$T/png.out" 2> "$T/png.err" || fail "png rerun: $(cat "$T/png.err")"
[ -f "$T/out3/again_00001_.png" ] || fail "png rerun into out3 wrote nothing there"
sd_test_flat "$T/png.json" | grep -q '"status":"cached","delivered":true' || fail "png rerun: not delivered from the cache"
# Someone replaces the file: the cache does not take it for the run's own.
printf 'not a png' > "$T/out2/again_00001_.png"
run_to out2 fourth
[ -f "$T/out2/again_00002_.png" ] || fail "fourth: the replaced file was taken for the cached one"
[ "$(cat "$T/out2/again_00001_.png")" = "not a png" ] || fail "fourth: overwrote a file"

sd_test_end "all output file checks passed"
