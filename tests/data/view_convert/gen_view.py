#!/usr/bin/python3
"""Reference answers of ComfyUI's GET /view with preview= and channel=.

The pinned ComfyUI (tools/comfyref/COMFY_COMMIT, server.py, view_image) turns
the file with Pillow; its branches are reproduced here call for call (the
route itself needs aiohttp and ComfyUI's whole package to run):

  if 'preview' in query:
      fmt = preview.split(';')[0]; webp unless fmt in (webp, jpeg) and no 'a' in channel
      quality = int(last part) if it isdigit() else 90
      if fmt == 'jpeg' or channel == 'rgb': img = img.convert('RGB')
      img.save(buf, format=fmt, quality=quality)       -> image/<fmt>
  channel = query.get('channel', 'rgba')
  'rgb': RGBA -> merge(r, g, b), else convert('RGB'); PNG           -> image/png
  'a'  : alpha (or L 255), putalpha on Image.new('RGBA'); PNG       -> image/png
  else : the file as it is

Run with Debian's /usr/bin/python3 (python3-pil 9.4, libjpeg-turbo 2.1.5,
libwebp 1.2.4). Writes the source pictures (src_*.png), one answer per case
(out_*) and manifest.json naming query, source, content type and answer.
"""
import io, json, os, sys
from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))
W, H = 13, 9  # odd sizes: JPEG's 4:2:0 chroma and WebP's macroblocks have edges


def pattern(x, y, k):
    return (x * 19 + y * 7 + k * 53) % 256


def sources():
    rgba = Image.new("RGBA", (W, H))
    rgba.putdata([(pattern(x, y, 0), pattern(x, y, 1), pattern(x, y, 2), (x * 23 + y * 29) % 256)
                  for y in range(H) for x in range(W)])
    rgb = rgba.convert("RGB")
    gray = Image.new("L", (W, H))
    gray.putdata([pattern(x, y, 3) for y in range(H) for x in range(W)])
    ga = Image.merge("LA", (gray, rgba.getchannel("A")))
    pal = rgb.quantize(16)
    pal.info["transparency"] = 3
    return {"rgba": rgba, "rgb": rgb, "gray": gray, "gray_alpha": ga, "palette_trns": pal}


def view(img, query):
    """server.py view_image's Pillow part for an opened image; (ctype, bytes) or None (file as is)."""
    if "preview" in query:
        preview_info = query["preview"].split(";")
        image_format = preview_info[0]
        if image_format not in ["webp", "jpeg"] or "a" in query.get("channel", ""):
            image_format = "webp"
        quality = 90
        if preview_info[-1].isdigit():
            quality = int(preview_info[-1])
        buffer = io.BytesIO()
        if image_format in ["jpeg"] or query.get("channel", "") == "rgb":
            img = img.convert("RGB")
        img.save(buffer, format=image_format, quality=quality)
        return "image/" + image_format, buffer.getvalue()
    channel = query.get("channel", "rgba")
    if channel == "rgb":
        if img.mode == "RGBA":
            r, g, b, a = img.split()
            new_img = Image.merge("RGB", (r, g, b))
        else:
            new_img = img.convert("RGB")
        buffer = io.BytesIO()
        new_img.save(buffer, format="PNG")
        return "image/png", buffer.getvalue()
    if channel == "a":
        if img.mode == "RGBA":
            _, _, _, a = img.split()
        else:
            a = Image.new("L", img.size, 255)
        alpha_img = Image.new("RGBA", img.size)
        alpha_img.putalpha(a)
        buffer = io.BytesIO()
        alpha_img.save(buffer, format="PNG")
        return "image/png", buffer.getvalue()
    return None


QUERIES = [
    {"channel": "rgb"}, {"channel": "a"}, {"channel": "rgba"},
    {"preview": "webp"}, {"preview": "webp;50"}, {"preview": "jpeg"}, {"preview": "jpeg;75"},
    {"preview": "jpeg;20", "channel": "rgb"}, {"preview": "jpeg", "channel": "rgba"},
    {"preview": "png"}, {"preview": "webp", "channel": "rgb"}, {"preview": "jpeg;x"},
]

cases = []
for name, img in sources().items():
    src = "src_%s.png" % name
    img.save(os.path.join(here, src))
    for qi, q in enumerate(QUERIES):
        with Image.open(os.path.join(here, src)) as opened:
            r = view(opened, q)
        case = {"source": src, "query": q}
        if r is None:
            case["as_is"] = True
        else:
            ctype, data = r
            ext = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}[ctype]
            out = "out_%s_%d.%s" % (name, qi, ext)
            with open(os.path.join(here, out), "wb") as f:
                f.write(data)
            case.update(content_type=ctype, expected=out)
        cases.append(case)

manifest = {
    "what": "ComfyUI server.py view_image (pinned commit) answers for /view?preview=&channel=, "
            "made with Pillow's calls as that function makes them (gen_view.py)",
    "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip()
    if os.path.exists(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")) else
    "3cd7b32f1b7e7e90395cefe7d9f9b1f89276d8ce",
    "pillow": Image.__version__ if hasattr(Image, "__version__") else "",
    "cases": cases,
}
with open(os.path.join(here, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
print("%d cases" % len(cases))
