// page_test.mjs - the page at / in headless Chromium (Debian's, driven by
// playwright-core): a workflow pasted and queued shows live progress, the
// latent preview and then the finished image in the gallery; a JSON typo and
// a workflow that fails validation show their errors; the queue lists a
// running prompt that the page's own button interrupts. Checks are on the
// DOM and on a screenshot's structure (a PNG of the viewport's size), never
// on pixels. With MODE "redis" the same runs against `serve --redis` and one
// `sdflow worker` (a redis-server of its own on a free port), and the page
// must list that worker.
// usage: node page_test.mjs BIN WORKDIR MODELS_JSON CHROMIUM [local|redis]
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { ok, done, until, startServer } from './lib.mjs';

const [bin, dir, modelsJson, browserPath, mode = 'local'] = process.argv.slice(2);
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
  children.push(spawn(bin, ['worker', ...redisArgs, '--name', 'page-w1', '--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
    '--input-dir', path.join(dir, 'w-input'), '--output-dir', path.join(dir, 'w-out'), '--temp-dir', path.join(dir, 'w-temp'),
    '--no-cache', '--preview-interval', '0'], { stdio: ['ignore', log, log] }));
}
const server = await startServer(bin, ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
  '--input-dir', path.join(dir, 'input'), '--output-dir', path.join(dir, 'out'), '--temp-dir', path.join(dir, 'temp'),
  '--no-cache', '--preview-interval', '0', ...redisArgs], path.join(dir, 'server.log'));
const base = `http://127.0.0.1:${server.port}`;
const browser = await chromium.launch({
  executablePath: browserPath, headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run'],
});
const wf = JSON.parse(fs.readFileSync(path.join(setup.src, 'workflows', 'txt2img_sd15.json'), 'utf8'));
wf['4'].inputs.ckpt_name = setup.sd1;
Object.assign(wf['5'].inputs, { width: 64, height: 64 });
wf['3'].inputs.steps = 4;
let step = 'start';
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(`${base}/`);
  step = 'connect'; await page.waitForSelector('#status[data-state="connected"]', { timeout: 60000 });
  ok(true, 'the page connects its WebSocket');
  ok(await page.$eval('#preview', (i) => i.hidden), 'no (broken) preview picture before the first frame');
  for (const id of ['workflow', 'submit', 'queue-running', 'queue-pending', 'progress', 'preview', 'gallery'])
    ok(await page.$(`#${id}`) !== null, `the page has #${id}`);
  if (mode === 'redis') {
    step = 'workers'; await page.waitForSelector('#workers li[data-worker="page-w1"]', { timeout: 60000 });
    ok(await page.isVisible('#workers-section'), 'the page lists the worker (serve --redis)');
  } else {
    await page.waitForFunction(() => document.getElementById('workers-section').hidden, null, { timeout: 10000 });
    ok(true, 'no workers section without --redis');
  }

  // ---- a workflow through the page
  await page.fill('#workflow', JSON.stringify(wf, null, 1));
  await page.click('#submit');
  step = 'queued'; await page.waitForSelector('#result[data-prompt-id]', { timeout: 60000 });
  const pid = await page.getAttribute('#result', 'data-prompt-id');
  ok(/^[0-9a-f-]{36}$/.test(pid), `the page shows the prompt id (${pid})`);
  step = 'success'; await page.waitForSelector('#last-outcome[data-outcome="success"]', { timeout: 60000 });
  const prog = await page.$eval('#progress', (p) => ({ value: p.value, max: p.max, events: Number(p.dataset.events) }));
  // (4 sampler steps, then other long nodes may report their own progress)
  ok(prog.events >= 4 && prog.value === prog.max && prog.max >= 1, `the progress bar followed the run to its end (${JSON.stringify(prog)})`);
  const prev = await page.$eval('#preview', (i) => ({ frames: Number(i.dataset.frames), src: i.src, w: i.naturalWidth }));
  ok(prev.frames >= 1 && prev.src.startsWith('blob:') && prev.w > 0, `the latent preview was shown (${JSON.stringify(prev)})`);
  step = 'gallery'; await page.waitForFunction((p) => [...document.querySelectorAll('#gallery img')].some((i) => i.dataset.promptId === p && i.complete && i.naturalWidth > 0),
                             pid, { timeout: 60000 });
  ok(await page.$$eval('#gallery img', (is) => new Set(is.map((i) => i.getAttribute('src').replace(/&?rand=[^&]*/, ''))).size === is.length),
     'each output is in the gallery once');
  const img = await page.$eval(`#gallery img[data-prompt-id="${pid}"]`, (i) => ({ w: i.naturalWidth, h: i.naturalHeight, src: i.getAttribute('src') }));
  ok(img.w === 64 && img.h === 64 && img.src.startsWith('/view?'), `the finished image is in the gallery, loaded through /view (${JSON.stringify(img)})`);
  // ---- the finished PNG opened through the file input, and dropped on the page
  const pngBytes = Buffer.from(await (await fetch(base + img.src)).arrayBuffer());
  fs.writeFileSync(path.join(dir, 'opened.png'), pngBytes);
  await page.fill('#workflow', '');
  await page.setInputFiles('#open-file', path.join(dir, 'opened.png'));
  await page.waitForFunction(() => document.getElementById('workflow').value.length > 0, null, { timeout: 10000 });
  const opened = JSON.parse(await page.inputValue('#workflow'));
  ok(opened['3']?.inputs?.steps === 4 && opened['3'].class_type === 'KSampler', 'a PNG opened through the file input fills the box with its prompt');
  await page.fill('#workflow', '');
  await page.evaluate(async (b64) => {
    const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], 'dropped.json', { type: 'application/json' }));
    document.getElementById('workflow').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, Buffer.from(JSON.stringify(wf)).toString('base64'));
  await page.waitForFunction(() => document.getElementById('workflow').value.length > 0, null, { timeout: 10000 });
  ok(JSON.parse(await page.inputValue('#workflow'))['5'].inputs.width === 64, 'a JSON file dropped on the page fills the box');
  const shot = await page.screenshot();
  ok(shot.subarray(1, 4).toString() === 'PNG' && shot.readUInt32BE(16) === 1000 && shot.readUInt32BE(20) === 800,
     'a screenshot of the page is a 1000x800 PNG');

  // ---- errors
  await page.fill('#workflow', '{"3": {');
  await page.click('#submit');
  step = 'json error'; await page.waitForSelector('#errors[data-kind="json"]');
  ok((await page.textContent('#errors')).startsWith('not JSON'), 'a JSON typo is reported on the page');
  const bad = JSON.parse(JSON.stringify(wf));
  bad['4'].inputs.ckpt_name = 'no-such.safetensors';
  await page.fill('#workflow', JSON.stringify(bad));
  await page.click('#submit');
  step = 'server error'; await page.waitForSelector('#errors[data-kind="server"]');
  const et = await page.textContent('#errors');
  ok(/Prompt outputs failed validation/.test(et) && /node 4 \(CheckpointLoaderSimple\): Value not in list/.test(et),
     `a validation failure lists the node's problem: ${et}`);
  ok(et.split('no-such.safetensors').length === 2, `each problem is shown once: ${et}`);

  // ---- the queue, and interrupting from the page
  const long = JSON.parse(JSON.stringify(wf));
  long['3'].inputs.steps = 10000;
  const before = await page.$eval('#progress', (p) => Number(p.dataset.events));
  await page.fill('#workflow', JSON.stringify(long));
  await page.click('#submit');
  step = 'running list'; await page.waitForSelector('#queue-running li[data-prompt-id] button', { timeout: 60000 });
  step = 'long prompt progress'; await page.waitForFunction((n) => Number(document.getElementById('progress').dataset.events) > n + 1, before, { timeout: 60000 });
  // the list is redrawn on every status message: find and click the button
  // inside the page, in one step, and again until the outcome shows
  step = 'interrupt'; await until(async () => {
    await page.evaluate(() => document.querySelector('#queue-running li[data-prompt-id] button')?.click());
    return (await page.$('#last-outcome[data-outcome="interrupted"]')) !== null ||
           (await page.waitForSelector('#last-outcome[data-outcome="interrupted"]', { timeout: 2000 }).catch(() => null)) !== null;
  }, 'the interrupted outcome', 60000);
  ok(true, 'the page lists the running prompt and its button interrupts it');
  step = 'running list empties'; await page.waitForFunction(() => document.querySelectorAll('#queue-running li').length === 0, null, { timeout: 60000 });
  ok(true, 'the running list empties');
  ok(pageErrors.length === 0, `no JavaScript errors on the page (${pageErrors.join('; ')})`);
} catch (e) {
  ok(false, `unexpected at step '${step}': ${e.stack}`);
} finally {
  await browser.close();
  ok((await server.stop()) === 0, 'the server stops cleanly');
  for (const c of children.reverse()) {
    const code = await new Promise((res) => { if (c.exitCode !== null) return res(c.exitCode); c.once('exit', (x, sig) => res(x ?? sig)); c.kill('SIGTERM'); });
    ok(code === 0, `${c.spawnargs[1]} stops cleanly (${code})`);
  }
}
done();
