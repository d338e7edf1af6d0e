// lib.mjs - helpers shared by the server tests (node, ES modules).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import zlib from 'node:zlib';

let passed = 0, failed = 0;
export function ok(cond, what) {
  if (cond) { passed++; return true; }
  failed++;
  console.log(`FAIL: ${what}`);
  return false;
}
export function done() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resolves when pred() is true, polling; rejects after timeout_ms.
export async function until(pred, what, timeout_ms = 60000) {
  const t0 = Date.now();
  while (!(await pred())) {
    if (Date.now() - t0 > timeout_ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

// Starts `sdflow serve --port 0 ...args`, resolves with {port, proc, log()}
// once it listens. stop() sends SIGTERM and resolves with the exit code.
export function startServer(bin, args, logPath) {
  return new Promise((resolve, reject) => {
    const out = fs.openSync(logPath, 'w');
    const proc = spawn(bin, ['serve', '--port', '0', ...args], { stdio: ['ignore', out, out] });
    const t0 = Date.now();
    const poll = setInterval(() => {
      const text = fs.readFileSync(logPath, 'utf8');
      const m = text.match(/listening on http:\/\/[^:]+:(\d+)\//);
      if (m) {
        clearInterval(poll);
        resolve({
          port: Number(m[1]),
          proc,
          log: () => fs.readFileSync(logPath, 'utf8'),
          stop: () => new Promise((res) => {
            if (proc.exitCode !== null) return res(proc.exitCode);
            proc.once('exit', (code, sig) => res(code ?? sig));
            proc.kill('SIGTERM');
          }),
        });
      } else if (proc.exitCode !== null || Date.now() - t0 > 30000) {
        clearInterval(poll);
        reject(new Error(`server did not start: ${text}`));
      }
    }, 50);
  });
}

// Every workflow of workflows/*.json, made small for the tiny models.
// models: {sd1, sdxl, lora?, controlnet?}; image: the uploaded input name.
export function tweak(name, wf, models, image) {
  for (const [id, n] of Object.entries(wf)) {
    const i = n.inputs;
    // (the Flux examples keep their file names: without Flux stand-ins in the
    // models folder they are left out as naming a file the server lacks)
    if (n.class_type === 'CheckpointLoaderSimple' && !name.includes('flux')) i.ckpt_name = name.includes('sdxl') ? models.sdxl : models.sd1;
    if (n.class_type === 'EmptySD3LatentImage') Object.assign(i, { width: 64, height: 48 });
    // (SelfAttentionGuidance needs 128x128 at least: at 64x64 the middle
    // block has one attention token, which ComfyUI's SAG refuses as well)
    if (n.class_type === 'EmptyLatentImage') {
      const sag = Object.values(wf).some((m) => m.class_type === 'SelfAttentionGuidance');
      Object.assign(i, name.includes('sdxl') ? { width: 128, height: 96 } : sag ? { width: 128, height: 128 } : { width: 64, height: 64 });
    }
    if (n.class_type === 'CLIPTextEncodeSDXL') Object.assign(i, { width: 128, height: 96, target_width: 128, target_height: 96 });
    if (['KSampler', 'KSamplerAdvanced', 'BasicScheduler'].includes(n.class_type)) i.steps = 2;
    if (n.class_type === 'LoadImage') i.image = image;
    if (n.class_type === 'LoraLoader' && models.lora) i.lora_name = models.lora;
    if (n.class_type === 'ControlNetLoader' && models.controlnet) i.control_net_name = models.controlnet;
    if (n.class_type === 'GLIGENLoader' && models.gligen) i.gligen_name = models.gligen;
    if (n.class_type === 'unCLIPCheckpointLoader' && models.unclip) i.ckpt_name = models.unclip;
  }
  return wf;
}

// Decodes an 8-bit, non-interlaced PNG (grey, RGB, grey+alpha or RGBA), the
// kind the server writes: {w, h, ct (colour type), ch (channels), px (rows
// of w * ch bytes, unfiltered)}. Throws on anything else.
export function readPng(buf) {
  if (buf.length < 8 || buf.readUInt32BE(0) !== 0x89504e47 || buf.readUInt32BE(4) !== 0x0d0a1a0a) throw new Error('not a PNG');
  let off = 8, w = 0, h = 0, depth = 0, ct = -1, interlace = 0;
  const idat = [];
  while (off + 8 <= buf.length) {
    const len = buf.readUInt32BE(off), type = buf.toString('latin1', off + 4, off + 8), data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') { w = data.readUInt32BE(0); h = data.readUInt32BE(4); depth = data[8]; ct = data[9]; interlace = data[12]; }
    else if (type === 'IDAT') idat.push(data);
    else if (type === 'IEND') break;
    off += 12 + len;
  }
  const ch = { 0: 1, 2: 3, 4: 2, 6: 4 }[ct];
  if (depth !== 8 || !ch || interlace) throw new Error(`PNG kind not read here (depth ${depth}, colour type ${ct}, interlace ${interlace})`);
  const raw = zlib.inflateSync(Buffer.concat(idat)), stride = w * ch, px = Buffer.alloc(stride * h);
  if (raw.length < (stride + 1) * h) throw new Error('PNG data is short');
  for (let y = 0; y < h; y++) {
    const f = raw[y * (stride + 1)];
    for (let x = 0; x < stride; x++) {
      const a = x >= ch ? px[y * stride + x - ch] : 0, b = y ? px[(y - 1) * stride + x] : 0, c = x >= ch && y ? px[(y - 1) * stride + x - ch] : 0;
      let pred = 0;
      if (f === 1) pred = a;
      else if (f === 2) pred = b;
      else if (f === 3) pred = (a + b) >> 1;
      else if (f === 4) { const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c); pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c; }
      else if (f !== 0) throw new Error(`PNG filter ${f}`);
      px[y * stride + x] = (raw[y * (stride + 1) + 1 + x] + pred) & 255;
    }
  }
  return { w, h, ct, ch, px };
}
