#!/usr/bin/env bash
# gpu-check.sh - the whole GPU checklist of docs/cuda.md in one command, on
# binaries that are already built (it builds nothing): the CUDA parity test,
# the golden tests on the CUDA backend in f32 / bf16 / f16, the precision
# options end to end, --gpu-memory on SDXL, the second-process cold start, and
# sdflow-bench --device cuda beside bench/torch_ref.py --device cuda. Writes
# one summary table (stdout and OUT/summary.md) and the logs (OUT/logs/).
#
# Exit status: 0 every step passed or was skipped for a stated reason; 1 a
# step failed; 2 a usage error or missing binaries; 77 no usable GPU (the
# reason printed; nothing else runs). A missed speed or memory target is a
# measurement, reported in the table, not a failure.
#
#   scripts/gpu-check.sh [--build DIR | --bin DIR] [--work DIR] [--out DIR]
#                        [--only STEPS] [--skip STEPS] [--device cuda|cpu] [--tiny] [--list]
#
# --build DIR: a build tree (sdflow, bench/sdflow-bench, tests/test_*);
# default build-cuda/ when it has sdflow, else build/. --bin DIR: one folder
# holding all of them (the unpacked payload of scripts/gpu-pack.sh). Test
# data: $SDFLOW_TESTDATA and $SDFLOW_SHARED (default ../shared). Steps, in
# order: parity golden precision gpu_memory cold_start bench (docs/cuda.md).
# --device cpu rehearses the script itself on the CPU backend (the goldens'
# f16 runs skip there; nothing it reports is about the GPU); --tiny runs
# steps precision..cold_start on the tiny presets at 64x64, 3 steps (with
# --device cpu: a rehearsal of those steps' logic in a minute).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STEPS_ALL="parity golden precision gpu_memory cold_start bench"
DEV=cuda TINY="" BUILD="" BIN="" WORK=${TMPDIR:-/tmp}/sdflow-gpu-check OUT="" ONLY="" SKIP=""
usage() { sed -n '15,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --build) BUILD=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --work) WORK=$2; shift ;;
    --out) OUT=$2; shift ;;
    --only) ONLY=$(echo "$2" | tr , ' '); shift ;;
    --skip) SKIP=$(echo "$2" | tr , ' '); shift ;;
    --device) DEV=$2; shift ;;
    --tiny) TINY=-tiny ;;
    --list) echo "$STEPS_ALL"; exit 0 ;;
    -h|--help) usage ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
    esac
    shift
done
for s in $ONLY $SKIP; do
    case " $STEPS_ALL " in *" $s "*) ;; *) echo "gpu-check: no step '$s' (steps: $STEPS_ALL)" >&2; exit 2 ;; esac
done
case $DEV in cuda|cpu) ;; *) echo "gpu-check: --device must be cuda or cpu, not '$DEV'" >&2; exit 2 ;; esac
OUT=${OUT:-$WORK/out}
LOG=$OUT/logs
mkdir -p "$WORK" "$LOG" "$WORK/tmp" || { echo "gpu-check: cannot create $WORK / $OUT" >&2; exit 2; }
SUM=$OUT/summary.md
: > "$SUM"

# ---- where the binaries and the data are --------------------------------------
if [ -n "$BIN" ]; then
    SDFLOW=$BIN/sdflow BENCH=$BIN/sdflow-bench TESTS=$BIN
else
    if [ -z "$BUILD" ]; then
        BUILD=$ROOT/build-cuda
        [ -x "$BUILD/sdflow" ] || BUILD=$ROOT/build
    fi
    SDFLOW=$BUILD/sdflow BENCH=$BUILD/bench/sdflow-bench TESTS=$BUILD/tests
fi
if [ ! -x "$SDFLOW" ]; then
    echo "gpu-check: no sdflow binary at $SDFLOW: build first (cmake --build build-cuda), or pass --build DIR / --bin DIR" >&2
    exit 2
fi
export SDFLOW_SHARED=${SDFLOW_SHARED:-$ROOT/../shared}
export SDFLOW_TESTDATA=${SDFLOW_TESTDATA:-$SDFLOW_SHARED/testdata}
export SDFLOW_TEST_TMP=$WORK/tmp SDFLOW_BIN=$SDFLOW SDFLOW_SOURCE_DIR=$ROOT

# ---- the table -------------------------------------------------------------------
N_PASS=0 N_FAIL=0 N_SKIP=0
ROWS=()
row() { # row STATUS STEP WHAT SECONDS DETAIL
    ROWS+=("| $2 | $3 | $1 | $4 | $5 |")
    case $1 in PASS) N_PASS=$((N_PASS + 1)) ;; FAIL) N_FAIL=$((N_FAIL + 1)) ;; *) N_SKIP=$((N_SKIP + 1)) ;; esac
    printf '%-5s %-11s %-44s %5ss %s\n' "$1" "$2" "$3" "$4" "$5"
}
# A line for the table: no pipes, no newlines, at most 160 characters.
clean() { tr '\n|' ' /' | sed 's/  */ /g; s/^ //; s/ $//' | cut -c1-160; }
finish() {
    {
        echo "# gpu-check $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "- device: ${DEVICE:-none}"
        echo "- sdflow: $("$SDFLOW" version 2>&1 | head -1)"
        echo "- binaries: ${BIN:-$BUILD}; test data: $SDFLOW_TESTDATA"
        echo
        echo "| step | what | result | s | detail |"
        echo "|---|---|---|---:|---|"
        for r in "${ROWS[@]}"; do echo "$r"; done
        echo
        echo "$N_PASS passed, $N_FAIL failed, $N_SKIP skipped or measured only"
        [ -n "${EXTRA_SUMMARY:-}" ] && { echo; cat "$EXTRA_SUMMARY"; }
    } > "$SUM"
    echo "gpu-check: $N_PASS passed, $N_FAIL failed, $N_SKIP skipped or measured only; table: $SUM, logs: $LOG"
}
wanted() {
    [ -n "$ONLY" ] && { case " $ONLY " in *" $1 "*) ;; *) return 1 ;; esac; }
    case " $SKIP " in *" $1 "*) return 1 ;; esac
    return 0
}
now() { date +%s; }

# ---- 0. is there a GPU? sdflow itself answers (what it would run on) -------------
PROBE=$WORK/probe
mkdir -p "$PROBE"
cat > "$PROBE/wf.json" <<'JSON'
{"1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
 "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}
JSON
if ! "$SDFLOW" run "$PROBE/wf.json" --device $DEV --no-cache --quiet --output-dir "$PROBE/out" \
    > "$LOG/probe.log" 2>&1; then
    echo "gpu-check: refused: no usable GPU for sdflow here; nothing was run. sdflow --device cuda says: $(clean < "$LOG/probe.log")" >&2
    row SKIP gpu "sdflow run --device $DEV" 0 "no usable GPU: $(clean < "$LOG/probe.log")"
    finish > /dev/null
    exit 77
fi
[ $DEV = cpu ] && DEVICE="the CPU (--device cpu: a rehearsal of this script, no GPU result)" ||
DEVICE=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
DEVICE=${DEVICE:-"a CUDA device (nvidia-smi absent)"}
row PASS gpu "sdflow run --device $DEV" 0 "$DEVICE"

# run_test STEP WHAT LOGNAME TIMEOUT ENV... -- CMD...: a row from the exit status
# (0 pass, 77 skip with the test's reason, else fail) and the log's last line.
run_test() {
    local step=$1 what=$2 log=$LOG/$3.log tmo=$4 t0 rc; shift 4
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    t0=$(now)
    env "${envs[@]}" timeout "$tmo" "$@" > "$log" 2>&1
    rc=$?
    local last; last=$(grep -v '^\s*$' "$log" | tail -1 | clean)
    case $rc in
    0) row PASS "$step" "$what" $(($(now) - t0)) "$last" ;;
    77) row SKIP "$step" "$what" $(($(now) - t0)) "skipped: $last" ;;
    124) row FAIL "$step" "$what" $(($(now) - t0)) "timed out after ${tmo}s" ;;
    *) row FAIL "$step" "$what" $(($(now) - t0)) "exit $rc: $last" ;;
    esac
    return $rc
}

# ---- 1. kernels.cuda_parity: every op, f32/bf16/f16 ------------------------------
if wanted parity; then
    if [ -x "$TESTS/test_kernels_cuda_parity" ]; then
        run_test parity "kernels.cuda_parity (f32, bf16, f16)" parity 600 -- "$TESTS/test_kernels_cuda_parity"
        # its worst-error table goes under the summary
        sed -n '/^op\/precision/,$p' "$LOG/parity.log" > "$OUT/parity-table.txt"
    else
        row SKIP parity "kernels.cuda_parity" 0 "not built/packed: $TESTS/test_kernels_cuda_parity"
    fi
fi

# ---- 2. the golden tests on CUDA ------------------------------------------------------
# The tests that compute on the backend SDFLOW_TEST_BACKEND names are those
# whose source uses it (tests/golden.h's sd_golden_backend, or the variable).
# Precisions: f32 for all; bf16 and f16 for the goldens tests/CMakeLists.txt
# registers a .bf16 variant of (the others have no reduced-precision bound).
if wanted golden; then
    absent=()
    narrow=$(sed -n 's/.*SDFLOW_DNNL_ENABLED AND base MATCHES "^\(test_golden_[^"]*\)".*/^\1/p' "$ROOT/tests/CMakeLists.txt")
    [ -z "$narrow" ] && row FAIL golden "bf16/f16 test list" 0 "tests/CMakeLists.txt: no 'SDFLOW_DNNL_ENABLED AND base MATCHES' line found"
    for src in $(grep -l 'sd_golden_backend\|SDFLOW_TEST_BACKEND' "$ROOT"/tests/*/test_*.c | sort); do
        layer=$(basename "$(dirname "$src")") base=$(basename "$src" .c)
        exe=$TESTS/test_${layer}_${base#test_} name=$layer.${base#test_}
        [ "$base" = test_golden_vae ] && sets="- $(sed -n 's/^foreach(set \(.*\))$/\1/p' "$ROOT/tests/CMakeLists.txt")" || sets=-
        if [ ! -x "$exe" ]; then absent+=("$name"); continue; fi
        for set in $sets; do
            precs=f32; [ -n "$narrow" ] && [[ $base =~ $narrow ]] && precs="f32 bf16 f16"
            for p in $precs; do
                arg=(); label=$name
                [ "$set" != - ] && arg=("$set") label=${name}_$set
                run_test golden "$label $DEV $p" "golden.$label.$p" 600 \
                    SDFLOW_TEST_BACKEND=$DEV SDFLOW_TEST_PRECISION=$p -- "$exe" "${arg[@]}"
            done
        done
    done
    [ ${#absent[@]} -gt 0 ] && row SKIP golden "not built/packed here" 0 "${absent[*]}"
fi

# ---- the full-size models for steps 3-6 (random weights, sdflow synth) -----------
MODELS=$WORK/models
# --tiny: the tiny presets with their stand-in vocabulary, small and short
SMALL=()
[ -n "$TINY" ] && SMALL=(--tokenizer-dir "$MODELS/tok" --set 5.width=64 --set 5.height=64 --set 3.steps=3)
synth() { # synth PRESET: MODELS/checkpoints/sdflow-random-PRESET.safetensors (kept across runs)
    local f=$MODELS/checkpoints/sdflow-random-$1.safetensors t0
    [ -s "$f" ] && return 0
    t0=$(now)
    local tok=(); [ -n "$TINY" ] && tok=(--tokenizer-dir "$MODELS/tok")
    if "$SDFLOW" synth --preset "$1" --models-dir "$MODELS" "${tok[@]}" > "$LOG/synth.$1.log" 2>&1; then
        row PASS setup "sdflow synth --preset $1" $(($(now) - t0)) "$(du -h "$f" | cut -f1) $f"
    else
        row FAIL setup "sdflow synth --preset $1" $(($(now) - t0)) "$(tail -1 "$LOG/synth.$1.log" | clean)"
        return 1
    fi
}
# sd_run NAME WORKFLOW CKPT TIMEOUT [sdflow run options...]: one example
# workflow on the synthesized checkpoint; PNGs in WORK/runs/NAME, report
# WORK/runs/NAME.json, progress events (timestamped) WORK/runs/NAME.events.
sd_run() {
    local name=$1 wf=$2 ckpt=$3 tmo=$4; shift 4
    local d=$WORK/runs/$name
    rm -rf "$d" "$d.json"; mkdir -p "$d"
    timeout "$tmo" "$SDFLOW" run "$ROOT/workflows/$wf" --device $DEV --models-dir "$MODELS" \
        --set "4.ckpt_name=sdflow-random-$ckpt.safetensors" --output-dir "$d" --report "$d.json" \
        --progress json "${SMALL[@]}" "$@" 2> "$LOG/run.$name.log" |
        while IFS= read -r l; do printf '%s %s\n' "${EPOCHREALTIME:-$(date +%s.%N)}" "$l"; done > "$d.events"
    return "${PIPESTATUS[0]}"
}
png_of() { find "$WORK/runs/$1" -name '*.png' | sort | head -1; }
# Largest per-channel difference of two 8-bit PNGs (python3's zlib; no PIL).
png_diff() {
    python3 - "$1" "$2" <<'PY' 2>&1 || echo "n/a (python3 could not compare)"
import sys, zlib, struct
def load(p):
    b = open(p, 'rb').read(); i = 8; idat = b''; w = h = ct = 0
    while i < len(b):
        n, t = struct.unpack('>I4s', b[i:i + 8]); c = b[i + 8:i + 8 + n]; i += 12 + n
        if t == b'IHDR': w, h, bd, ct = struct.unpack('>IIBB', c[:10])
        elif t == b'IDAT': idat += c
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ct]; raw = zlib.decompress(idat); st = w * ch; out = []; prev = bytearray(st); o = 0
    for _ in range(h):
        f = raw[o]; line = bytearray(raw[o + 1:o + 1 + st]); o += 1 + st
        for x in range(st):
            a = line[x - ch] if x >= ch else 0; u = prev[x]; c = prev[x - ch] if x >= ch else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + u) & 255
            elif f == 3: line[x] = (line[x] + (a + u) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(u - c), abs(a - c), abs(a + u - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else u if pb <= pc else c)) & 255
        out += line; prev = line
    return w, h, out
a, b = load(sys.argv[1]), load(sys.argv[2])
if a[:2] != b[:2]: print('sizes differ'); sys.exit(0)
d = [abs(x - y) for x, y in zip(a[2], b[2])]
print('max %d/255, mean %.3f' % (max(d), sum(d) / len(d)))
PY
}
redo_of() { tr -d ' \n' < "$1" 2>/dev/null | grep -o '"vae_f32_redo":\[[^]]*\]' || echo "no vae_f32_redo"; }
run_row() { # run_row STEP NAME WHAT rc seconds
    if [ "$4" = 0 ]; then row PASS "$1" "$3" "$5" "report $WORK/runs/$2.json"
    else row FAIL "$1" "$3" "$5" "exit $4: $(grep -v '^\s*$' "$LOG/run.$2.log" | tail -1 | clean)"; fi
}

# ---- 3. the precision options end to end (SD1.5 512x512, 20 steps) ----------------
if wanted precision && synth sd1$TINY; then
    for v in "bf16 --vae-precision f16" "bf16 --vae-precision f32" "f16 --clip-precision f32" "f32"; do
        name=prec-$(echo "$v" | tr -d '-' | tr ' ' '_')
        t0=$(now); sd_run "$name" txt2img_sd15.json sd1$TINY 300 --no-cache --precision $v; rc=$?
        run_row precision "$name" "txt2img_sd15 --precision $v" $rc $(($(now) - t0))
    done
    a=$(png_of prec-bf16_vaeprecision_f16) b=$(png_of prec-bf16_vaeprecision_f32)
    if [ -n "$a" ] && [ -n "$b" ]; then
        row MEAS precision "VAE f16 vs f32 decode (bf16 UNet)" 0 \
            "$(png_diff "$a" "$b"); f16 run: $(redo_of "$WORK/runs/prec-bf16_vaeprecision_f16.json")"
    fi
    for p in bf16_vaeprecision_f32 f16_clipprecision_f32; do
        a=$(png_of prec-f32) b=$(png_of prec-$p)
        [ -n "$a" ] && [ -n "$b" ] && row MEAS precision "$p vs f32 image" 0 "$(png_diff "$a" "$b")"
    done
fi

# Peak device memory (nvidia-smi, every 100 ms) while a command runs:
# watch_mem start / watch_mem stop -> MEM_BASE, MEM_PEAK in MiB.
watch_mem() {
    if [ "$1" = start ]; then
        MEM_BASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$WORK/mem.log" 2>/dev/null &
        MEM_PID=$!
    else
        kill "$MEM_PID" 2>/dev/null; wait "$MEM_PID" 2>/dev/null
        MEM_PEAK=$(sort -n "$WORK/mem.log" | tail -1)
    fi
}

# ---- 4. --gpu-memory on SDXL 1024x1024 bf16, and its peak device memory ---------------
if wanted gpu_memory && synth sdxl$TINY; then
    t0=$(now); sd_run xl-cap6g txt2img_sdxl.json sdxl$TINY 600 --no-cache --precision bf16 --gpu-memory 6G; rc=$?
    if [ $rc = 0 ] || { [ $rc = 1 ] && grep -q 'gpu-memory caps it at 6144 MiB' "$LOG/run.xl-cap6g.log"; }; then
        row PASS gpu_memory "txt2img_sdxl bf16 --gpu-memory 6G" $(($(now) - t0)) \
            "$([ $rc = 0 ] && echo ran || echo "refused naming the cap: $(grep -m1 'caps it at' "$LOG/run.xl-cap6g.log" | clean)")"
    else
        run_row gpu_memory xl-cap6g "txt2img_sdxl bf16 --gpu-memory 6G" $rc $(($(now) - t0))
    fi
    watch_mem start
    t0=$(now); sd_run xl-peak txt2img_sdxl.json sdxl$TINY 600 --no-cache --precision bf16; rc=$?
    watch_mem stop
    run_row gpu_memory xl-peak "txt2img_sdxl bf16 (no cap)" $rc $(($(now) - t0))
    if [ $rc = 0 ] && [ -n "${MEM_PEAK:-}" ]; then
        wmib=$(( $(stat -L -c %s "$MODELS/checkpoints/sdflow-random-sdxl$TINY.safetensors") / 1048576 ))
        used=$((MEM_PEAK - ${MEM_BASE:-0}))
        verdict=missed; [ $used -le $((wmib + 4096)) ] && verdict=met
        row MEAS gpu_memory "peak device memory, SDXL bf16" 0 \
            "$used MiB over the idle $MEM_BASE MiB; weights (file) $wmib MiB; target <= weights + 4096 MiB: $verdict"
    fi
fi

# ---- 5. second-process cold start: the stored conv choices -------------------------
# Two processes on one fresh cache database (--no-cache: outputs are not
# cached, the algorithm choices are). Time from the checkpoint loader's end
# to the first sampler step, per process; the two images must be identical.
if wanted cold_start && synth sd1$TINY; then
    rm -f "$WORK/cold.db"
    for i in 1 2; do
        t0=$(now); SDFLOW_CACHE=$WORK/cold.db sd_run cold$i txt2img_sd15.json sd1$TINY 300 --no-cache --precision bf16; rc=$?
        run_row cold_start cold$i "process $i: txt2img_sd15 bf16, cache $WORK/cold.db" $rc $(($(now) - t0))
        ev=$WORK/runs/cold$i.events
        tl=$(grep '"node_done"' "$ev" | grep '"CheckpointLoaderSimple"' | head -1 | cut -d' ' -f1)
        ts=$(grep '"event":"step"' "$ev" | head -1 | cut -d' ' -f1)
        if [ -n "$tl" ] && [ -n "$ts" ]; then
            dt=$(awk -v a="$tl" -v b="$ts" 'BEGIN{printf "%.2f", b - a}')
            verdict=""; [ $i = 2 ] && verdict="; target <= 1.5 s: $(awk -v d="$dt" 'BEGIN{print d <= 1.5 ? "met" : "missed"}')"
            row MEAS cold_start "process $i: loader done -> first step" 0 "$dt s$verdict"
        fi
    done
    n=$(python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
t = c.execute(\"select count(*) from sqlite_master where name = 'algo_choices'\").fetchone()[0]
print(c.execute('select count(*) from algo_choices').fetchone()[0] if t else 'none (no algo_choices table)')" \
        "$WORK/cold.db" 2>/dev/null || echo "? (python3 sqlite3 failed)")
    a=$(png_of cold1) b=$(png_of cold2)
    if [ -n "$a" ] && [ -n "$b" ] && cmp -s "$a" "$b"; then
        row PASS cold_start "two processes: byte-identical PNGs" 0 "algo_choices rows: $n"
    else
        row FAIL cold_start "two processes: byte-identical PNGs" 0 "the PNGs differ or are missing ($a, $b); algo_choices rows: $n"
    fi
fi

# ---- 6. sdflow-bench --device cuda beside torch_ref.py --device cuda ----------------
if wanted bench; then
    if [ -n "$TINY" ]; then
        row SKIP bench "sdflow-bench" 0 "--tiny: the bench runs full-size models only"
    elif [ ! -x "$BENCH" ]; then
        row SKIP bench "sdflow-bench" 0 "not built/packed: $BENCH"
    else
        mkdir -p "$WORK/bench"
        # the bench's checkpoints are the same writers at seed 1 as sdflow synth's
        for p in sd1 sdxl; do
            f=$MODELS/checkpoints/sdflow-random-$p.safetensors
            [ -s "$f" ] && [ ! -e "$WORK/bench/$p-random-f16.safetensors" ] && ln -s "$f" "$WORK/bench/$p-random-f16.safetensors"
        done
        script=$ROOT/bench/torch_ref.py; [ -n "$BIN" ] && [ -f "$BIN/../torch_ref.py" ] && script=$BIN/../torch_ref.py
        torch=$(python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda")' 2>/dev/null || echo "no torch")
        run_test bench "sdflow-bench --device $DEV (PyTorch: $torch)" bench 600 -- \
            "$BENCH" --device $DEV --phases unet,vae,clip,txt2img,unet_sdxl,flux --work-dir "$WORK/bench" \
            --torch-script "$script"
        grep '^|' "$LOG/bench.log" > "$OUT/bench-table.md"
    fi
fi

EXTRA_SUMMARY=$WORK/extra.md
: > "$EXTRA_SUMMARY"
[ -s "$OUT/parity-table.txt" ] && { echo '## kernels.cuda_parity worst errors'; echo '```'; cat "$OUT/parity-table.txt"; echo '```'; } >> "$EXTRA_SUMMARY"
[ -s "$OUT/bench-table.md" ] && { echo '## sdflow-bench --device cuda'; echo; cat "$OUT/bench-table.md"; } >> "$EXTRA_SUMMARY"
finish
cat "$SUM"
[ $N_FAIL = 0 ]
