#!/usr/bin/env bash
# /view?preview= and ?channel= against ComfyUI's answers (tests/data/view_convert:
# the pinned server.py's view_image made them with Pillow, gen_view.py): for
# every case of the manifest, the source picture is served from the input
# folder and the answer must have ComfyUI's content type and, decoded, the
# same mode, size and pixels: exactly for the PNG answers (lossless), and for
# JPEG and WebP within 3 levels per sample of Pillow's answer, which used the
# same libjpeg-turbo / libwebp at the same settings (equal bytes here; another
# SIMD path of those libraries may round a coefficient differently, moving
# a decoded sample by a level or two, while another quality moves it by far
# more). A case ComfyUI answers with the file as it is gets the file's bytes.
# Also with --redis a worker's picture converts the same (not here: the
# conversion code is one function, fed a path either way).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_server_view
DATA="$SDFLOW_SOURCE_DIR/tests/data/view_convert"
sd_test_need_path "$DATA/manifest.json" "tests/data/view_convert"
/usr/bin/python3 -c 'import PIL' 2> /dev/null ||
    { echo "SKIP: python3-pil is not installed (bash scripts/setup-test-tools.sh installs it)"; exit 77; }
"$SDFLOW_BIN" serve --help > /dev/null 2>&1 || { echo "FAIL: this sdflow has no server"; exit 1; }
sd_test_need_cmd curl
mkdir -p "$T/input/sub" "$T/out" "$T/temp" "$T/models"
cp "$DATA"/src_*.png "$T/input/sub/"

"$SDFLOW_BIN" serve --port 0 --models-dir "$T/models" --input-dir "$T/input" --output-dir "$T/out" \
    --temp-dir "$T/temp" --user-directory "$T/user" --no-cache > "$T/server.log" 2>&1 &
pid=$!
until grep -q 'listening on' "$T/server.log"; do
    kill -0 $pid 2> /dev/null || { fail "the server exited before listening: $(cat "$T/server.log")"; sd_test_end x; }
    sleep 0.1
done
port=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\)/.*|\1|p' "$T/server.log" | head -1)

/usr/bin/python3 - "$DATA" "$port" > "$T/check.log" 2>&1 << 'PY'
import io, json, os, sys, urllib.parse, urllib.request
from PIL import Image
data, port = sys.argv[1], int(sys.argv[2])
man = json.load(open(os.path.join(data, "manifest.json")))
bad = 0
def check(cond, what):
    global bad
    if not cond:
        bad += 1
        print("FAIL: " + what)
for c in man["cases"]:
    q = dict(c["query"], filename=c["source"], subfolder="sub", type="input")
    url = "http://127.0.0.1:%d/view?%s" % (port, urllib.parse.urlencode(q))
    what = "%s %s" % (c["source"], json.dumps(c["query"]))
    try:
        with urllib.request.urlopen(url) as r:
            status, ctype, body = r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        status, ctype, body = e.code, e.headers.get("Content-Type"), e.read()
    check(status == 200, "%s: status %d %s" % (what, status, body[:200]))
    if status != 200:
        continue
    src = open(os.path.join(data, c["source"]), "rb").read()
    if c.get("as_is"):
        check(body == src and ctype == "image/png", "%s: not the file as it is (%s)" % (what, ctype))
        continue
    check(ctype == c["content_type"], "%s: content type %s, ComfyUI's %s" % (what, ctype, c["content_type"]))
    exp = Image.open(os.path.join(data, c["expected"]))
    try:
        got = Image.open(io.BytesIO(body))
        got.load()
    except Exception as e:
        check(False, "%s: the answer does not decode: %s" % (what, e))
        continue
    check(got.format == exp.format and got.mode == exp.mode and got.size == exp.size,
          "%s: %s %s %s, ComfyUI's %s %s %s" % (what, got.format, got.mode, got.size, exp.format, exp.mode, exp.size))
    if got.mode != exp.mode or got.size != exp.size:
        continue
    a, b = list(got.getdata()), list(exp.getdata())
    flat = lambda px: [v for p in px for v in (p if isinstance(p, tuple) else (p,))]
    diff = max((abs(x - y) for x, y in zip(flat(a), flat(b))), default=0)
    tol = 0 if exp.format == "PNG" else 3
    check(diff <= tol, "%s: pixels differ from ComfyUI's by %d (allowed %d)" % (what, diff, tol))
    if exp.format != "PNG" and body != open(os.path.join(data, c["expected"]), "rb").read():
        print("note: %s: same pixels within %d, other bytes" % (what, diff))
print("%d cases, %d failed" % (len(man["cases"]), bad))
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] || fail "conversions: $(grep -v '^note' "$T/check.log" | head -40)"
grep -q "cases, 0 failed" "$T/check.log" || fail "the checks did not run: $(cat "$T/check.log")"

# A file that is not a PNG is answered as it is (sdflow converts PNGs only);
# a bad name is refused before any conversion.
printf 'not a picture' > "$T/input/x.jpg"
got=$(curl -s "http://127.0.0.1:$port/view?filename=x.jpg&type=input&preview=webp")
[ "$got" = "not a picture" ] || fail "a non-PNG with preview=: not the file as it is: $got"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/view?filename=../x.jpg&type=input&channel=a")
[ "$code" = 400 ] || fail "a bad name with channel=a: $code, not 400"
# A PNG that does not decode: 500, as Pillow's exception in ComfyUI
printf '\x89PNG\r\n\x1a\nbroken' > "$T/input/broken.png"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/view?filename=broken.png&type=input&channel=rgb")
[ "$code" = 500 ] || fail "a broken PNG with channel=rgb: $code, not 500"
kill -0 $pid 2> /dev/null || fail "the server died"
kill $pid; wait $pid 2> /dev/null
sd_test_end "every /view conversion as ComfyUI's"
