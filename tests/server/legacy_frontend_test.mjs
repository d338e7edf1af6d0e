// legacy_frontend_test.mjs - ComfyUI's legacy web frontend (the official
// ComfyUI_legacy_frontend in ../shared/frontends/comfyui-legacy-frontend/web)
// on `sdflow serve --front-end-root`, in headless Chromium.
//
// Checked: the first load asks nothing the server does not answer (every
// response below 400 except the 404 of GET /userdata/<file> for a file
// never saved, ComfyUI's answer that the frontend reads as "none yet") and
// logs no other console error; the default workflow loads with the server's
// checkpoint chosen; widgets changed through the frontend's widget objects
// are in the prompt its Queue Prompt button sends; progress reaches it and
// previews arrive as event 1 (it announces no metadata support) and are
// held for the sampler; SaveImage shows the final image (64x64, through
// /view); with the frontend's new menu turned on in its settings (its
// workflow management), the workflow is saved with its Save button (the
// "Save workflow as:" prompt answered), the page reloaded with the
// browser's storage cleared, the workflow found in the Workflows menu's
// list read from the server and opened with its widgets; a
// setting changed through the settings store survives a server restart; a
// 2 MB photo goes through LoadImage's upload button (its file chooser) and
// an img2img prompt runs on it; the mask editor, opened from a LoadImage
// node's context menu ("Open in MaskEditor"), takes a mouse stroke and its
// "Save to node" button posts /upload/mask as the legacy frontend does
// (subfolder clipspace, type input, original_ref without subfolder): the
// server writes the original's pixels with the stroke as alpha, the node
// names clipspace/<name> [input] and shows it, and an inpaint prompt
// (VAEEncodeForInpaint on LoadImage's MASK) runs on it; in the classic
// menu's queue list, Clear Queue removes a pending prompt (it never runs)
// and the running prompt's Cancel interrupts it.
// usage: node legacy_frontend_test.mjs BIN WORKDIR MODELS_JSON CHROMIUM FRONTEND_DIR
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { ok, done, until, startServer, sleep, readPng } from './lib.mjs';

const [bin, dir, modelsJson, browserPath, frontDir] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const serverArgs = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
  '--input-dir', path.join(dir, 'input'), '--output-dir', path.join(dir, 'out'), '--temp-dir', path.join(dir, 'temp'),
  '--user-directory', path.join(dir, 'user'), '--no-cache', '--preview-interval', '0', '--front-end-root', frontDir];
fs.mkdirSync(path.join(dir, 'input'), { recursive: true });
fs.copyFileSync(setup.input_png, path.join(dir, 'input', 'example.png'));
let server = await startServer(bin, serverArgs, path.join(dir, 'server.log'));
let base = `http://127.0.0.1:${server.port}`;
const browser = await chromium.launch({
  executablePath: browserPath, headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run'],
});

function noisePng(w, h) {
  const crcTable = Array.from({ length: 256 }, (_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c >>> 0; });
  const crc = (b) => { let c = 0xffffffff; for (const x of b) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => { const t = Buffer.concat([Buffer.from(type), data]); const len = Buffer.alloc(4); len.writeUInt32BE(data.length); const c = Buffer.alloc(4); c.writeUInt32BE(crc(t)); return Buffer.concat([len, t, c]); };
  const ihdr = Buffer.alloc(13); ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  let seed = 777;
  for (let y = 0; y < h; y++) for (let x = 0; x < w * 3; x++) { seed = (seed * 1103515245 + 12345) >>> 0; raw[y * (w * 3 + 1) + 1 + x] = (seed >>> 16) & 0xff; }
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw, { level: 0 })), chunk('IEND', Buffer.alloc(0))]);
}

const bad = [], errors = [], frames = [], posted = [], fileGets = [], queued = [];
let restarting = false;
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.route(/^https?:\/\/(?!127\.0\.0\.1)/, (r) => r.fulfill({ status: 200, contentType: 'application/json', body: '[]' }));
page.on('response', (r) => {
  if (r.status() < 400 || !r.url().startsWith(base)) return;
  const expected = r.status() === 404 && r.request().method() === 'GET' && /\/userdata\/[^/?]+$/.test(r.url());
  if (!expected) bad.push(`${r.status()} ${r.request().method()} ${r.url()}`);
});
page.on('console', (m) => {
  if (m.type() !== 'error' || restarting) return;
  if (/status of 404/.test(m.text()) && /\/userdata\/[^/?]+$/.test(m.location()?.url || '')) return;
  errors.push(`console: ${m.text()} (${m.location()?.url || ''})`);
});
page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
page.on('request', (r) => {
  if (r.method() === 'POST' && /\/prompt$/.test(r.url())) {
    posted.push(JSON.parse(r.postData()));
    const q = {}; // in the order sent; its id once the server's answer is read
    queued.push(q);
    r.response().then((res) => res?.json()).then((j) => { q.id = j?.prompt_id; }).catch(() => {});
  }
  if (r.method() === 'GET' && /\/userdata\/workflows%2F[^.]/.test(r.url())) fileGets.push(r.url());
});
page.on('websocket', (ws) => ws.on('framereceived', (f) => {
  if (typeof f.payload === 'string') { try { frames.push(JSON.parse(f.payload)); } catch { /* ignore */ } }
  else frames.push({ bin: true, type: f.payload.readUInt32BE(0) });
}));
page.on('dialog', (d) => (d.type() === 'prompt' ? d.accept('legacy-wf') : d.accept()));

const open = async () => {
  await page.goto(`${base}/`);
  await page.waitForFunction(() => window.app?.graph?._nodes?.length > 0 && window.app.workflowManager, null, { timeout: 90000 });
};
const setWidgets = (vals) => page.evaluate((v) => {
  for (const [id, name, x] of v) window.app.graph.getNodeById(id).widgets.find((w) => w.name === name).value = x;
  window.app.graph.setDirtyCanvas(true, true);
}, vals);
const ends = () => frames.filter((f) => ['execution_success', 'execution_error', 'execution_interrupted'].includes(f.type));
const queue = async () => {
  const n = posted.length;
  await page.click('#queue-button');
  await until(() => posted.length > n, 'the frontend to POST /prompt', 30000);
};

let step = 'start';
try {
  step = 'first load';
  await open();
  await sleep(2000);
  ok(bad.length === 0, `first load: every request answered (${bad.join('; ')})`);
  ok(errors.length === 0, `first load: no console error (${errors.join('; ')})`);
  const types = await page.evaluate(() => window.app.graph._nodes.map((n) => n.type).sort());
  ok(types.length === 7 && types.includes('KSampler') && types.includes('SaveImage'), `the default workflow is loaded (${types})`);
  const ck = await page.evaluate(() => window.app.graph.getNodeById(4).widgets[0].value);
  ok(ck === setup.sd1, `the checkpoint widget holds the server's model (${ck})`);

  step = 'txt2img';
  await setWidgets([[5, 'width', 64], [5, 'height', 64], [3, 'steps', 4], [3, 'control_after_generate', 'fixed'], [3, 'seed', 99]]);
  await queue();
  ok(posted.at(-1).prompt['3'].inputs.steps === 4 && posted.at(-1).prompt['5'].inputs.height === 64, 'the changed widgets are in the prompt');
  await until(() => ends().length >= 1, 'the run', 120000);
  ok(ends()[0].type === 'execution_success', `the run succeeds (${ends()[0].type})`);
  ok(frames.some((f) => f.type === 'progress' && f.data.node === '3' && f.data.max === 4), 'progress reaches the frontend');
  ok(frames.some((f) => f.bin && f.type === 1) && !frames.some((f) => f.bin && f.type === 4), 'previews arrive as event 1 (no metadata asked)');
  ok(await page.evaluate(() => !!window.app.nodePreviewImages?.['3']), 'the frontend holds a preview for the sampler');
  ok(await page.evaluate(() => window.app.nodeOutputs?.['9']?.images?.[0]?.type === 'output'), 'the frontend has SaveImage\'s output');
  // the legacy canvas loads a node's pictures when it draws the node: bring SaveImage into view
  await page.evaluate(() => { const n = window.app.graph.getNodeById(9); window.app.canvas.centerOnNode(n); window.app.graph.setDirtyCanvas(true, true); });
  await page.waitForFunction(() => window.app.graph.getNodeById(9).imgs?.[0]?.naturalWidth > 0, null, { timeout: 30000 });
  const img = await page.evaluate(() => { const i = window.app.graph.getNodeById(9).imgs[0]; return { w: i.naturalWidth, h: i.naturalHeight, src: i.src }; });
  ok(img.w === 64 && img.h === 64 && /\/view\?/.test(img.src), `SaveImage shows the final image (${JSON.stringify(img)})`);

  step = 'save workflow';
  // the legacy frontend keeps workflows on the server through its new menu
  // ("[Beta] Use new menu and workflow management"): turned on in its
  // settings, then its Save button (its "Save workflow as:" prompt answered)
  await page.evaluate(() => window.app.ui.settings.setSettingValueAsync('Comfy.UseNewMenu', 'Top'));
  await page.locator('nav.comfyui-menu [title="Save the current workflow"]').first().click({ timeout: 10000 });
  const saved = path.join(dir, 'user', 'default', 'workflows', 'legacy-wf.json');
  await until(() => fs.existsSync(saved), 'the saved workflow', 20000);
  ok(JSON.parse(fs.readFileSync(saved, 'utf8')).nodes.find((n) => n.id === 3).widgets_values.includes(4), 'the saved file holds the widgets');
  step = 'reopen';
  // the browser forgets what it had open: the workflow must come from the server
  await page.evaluate(() => { localStorage.clear(); sessionStorage.clear(); });
  await open();
  const before = fileGets.length;
  await page.locator('nav.comfyui-menu .comfyui-workflows-button').click({ timeout: 10000 });
  await page.locator('.comfyui-workflows-popup .comfyui-workflows-tree-file[title="legacy-wf.json"]').click({ timeout: 20000 });
  await page.waitForFunction(() => window.app.graph.getNodeById(3)?.widgets.find((w) => w.name === 'steps').value === 4, null, { timeout: 15000 });
  ok(fileGets.length > before, 'after a reload the saved workflow is listed in the Workflows menu and opens from the server with its widgets');
  // back to the classic menu, whose Queue Prompt button the rest uses
  await page.evaluate(() => window.app.ui.settings.setSettingValueAsync('Comfy.UseNewMenu', 'Disabled'));
  await page.locator('#queue-button').waitFor({ state: 'visible', timeout: 10000 });

  step = 'setting';
  await page.evaluate(() => window.app.ui.settings.setSettingValueAsync('Comfy.LinkRenderMode', 1));
  await until(async () => (await (await fetch(`${base}/settings/Comfy.LinkRenderMode`)).json()) === 1, 'the setting on the server', 10000);
  restarting = true;
  await page.goto('about:blank');
  ok((await server.stop()) === 0, 'the server stops for a restart');
  server = await startServer(bin, serverArgs, path.join(dir, 'server2.log'));
  base = `http://127.0.0.1:${server.port}`;
  restarting = false;
  await open();
  ok(await page.evaluate(() => window.app.ui.settings.getSettingValue('Comfy.LinkRenderMode')) === 1, 'the setting is kept across a restart');

  step = 'upload';
  const photo = noisePng(820, 860);
  fs.writeFileSync(path.join(dir, 'photo.png'), photo);
  await page.evaluate((model) => {
    const g = window.app.graph, L = window.LiteGraph;
    g.getNodeById(4).widgets[0].value = model;
    const load = L.createNode('LoadImage'); load.id = 20; g.add(load);
    const scale = L.createNode('ImageScale'); scale.id = 21; g.add(scale);
    const enc = L.createNode('VAEEncode'); enc.id = 22; g.add(enc);
    load.connect(0, scale, 0); scale.connect(0, enc, 0); g.getNodeById(4).connect(2, enc, 1); enc.connect(0, g.getNodeById(3), 3);
    g.remove(g.getNodeById(5));
    const sw = (n, k, v) => { n.widgets.find((w) => w.name === k).value = v; };
    sw(scale, 'width', 64); sw(scale, 'height', 64); sw(g.getNodeById(3), 'denoise', 0.6); sw(g.getNodeById(3), 'steps', 4);
  }, setup.sd1);
  const chooser = page.waitForEvent('filechooser', { timeout: 10000 });
  await page.evaluate(() => window.app.graph.getNodeById(20).widgets.find((w) => w.type === 'button').callback());
  await (await chooser).setFiles(path.join(dir, 'photo.png'));
  await page.waitForFunction(() => window.app.graph.getNodeById(20).widgets[0].value === 'photo.png', null, { timeout: 30000 });
  ok(Buffer.compare(fs.readFileSync(path.join(dir, 'input', 'photo.png')), photo) === 0, `the ${photo.length}-byte photo arrived whole through the upload button`);
  const n1 = ends().length;
  await queue();
  await until(() => ends().length > n1, 'the img2img run', 120000);
  ok(ends().at(-1).type === 'execution_success' && posted.at(-1).prompt['20'].inputs.image === 'photo.png', `img2img on the photo succeeds (${ends().at(-1).type})`);

  step = 'mask editor';
  // the picture to mask: 64x64 RGB noise in the input folder
  const src = noisePng(64, 64);
  fs.writeFileSync(path.join(dir, 'input', 'inpaint-src.png'), src);
  // the editor's request as the browser sent it (the legacy editor never
  // reads the answer, so neither can the test: a body the page leaves
  // unread never reaches playwright)
  const maskPosts = [];
  page.on('response', (r) => {
    if (r.request().method() === 'POST' && /\/upload\/mask$/.test(r.url()))
      maskPosts.push({ status: r.status(), form: r.request().postDataBuffer()?.toString('latin1') ?? '' });
  });
  await page.evaluate(() => {
    const g = window.app.graph, L = window.LiteGraph;
    // away from the other nodes, so that a click on it reaches it
    const load = L.createNode('LoadImage'); load.id = 30; load.pos = [-2000, -2000]; g.add(load);
    const enc = L.createNode('VAEEncodeForInpaint'); enc.id = 31; enc.pos = [-1500, -2000]; g.add(enc);
    load.connect(0, enc, 0); g.getNodeById(4).connect(2, enc, 1); load.connect(1, enc, 2); enc.connect(0, g.getNodeById(3), 3);
    for (const id of [20, 21, 22]) g.remove(g.getNodeById(id));
    g.getNodeById(3).widgets.find((w) => w.name === 'denoise').value = 1;
    const w = load.widgets.find((x) => x.name === 'image');
    w.value = 'inpaint-src.png';
    w.callback(w.value); // the combo's change: the node loads the picture through /view
    window.app.canvas.centerOnNode(load);
    g.setDirtyCanvas(true, true);
  });
  await page.waitForFunction(() => window.app.graph.getNodeById(30).imgs?.[0]?.naturalWidth === 64, null, { timeout: 30000 });
  // the node's context menu, opened with a right click on its title
  const title = await page.evaluate(() => {
    const c = window.app.canvas, n = window.app.graph.getNodeById(30), r = c.canvas.getBoundingClientRect();
    const [x, y] = c.ds.convertOffsetToCanvas([n.pos[0] + n.size[0] / 2, n.pos[1] - window.LiteGraph.NODE_TITLE_HEIGHT / 2]);
    return { x: r.left + x * r.width / c.canvas.width, y: r.top + y * r.height / c.canvas.height };
  });
  await page.mouse.click(title.x, title.y, { button: 'right' });
  await page.locator('.litecontextmenu .litemenu-entry', { hasText: 'Open in MaskEditor' }).click({ timeout: 10000 });
  // the editor shows the picture (its canvases sized and placed once the picture loaded)
  await page.waitForFunction(() => {
    const m = document.getElementById('maskCanvas'), i = document.getElementById('imageCanvas');
    return m && i && m.parentElement.style.display === 'block' && m.width === 64 && i.width === 64 && m.style.width === '64px' &&
      m.getBoundingClientRect().width > 0;
  }, null, { timeout: 30000 });
  const box = await page.evaluate(() => { const r = document.getElementById('maskCanvas').getBoundingClientRect(); return { x: r.x, y: r.y, w: r.width, h: r.height }; });
  ok(box.w === 64 && box.h === 64, `the mask editor shows the picture at its size (${JSON.stringify(box)})`);
  // a stroke with the mouse: from (14, 14) to (44, 36) in picture pixels (zoom 1)
  const from = [14, 14], to = [44, 36];
  await page.mouse.move(box.x + from[0], box.y + from[1]);
  await page.mouse.down();
  for (let i = 1; i <= 15; i++) await page.mouse.move(box.x + from[0] + (to[0] - from[0]) * i / 15, box.y + from[1] + (to[1] - from[1]) * i / 15);
  await page.mouse.up();
  // the editor paints in animation frames: the stroke's end is painted once they ran
  await page.waitForFunction((p) => document.getElementById('maskCanvas').getContext('2d').getImageData(p[0], p[1], 1, 1).data[3] === 255, to, { timeout: 10000 });
  await page.getByRole('button', { name: 'Save to node' }).click();
  await until(() => maskPosts.length > 0, 'the mask editor to POST /upload/mask', 20000);
  await page.waitForFunction(() => document.getElementById('maskCanvas').parentElement.style.display === 'none', null, { timeout: 20000 });
  const mp = maskPosts[0];
  const field = (name) => mp.form.match(new RegExp(`name="${name}"\\r\\n\\r\\n([^\\r]*)\\r\\n`))?.[1];
  const sent = mp.form.match(/name="image"; filename="([^"]+)"/)?.[1];
  ok(mp.status === 200 && /^clipspace-mask-[\d.]+\.png$/.test(sent) && field('subfolder') === 'clipspace' && field('type') === 'input' &&
     JSON.parse(field('original_ref') || '{}').filename === 'inpaint-src.png',
     `the editor POSTs /upload/mask (${mp.status}: image ${sent}, original_ref ${field('original_ref')}, subfolder ${field('subfolder')}, type ${field('type')})`);
  const maskName = await page.evaluate(() => window.app.graph.getNodeById(30).widgets.find((w) => w.name === 'image').value);
  ok(maskName === `clipspace/${sent} [input]`, `the node now names the masked picture (${maskName})`);
  let pic = null;
  try { pic = readPng(fs.readFileSync(path.join(dir, 'input', 'clipspace', sent ?? '-'))); } catch (e) { ok(false, `the masked picture is readable (${e.message})`); }
  if (pic) {
    const orig = readPng(src);
    let rgbSame = true, masked = 0;
    for (let i = 0; i < 64 * 64; i++) {
      for (let k = 0; k < 3; k++) if (pic.px[i * 4 + k] !== orig.px[i * 3 + k]) rgbSame = false;
      if (pic.px[i * 4 + 3] === 0) masked++;
    }
    const alphaAt = (x, y) => pic.px[(y * 64 + x) * 4 + 3];
    ok(pic.w === 64 && pic.h === 64 && pic.ct === 6 && rgbSame, `the server wrote the original's pixels as RGBA at its size (${pic.w}x${pic.h}, colour type ${pic.ct}, RGB kept: ${rgbSame})`);
    ok(alphaAt(...from) === 0 && alphaAt(29, 25) === 0 && alphaAt(...to) === 0 && alphaAt(2, 61) === 255 && alphaAt(61, 2) === 255 && masked > 300 && masked < 64 * 64 / 2,
       `the stroke is in its alpha, transparent where drawn and opaque elsewhere (${masked} pixels masked)`);
  }
  // the node shows the masked picture, read back from the server's clipspace folder
  await page.waitForFunction(() => { const i = window.app.graph.getNodeById(30).imgs?.[0]; return i?.complete && i.naturalWidth === 64 && /subfolder=clipspace/.test(i.src); }, null, { timeout: 30000 });
  const n3 = ends().length;
  await queue();
  await until(() => ends().length > n3, 'the inpaint run', 120000);
  const ip = posted.at(-1).prompt;
  ok(ends().at(-1).type === 'execution_success' && ip['30'].inputs.image === maskName && ip['31'].class_type === 'VAEEncodeForInpaint' &&
     JSON.stringify(ip['31'].inputs.mask) === '["30",1]', `an inpaint with the drawn mask succeeds (${ends().at(-1).type} ${JSON.stringify(ends().at(-1).data).slice(0, 200)})`);

  step = 'interrupt and clear';
  await setWidgets([[3, 'steps', 10000]]);
  const n2 = ends().length, q0 = queued.length;
  await queue();
  await until(() => frames.some((f) => f.type === 'progress' && f.data.max === 10000 && f.data.value >= 2), 'the long prompt to run', 60000);
  await queue();
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_pending.length === 1 && queued.length === q0 + 2 && queued.slice(q0).every((q) => q.id), 'one pending prompt', 30000);
  const [longId, pendingId] = queued.slice(q0).map((q) => q.id);
  // the classic menu's queue list: its Clear Queue button, then the running prompt's Cancel
  await page.click('#comfy-view-queue-button');
  const list = page.locator('.comfy-list:visible');
  await list.getByRole('button', { name: 'Clear Queue' }).click({ timeout: 10000 });
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_pending.length === 0, 'the queue to be cleared', 30000);
  const running = (await (await fetch(`${base}/queue`)).json()).queue_running.map((q) => q[1]);
  ok(running.length === 1 && running[0] === longId, `the queue list's Clear Queue removes the pending prompt, the running one runs on (${running})`);
  await list.getByRole('button', { name: 'Cancel' }).click({ timeout: 10000 });
  await until(() => ends().length > n2, 'the interrupted run', 60000);
  ok(ends().at(-1).type === 'execution_interrupted' && ends().at(-1).data.prompt_id === longId,
     `the running prompt's Cancel in the queue list interrupts it (${ends().at(-1).type})`);
  // once the queue is empty nothing is left to run: the cleared prompt never did
  await until(async () => { const q = await (await fetch(`${base}/queue`)).json(); return !q.queue_running.length && !q.queue_pending.length; }, 'an empty queue', 30000);
  const hist = await (await fetch(`${base}/history`)).json();
  ok(hist[longId] && !hist[pendingId] && ends().length === n2 + 1, 'the cleared prompt never ran');
  ok(bad.length === 0, `no unexpected error response (${bad.join('; ')})`);
  ok(errors.length === 0, `no console error (${errors.join('; ')})`);
} catch (e) {
  ok(false, `unexpected at step '${step}': ${e.stack}`);
  try { await page.screenshot({ path: path.join(dir, 'failure.png') }); } catch { /* closed */ }
} finally {
  await browser.close();
  ok((await server.stop()) === 0, 'the server stops cleanly');
}
done();
