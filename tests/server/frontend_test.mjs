// frontend_test.mjs - ComfyUI's current web frontend (the official build in
// ../shared/frontends/comfyui-frontend-1.35.9) on `sdflow serve
// --front-end-root`, in headless Chromium (Debian's, driven by
// playwright-core). With MODE "redis" the same against `serve --redis` and
// one `sdflow worker`.
//
// Checked: the first load asks nothing the server does not answer (every
// response below 400, except the 404 of GET /api/userdata/comfy.templates.json,
// which is ComfyUI's answer for a file the user never saved and the
// frontend's way to learn it; requests to other hosts, which this offline
// machine cannot reach, are answered [] by the test) and logs no console error
// other than the browser's line for that 404; the default workflow loads
// with the random checkpoint chosen; widgets are changed through the
// frontend's widget objects (size 64x64, 4 steps, seed fixed) and the prompt
// the frontend sends carries them; Ctrl+Enter queues it; progress_state
// messages arrive per node and the page title shows the progress; preview
// frames arrive as event 4 (the frontend announces supports_preview_metadata)
// and the frontend holds a preview for the sampler; the final image is shown
// on the SaveImage node (loaded through /api/view, 64x64); Ctrl+S saves the
// workflow under a name typed into the frontend's prompt, the page is
// reloaded and the workflow opened from the Workflows sidebar; a setting
// changed through the frontend's setting store survives a server restart;
// a 2 MB photo goes through LoadImage's upload button (the file chooser the
// button opens) and an img2img prompt built on it runs; a mask drawn with
// the mouse in the mask editor is saved (/upload/mask) and an inpaint prompt
// runs on it; a running prompt is interrupted from the frontend's cancel
// command; queued prompts are cleared from the frontend's queue command.
// usage: node frontend_test.mjs BIN WORKDIR MODELS_JSON CHROMIUM FRONTEND_DIR [local|redis]
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';
import { ok, done, until, startServer, sleep } from './lib.mjs';

const [bin, dir, modelsJson, browserPath, frontDir, mode = 'local'] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const children = [];
let redisArgs = [];
if (mode === 'redis') {
  const port = await new Promise((res) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
  children.push(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' }));
  await until(() => new Promise((res) => {
    const c = net.connect(port, '127.0.0.1', () => { c.end(); res(true); });
    c.on('error', () => res(false));
  }), 'redis-server to listen', 20000);
  redisArgs = ['--redis', `redis://127.0.0.1:${port}`];
  const log = fs.openSync(path.join(dir, 'worker.log'), 'w');
  children.push(spawn(bin, ['worker', ...redisArgs, '--name', 'fe-w1', '--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
    '--input-dir', path.join(dir, 'w-input'), '--output-dir', path.join(dir, 'w-out'), '--temp-dir', path.join(dir, 'w-temp'),
    '--no-cache', '--preview-interval', '0'], { stdio: ['ignore', log, log] }));
}
const serverArgs = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
  '--input-dir', path.join(dir, 'input'), '--output-dir', path.join(dir, 'out'), '--temp-dir', path.join(dir, 'temp'),
  '--user-directory', path.join(dir, 'user'), '--no-cache', '--preview-interval', '0', '--front-end-root', frontDir, ...redisArgs];
// a picture in the input folder, so that a new LoadImage node has a value
fs.mkdirSync(path.join(dir, 'input'), { recursive: true });
fs.copyFileSync(setup.input_png, path.join(dir, 'input', 'example.png'));
const inpaintSrc = () => noisePng(64, 64);
if (mode === 'redis') fs.mkdirSync(path.join(dir, 'w-input'), { recursive: true });
fs.writeFileSync(path.join(dir, 'input', 'inpaint-src.png'), inpaintSrc());
let server = await startServer(bin, serverArgs, path.join(dir, 'server.log'));
let base = `http://127.0.0.1:${server.port}`;
const browser = await chromium.launch({
  executablePath: browserPath, headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run'],
});

// A PNG of w x h noise (stored, so it stays as large as its pixels): the "photo".
function noisePng(w, h) {
  const crcTable = Array.from({ length: 256 }, (_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c >>> 0; });
  const crc = (b) => { let c = 0xffffffff; for (const x of b) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => { const t = Buffer.concat([Buffer.from(type), data]); const len = Buffer.alloc(4); len.writeUInt32BE(data.length); const c = Buffer.alloc(4); c.writeUInt32BE(crc(t)); return Buffer.concat([len, t, c]); };
  const ihdr = Buffer.alloc(13); ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  let seed = 12345;
  for (let y = 0; y < h; y++) for (let x = 0; x < w * 3; x++) { seed = (seed * 1103515245 + 12345) >>> 0; raw[y * (w * 3 + 1) + 1 + x] = (seed >>> 16) & 0xff; }
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw, { level: 0 })), chunk('IEND', Buffer.alloc(0))]);
}

const bad = [];      // responses >= 400 that are not the expected one
const errors = [];   // console errors and page errors
const frames = [];   // WebSocket frames the page received: {bin, type, data}
const posted = [];   // prompts the page sent
const viewed = [];   // /api/view responses: {url, status, type, w, h}
const fileGets = []; // GET /api/userdata/workflows%2F... requests
const queued = [];   // each prompt the page sent, in order: {id} once answered
let restarting = false;
function watch(page) {
  page.on('response', (r) => {
    if (r.status() < 400 || !r.url().startsWith(base)) return;
    // ComfyUI's answer for a user file that was never saved, which is how the
    // frontend learns it (comfy.templates.json, workflows/.index.json)
    const expected = r.status() === 404 && r.request().method() === 'GET' && /\/api\/userdata\/[^/?]+$/.test(r.url());
    if (!expected) bad.push(`${r.status()} ${r.request().method()} ${r.url()}`);
  });
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (/Failed to load resource: the server responded with a status of 404/.test(m.text()) &&
        /\/api\/userdata\/[^/?]+$/.test(m.location()?.url || '')) return;
    if (restarting) return; /* the page loses its server while it restarts */
    errors.push(`console: ${m.text()} (${m.location()?.url || ''})`);
  });
  page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/api/prompt')) {
      posted.push(JSON.parse(r.postData()));
      const q = {}; // in the order sent; its id once the server's answer is read
      queued.push(q);
      r.response().then((res) => res?.json()).then((j) => { q.id = j?.prompt_id; }).catch(() => {});
    }
    if (r.method() === 'GET' && /\/api\/userdata\/workflows%2F/.test(r.url())) fileGets.push(r.url());
  });
  page.on('response', async (r) => {
    if (!/\/api\/view\?/.test(r.url())) return;
    const b = await r.body().catch(() => Buffer.alloc(0));
    viewed.push({ url: r.url(), status: r.status(), type: r.headers()['content-type'], w: b.length > 24 ? b.readUInt32BE(16) : 0, h: b.length > 24 ? b.readUInt32BE(20) : 0 });
  });
  page.on('websocket', (ws) => ws.on('framereceived', (f) => {
    if (typeof f.payload === 'string') { try { frames.push(JSON.parse(f.payload)); } catch { /* ignore */ } }
    else frames.push({ bin: true, type: f.payload.readUInt32BE(0), len: f.payload.length });
  }));
}

// Opens the page; a new user gets the template browser and an empty graph:
// the browser is closed and, when asked, the default workflow loaded with
// the frontend's own command (its "Load Default" button).
async function open(page, loadDefault = false) {
  await page.goto(`${base}/`);
  await page.waitForFunction(() => window.app?.graph && window.app.extensionManager?.command, null, { timeout: 90000 });
  const templates = page.locator('.p-dialog', { hasText: 'All Templates' });
  await templates.waitFor({ timeout: 8000 }).catch(() => {});
  for (let i = 0; i < 20 && await templates.count(); i++) {
    await page.keyboard.press('Escape');
    await templates.locator('button').filter({ has: page.locator('.pi-times, .icon-\\[lucide--x\\], svg') }).last().click({ timeout: 1000 }).catch(() => {});
    await sleep(250);
  }
  if (loadDefault) {
    await page.evaluate(() => window.app.extensionManager.command.execute('Comfy.LoadDefaultWorkflow'));
    await page.waitForFunction(() => window.app.graph.nodes.length > 0, null, { timeout: 30000 });
  }
}

const setWidgets = (page, values) => page.evaluate((vals) => {
  for (const [id, name, v] of vals) {
    const w = window.app.graph.getNodeById(id).widgets.find((x) => x.name === name);
    w.value = v;
    w.callback?.(v);
  }
  window.app.graph.setDirtyCanvas(true, true);
}, values);

const historyOf = async (pid) => (await (await fetch(`${base}/history/${pid}`)).json())[pid];
const lastPrompt = () => posted.at(-1);
const queue = async (page) => {
  const before = posted.length;
  await page.keyboard.press('Control+Enter');
  await until(() => posted.length > before, 'the frontend to POST /api/prompt', 30000);
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_pending.length +
    (await (await fetch(`${base}/queue`)).json()).queue_running.length >= 0, 'queue', 1000);
};
const waitDone = async (what, n = 1, timeout = 120000) => {
  await until(() => frames.filter((f) => f.type === 'execution_success' || f.type === 'execution_error' || f.type === 'execution_interrupted').length >= n, what, timeout);
};
const ends = () => frames.filter((f) => ['execution_success', 'execution_error', 'execution_interrupted'].includes(f.type));

let step = 'start';
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.route(/^https?:\/\/(?!127\.0\.0\.1)/, (r) => r.fulfill({ status: 200, contentType: 'application/json', body: '[]' }));
watch(page);
try {
  // ---- first load
  step = 'first load';
  await open(page, true);
  await sleep(2000); // let the start-up requests finish
  ok(bad.length === 0, `first load: every request answered (${bad.join('; ')})`);
  ok(errors.length === 0, `first load: no console error (${errors.join('; ')})`);
  const nodes = await page.evaluate(() => window.app.graph.nodes.map((n) => n.type).sort());
  ok(JSON.stringify(nodes) === JSON.stringify(['CLIPTextEncode', 'CLIPTextEncode', 'CheckpointLoaderSimple', 'EmptyLatentImage', 'KSampler', 'SaveImage', 'VAEDecode']),
     `the default workflow is loaded (${nodes})`);
  const choices = await page.evaluate(() => window.app.graph.getNodeById(4).widgets[0].options.values);
  ok(choices.includes(setup.sd1), `the checkpoint widget offers the server's models (${choices})`);

  // ---- change widgets, queue, follow the run
  step = 'txt2img';
  await setWidgets(page, [[4, 'ckpt_name', setup.sd1], [5, 'width', 64], [5, 'height', 64], [3, 'steps', 4], [3, 'control_after_generate', 'fixed'], [3, 'seed', 1234]]);
  // every title the page takes, recorded in the page as it changes (a poll
  // from here missed the short run's progress titles on a loaded machine)
  await page.evaluate(() => {
    window.__titles = [document.title];
    new MutationObserver(() => window.__titles.push(document.title))
      .observe(document.head, { subtree: true, childList: true, characterData: true });
  });
  const titles = new Set();
  const tpoll = setInterval(async () => { try { titles.add(await page.title()); } catch { /* closed */ } }, 50);
  await queue(page);
  const p1 = lastPrompt();
  ok(p1.prompt['3'].inputs.steps === 4 && p1.prompt['5'].inputs.width === 64 && p1.prompt['3'].inputs.seed === 1234 &&
     p1.client_id && p1.extra_data?.extra_pnginfo?.workflow, `the changed widgets are in the prompt the frontend sends`);
  await waitDone('the first run');
  clearInterval(tpoll);
  for (const t of await page.evaluate(() => window.__titles)) titles.add(t);
  const pid1 = ends()[0].data.prompt_id;
  ok(ends()[0].type === 'execution_success', `the run succeeds (${ends()[0].type} ${JSON.stringify(ends()[0].data).slice(0, 300)})`);
  const ps = frames.filter((f) => f.type === 'progress_state' && f.data.prompt_id === pid1);
  ok(ps.some((f) => f.data.nodes['3']?.state === 'running' && f.data.nodes['3'].max === 4) && ps.at(-1).data.nodes['9']?.state === 'finished',
     `progress_state per node reaches the frontend (${ps.length} messages)`);
  ok([...titles].some((t) => /^\[\d+%\]/.test(t)), `the page title shows the progress (${[...titles].join(' | ')})`);
  const previews = frames.filter((f) => f.bin && f.type === 4);
  ok(previews.length >= 1 && !frames.some((f) => f.bin && f.type === 1), `previews arrive as event 4 with metadata (${previews.length})`);
  const prevKeys = await page.evaluate(() => Object.keys(window.app.nodePreviewImages || {}));
  ok(prevKeys.includes('3'), `the frontend holds a live preview for the sampler (${prevKeys})`);
  const out9 = await page.evaluate(() => window.app.nodeOutputs?.['9']?.images?.[0]);
  ok(out9?.type === 'output' && /^ComfyUI_\d{5}_\.png$/.test(out9.filename), `the frontend has SaveImage's output (${JSON.stringify(out9)})`);
  // the picture the frontend shows for it, loaded through /api/view. The
  // frontend loads it when it draws SaveImage (the canvas draws only the
  // nodes in view) or for its run-summary toast, which skips a run that ended
  // before the page saw the queue go busy (a short run on a loaded machine):
  // bring SaveImage into view and redraw until the picture is fetched
  await page.evaluate(() => window.app.canvas.centerOnNode(window.app.graph.getNodeById(9)));
  await until(async () => viewed.some((v) => v.url.includes(`filename=${out9.filename}`)) ||
    (await page.evaluate(() => window.app.graph.setDirtyCanvas(true, true)), false), 'the frontend to load the final image', 120000);
  const v9 = viewed.find((v) => v.url.includes(`filename=${out9.filename}`));
  ok(v9.status === 200 && v9.type === 'image/png' && v9.w === 64 && v9.h === 64, `the final image is loaded and shown (${JSON.stringify(v9)})`);
  const h1 = await historyOf(pid1);
  ok(h1?.status?.status_str === 'success', 'the run is in /history');

  // ---- save the workflow, reload, open it from the workflow list
  step = 'save workflow';
  await page.keyboard.press('Control+s');
  const nameBox = page.locator('.p-dialog', { hasText: 'Save workflow' }).locator('input').first();
  await nameBox.waitFor({ timeout: 10000 });
  await nameBox.fill('sdflow-test-wf');
  await nameBox.press('Enter');
  const saved = path.join(dir, 'user', 'default', 'workflows', 'sdflow-test-wf.json');
  await until(() => fs.existsSync(saved), 'the saved workflow file', 20000);
  const savedWf = JSON.parse(fs.readFileSync(saved, 'utf8'));
  ok(savedWf.nodes?.find((n) => n.id === 3)?.widgets_values?.includes(4), 'the saved file holds the changed widgets');
  step = 'reload';
  // the browser forgets what it had open: the workflow must come from the server
  await page.evaluate(() => { localStorage.clear(); sessionStorage.clear(); });
  await open(page);
  const fetchedBefore = fileGets.length;
  step = 'open from the workflow list';
  await page.keyboard.press('w');
  const entry = page.locator('.p-tree-node-label, .node-label, span').filter({ hasText: /^sdflow-test-wf(\.json)?$/ }).first();
  await entry.waitFor({ timeout: 15000 });
  await entry.click();
  await page.waitForFunction(() => window.app.graph.getNodeById(3)?.widgets?.find((w) => w.name === 'steps')?.value === 4, null, { timeout: 15000 });
  ok(fileGets.length > fetchedBefore, 'the saved workflow is listed after a reload and opens from the server with its widgets');
  await page.keyboard.press('w');

  // ---- a setting survives a restart
  step = 'setting';
  await page.evaluate(() => window.app.extensionManager.setting.set('Comfy.Graph.ZoomSpeed', 1.37));
  await until(async () => (await (await fetch(`${base}/api/settings/Comfy.Graph.ZoomSpeed`)).json()) === 1.37, 'the setting on the server', 10000);
  restarting = true;
  await page.goto('about:blank');
  ok((await server.stop()) === 0, 'the server stops for a restart');
  server = await startServer(bin, serverArgs, path.join(dir, 'server2.log'));
  base = `http://127.0.0.1:${server.port}`;
  restarting = false;
  await open(page);
  const kept = await page.evaluate(() => window.app.extensionManager.setting.get('Comfy.Graph.ZoomSpeed'));
  ok(kept === 1.37, `the setting is kept across a restart (${kept})`);

  // ---- a 2 MB photo through LoadImage's upload button, then img2img
  step = 'upload';
  const photo = noisePng(820, 860);
  ok(photo.length > 2000000, `the photo is over 2 MB (${photo.length})`);
  fs.writeFileSync(path.join(dir, 'photo.png'), photo);
  await page.evaluate(() => {
    const g = window.app.graph;
    const L = window.LiteGraph ?? window.comfyAPI.litegraph?.LiteGraph;
    const load = L.createNode('LoadImage'); load.id = 20; g.add(load);
    const scale = L.createNode('ImageScale'); scale.id = 21; g.add(scale);
    const enc = L.createNode('VAEEncode'); enc.id = 22; g.add(enc);
    load.connect(0, scale, 0);
    scale.connect(0, enc, 0);
    g.getNodeById(4).connect(2, enc, 1);
    enc.connect(0, g.getNodeById(3), 3);
    g.remove(g.getNodeById(5));
    const sw = (n, k, v) => { n.widgets.find((w) => w.name === k).value = v; };
    sw(scale, 'width', 64); sw(scale, 'height', 64); sw(g.getNodeById(3), 'denoise', 0.6); sw(g.getNodeById(3), 'steps', 4);
  });
  const chooser = page.waitForEvent('filechooser', { timeout: 10000 });
  await page.evaluate(() => window.app.graph.getNodeById(20).widgets.find((w) => w.name === 'upload' || w.type === 'button').callback());
  await (await chooser).setFiles(path.join(dir, 'photo.png'));
  await page.waitForFunction(() => window.app.graph.getNodeById(20).widgets[0].value === 'photo.png', null, { timeout: 30000 });
  const upPath = mode === 'redis' ? path.join(dir, 'input', 'photo.png') : path.join(dir, 'input', 'photo.png');
  ok(fs.existsSync(upPath) && Buffer.compare(fs.readFileSync(upPath), photo) === 0, 'the photo arrived whole through the upload button');
  const nEnds = ends().length;
  await queue(page);
  await waitDone('the img2img run', nEnds + 1);
  const e2 = ends().at(-1);
  ok(e2.type === 'execution_success' && lastPrompt().prompt['20'].inputs.image === 'photo.png',
     `img2img on the uploaded photo succeeds (${e2.type} ${JSON.stringify(e2.data).slice(0, 300)})`);

  // ---- the mask editor: draw a mask with the mouse, save it, inpaint with it
  step = 'mask editor';
  const maskPosts = [];
  page.on('request', (r) => { if (r.method() === 'POST' && /\/upload\/mask$/.test(r.url())) maskPosts.push(r.url()); });
  await page.evaluate(() => {
    const g = window.app.graph;
    const L = window.LiteGraph ?? window.comfyAPI.litegraph?.LiteGraph;
    const load = L.createNode('LoadImage'); load.id = 30; load.pos = [50, 50]; g.add(load);
    load.widgets[0].value = 'inpaint-src.png';
    load.widgets[0].callback?.('inpaint-src.png');
    const enc = L.createNode('VAEEncodeForInpaint'); enc.id = 31; g.add(enc);
    load.connect(0, enc, 0);
    g.getNodeById(4).connect(2, enc, 1);
    load.connect(1, enc, 2);
    enc.connect(0, g.getNodeById(3), 3);
    g.remove(g.getNodeById(20)); g.remove(g.getNodeById(21)); g.remove(g.getNodeById(22));
    g.getNodeById(3).widgets.find((w) => w.name === 'denoise').value = 1;
    window.app.canvas.deselectAll?.();
    window.app.canvas.selectNode(load);
  });
  await page.waitForFunction(() => window.app.graph.getNodeById(30).imgs?.[0]?.naturalWidth === 64, null, { timeout: 30000 });
  await page.evaluate(() => window.app.extensionManager.command.execute('Comfy.MaskEditor.OpenMaskEditor'));
  const editor = page.locator('.p-dialog', { hasText: 'Mask Editor' });
  await editor.waitFor({ timeout: 20000 });
  // the editor lays out its canvases: the largest one, once it stays put
  const canvasBox = () => page.evaluate(() => {
    const cs = [...document.querySelectorAll('.p-dialog canvas')].map((c) => c.getBoundingClientRect()).filter((r) => r.width > 100);
    const r = cs.sort((a, b) => b.width * b.height - a.width * a.height)[0];
    return r && { x: r.x, y: r.y, w: r.width, h: r.height };
  });
  let box = null, stable = 0;
  await until(async () => {
    const b = await canvasBox();
    stable = b && JSON.stringify(b) === JSON.stringify(box) ? stable + 1 : 0;
    box = b;
    return stable >= 5; /* the same place in six polls in a row */
  }, 'the mask editor to lay out its canvas', 30000);
  ok(box && box.w > 100, `the mask editor shows the picture (${JSON.stringify(box)})`);
  await page.mouse.move(box.x + box.w * 0.3, box.y + box.h * 0.3);
  await page.mouse.down();
  for (let i = 1; i <= 20; i++) await page.mouse.move(box.x + box.w * (0.3 + 0.02 * i), box.y + box.h * (0.3 + 0.015 * i));
  await page.mouse.up();
  await editor.getByRole('button', { name: 'Save' }).click();
  await until(() => maskPosts.length > 0, 'the mask editor to upload its mask', 20000);
  await editor.waitFor({ state: 'detached', timeout: 20000 });
  const maskName = await page.evaluate(() => window.app.graph.getNodeById(30).widgets[0].value);
  ok(/^clipspace\/.+\.png( \[input\])?$/.test(maskName), `the node now names the masked picture (${maskName})`);
  const maskFile = path.join(dir, 'input', maskName.replace(/ \[input\]$/, ''));
  const mb = fs.existsSync(maskFile) ? fs.readFileSync(maskFile) : Buffer.alloc(0);
  ok(mb.length > 33 && mb[25] === 6 && mb.readUInt32BE(16) === 64, `the masked picture is an RGBA PNG of the original's size (${mb.length} bytes, colour type ${mb[25]})`);
  const n3 = ends().length;
  await queue(page);
  await until(() => ends().length > n3, 'the inpaint run', 120000);
  const ip = lastPrompt().prompt;
  ok(ends().at(-1).type === 'execution_success' && ip['30'].inputs.image === maskName && ip['31'].class_type === 'VAEEncodeForInpaint' &&
     JSON.stringify(ip['31'].inputs.mask) === '["30",1]', `an inpaint with the drawn mask succeeds (${ends().at(-1).type} ${JSON.stringify(ends().at(-1).data).slice(0, 200)})`);

  // ---- interrupt a running prompt from the frontend
  step = 'interrupt';
  await setWidgets(page, [[3, 'steps', 10000]]);
  const nEnds2 = ends().length, q0 = queued.length;
  await queue(page);
  await until(() => frames.some((f) => f.type === 'progress' && f.data.prompt_id && f.data.value >= 2 && f.data.max === 10000), 'the long prompt to run', 60000);
  // ---- clear the queue from the frontend while it runs
  step = 'clear queue';
  await queue(page);
  await queue(page);
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_pending.length === 2 && queued.length === q0 + 3 && queued.slice(q0).every((q) => q.id), 'two pending prompts', 30000);
  const [longId, ...pendingIds] = queued.slice(q0).map((q) => q.id);
  await page.evaluate(() => window.app.extensionManager.command.execute('Comfy.ClearPendingTasks'));
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_pending.length === 0, 'the pending prompts to be cleared', 30000);
  const running = (await (await fetch(`${base}/queue`)).json()).queue_running.map((q) => q[1]);
  ok(running.length === 1 && running[0] === longId, `the frontend's clear-queue command empties the pending list, the running prompt runs on (${running})`);
  await page.evaluate(() => window.app.extensionManager.command.execute('Comfy.Interrupt'));
  await waitDone('the interrupted run', nEnds2 + 1, 60000);
  ok(ends().at(-1).type === 'execution_interrupted' && ends().at(-1).data.prompt_id === longId, `the frontend's interrupt stops the running prompt (${ends().at(-1).type})`);
  // once the queue is empty nothing is left to run: the cleared prompts never did
  await until(async () => { const q = await (await fetch(`${base}/queue`)).json(); return !q.queue_running.length && !q.queue_pending.length; }, 'an empty queue', 30000);
  const hist = await (await fetch(`${base}/history`)).json();
  ok(hist[longId] && pendingIds.every((id) => !hist[id]) && ends().length === nEnds2 + 1, 'the cleared prompts never ran');

  ok(bad.length === 0, `no unexpected error response during the session (${bad.join('; ')})`);
  ok(errors.length === 0, `no console error during the session (${errors.join('; ')})`);
} catch (e) {
  ok(false, `unexpected at step '${step}': ${e.stack}`);
  try { await page.screenshot({ path: path.join(dir, 'failure.png') }); } catch { /* closed */ }
} finally {
  await browser.close();
  ok((await server.stop()) === 0, 'the server stops cleanly');
  for (const c of children.reverse()) {
    const code = await new Promise((res) => { if (c.exitCode !== null) return res(c.exitCode); c.once('exit', (x, sig) => res(x ?? sig)); c.kill('SIGTERM'); });
    ok(code === 0, `${c.spawnargs[1]} stops cleanly (${code})`);
  }
}
done();
