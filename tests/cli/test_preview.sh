# --preview PATH.png: the sampler's latent is written as a picture while it
# runs (latent2rgb: 1/8 of the image size, SD1 and SDXL), always including
# the last step, announced as "preview" JSON events; a bad path is a warning,
# not a failed run; the REPL takes --preview too.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_preview CheckpointLoaderSimple KSampler VAEDecode SaveImage
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
sd_test_tiny_sd1 "$T"

# PNG signature, IHDR size and colour type, and a full decode by sdflow itself
png_size() {
    python3 - "$1" << 'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, size, idat, end = 8, None, b"", False
while pos < len(d):
    n, kind = struct.unpack(">I4s", d[pos:pos + 8])
    body = d[pos + 8:pos + 8 + n]
    assert zlib.crc32(kind + body) == struct.unpack(">I", d[pos + 8 + n:pos + 12 + n])[0], "bad CRC"
    if kind == b"IHDR": size = struct.unpack(">II", body[:8]) + (body[9],)
    if kind == b"IDAT": idat += body
    if kind == b"IEND": end = True
    pos += 12 + n
assert size and end, "no IHDR or IEND"
w, h, ct = size
raw = zlib.decompress(idat)
assert len(raw) == h * (1 + w * 3) and ct == 2, "not 8-bit RGB of that size"
print("%dx%d" % (w, h))
PY
}

# SD1, 64x64 and 128x96: latent2rgb pictures of 8x8 and 16x12
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --no-cache --output-dir "$T/out" --preview "$T/p.png" --progress=json \
    > "$T/ev.json" 2> "$T/err" || fail "run with --preview: $(cat "$T/err")"
[ "$(png_size "$T/p.png" 2>&1)" = "8x8" ] || fail "64x64 preview: $(png_size "$T/p.png" 2>&1)"
grep -q '"event":"preview","node":"3","class_type":"KSampler".*"step":3,"steps":3,.*"method":"latent2rgb"' "$T/ev.json" ||
    fail "no preview event for the last step: $(grep preview "$T/ev.json")"
ls "$T" | grep -q '\.tmp' && fail "a temporary file was left beside the preview"
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --no-cache --output-dir "$T/out" --preview "$T/p2.png" \
    --set 5.width=128 --set 5.height=96 --quiet > /dev/null 2> "$T/err" || fail "128x96 run: $(cat "$T/err")"
[ "$(png_size "$T/p2.png" 2>&1)" = "16x12" ] || fail "128x96 preview: $(png_size "$T/p2.png" 2>&1)"

# SDXL latents have their own factors
"$SDFLOW_BIN" synth --preset sdxl-tiny --models-dir "$T/models" > /dev/null || fail "synth sdxl-tiny"
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --no-cache --output-dir "$T/out" --preview "$T/xl.png" \
    --set 4.ckpt_name=sdflow-random-sdxl-tiny.safetensors --quiet > /dev/null 2> "$T/err" ||
    fail "sdxl run: $(cat "$T/err")"
[ "$(png_size "$T/xl.png" 2>&1)" = "8x8" ] || fail "sdxl preview: $(png_size "$T/xl.png" 2>&1)"
cmp -s "$T/p.png" "$T/xl.png" && fail "SD1 and SDXL previews are identical"

# a preview that cannot be written: a warning, the run still succeeds
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --no-cache --output-dir "$T/out" --preview "$T/no/such/dir/p.png" \
    > /dev/null 2> "$T/err" || fail "a bad preview path failed the run: $(cat "$T/err")"
[ "$(grep -c 'warning: no more previews' "$T/err")" -eq 1 ] || fail "bad preview path: $(cat "$T/err")"

# the REPL
printf 'run()\n' | "$SDFLOW_BIN" repl "${SD_TINY_ARGS[@]}" --no-cache --no-history --output-dir "$T/out" \
    --preview "$T/repl.png" > "$T/repl.out" 2>&1 || fail "repl --preview: $(cat "$T/repl.out")"
[ "$(png_size "$T/repl.png" 2>&1)" = "8x8" ] || fail "repl preview: $(png_size "$T/repl.png" 2>&1)"

sd_test_end "preview ok"
