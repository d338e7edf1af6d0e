// redis_full_test.mjs - `sdflow serve --redis` and three `sdflow worker`s
// over a Redis that fills up (maxmemory, noeviction) while prompts run
// (issue 23: prompts ran 2-3 times, were recorded `success` while their
// image was 404, stayed `running` for minutes; a worker that found Redis
// full at start exited). Two rounds of 40 prompts; in each the memory limit
// is set just above what the queued prompts use, so that Redis fills up
// after a few pictures, kept full for a while, then lifted:
//   round 1 (--oom-retry 60): the prompts that met a full Redis wait for room
//     and all end in `success`;
//   round 2 (--oom-retry 1): those that met it fail, saying Redis is full;
// and in both:
//   - every prompt ends in exactly one history entry, none stays in /queue;
//   - every prompt started exactly once (no worker took over a prompt whose
//     worker was alive and waiting: its heartbeat works on a full Redis);
//   - `success` only with every image served by /view (the server shares no
//     folder with the workers); an error names the full Redis;
//   - POST /prompt on a full Redis answers 503 redis_full (nothing queued);
//   - a worker started while Redis is full waits (it does not exit) and
//     works once there is room.
// usage: node redis_full_test.mjs BIN SRC WORKDIR MODELS_JSON
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { ok, done, until, tweak, sleep } from './lib.mjs';

const [bin, src, dir, modelsJson] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const CLAIM_TIMEOUT = 3;
const N_PROMPTS = 40;

const children = new Set();
function killAll() {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { killAll(); process.exit(1); });
setTimeout(() => { console.log('FAIL: the test ran over 540 s'); killAll(); process.exit(1); }, 540000).unref();

function launch(name, cmd, args, logPath, ready) {
  const out = fs.openSync(logPath, 'w');
  const proc = spawn(cmd, args.map(String), { stdio: ['ignore', out, out] });
  fs.closeSync(out);
  const c = {
    name, proc, logPath,
    log: () => fs.readFileSync(logPath, 'utf8'),
    exited: new Promise((res) => proc.once('exit', (code, sig) => res(code ?? sig))),
    alive: () => proc.exitCode === null && proc.signalCode === null,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const code = await c.exited;
      clearTimeout(t);
      return code;
    },
  };
  children.add(c);
  if (!ready) return Promise.resolve(c);
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const m = c.log().match(ready);
      if (m) { clearInterval(poll); c.match = m; resolve(c); }
      else if (!c.alive() || Date.now() - t0 > 60000) {
        clearInterval(poll);
        reject(new Error(`${name} did not start: ${c.log()}`));
      }
    }, 50);
  });
}
const freePort = () => new Promise((res, rej) => {
  const s = net.createServer();
  s.once('error', rej);
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
});

const redisDir = path.join(dir, 'redis');
fs.mkdirSync(redisDir, { recursive: true });
let redisPort = 0;
for (let attempt = 0; attempt < 3; attempt++) {
  redisPort = await freePort();
  try {
    await launch('redis-server', 'redis-server', ['--port', redisPort, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
                  '--dir', redisDir, '--daemonize', 'no', '--logfile', '', '--maxmemory-policy', 'noeviction'],
                 path.join(dir, `redis-${attempt}.log`), /Ready to accept connections/);
    break;
  } catch (e) {
    if (attempt === 2) { console.log(`FAIL: ${e.message}`); process.exit(1); }
  }
}
const rcli = (...args) => {
  const r = spawnSync('redis-cli', ['-p', String(redisPort), ...args.map(String)], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : `redis-cli failed: ${r.stderr}`;
};
const usedMemory = () => Number((rcli('INFO', 'memory').match(/used_memory:(\d+)/) || [])[1] || 0);
const models = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir];
const own = (who) => {
  const d = path.join(dir, who);
  for (const sub of ['out', 'in', 'temp']) fs.mkdirSync(path.join(d, sub), { recursive: true });
  return ['--output-dir', path.join(d, 'out'), '--input-dir', path.join(d, 'in'), '--temp-dir', path.join(d, 'temp')];
};
const txt2img = tweak('txt2img_sd15', JSON.parse(fs.readFileSync(path.join(src, 'workflows', 'txt2img_sd15.json'), 'utf8')),
                      setup, 'example.png'); // 64x64, 2 steps
const prompt = (seed) => {
  const w = JSON.parse(JSON.stringify(txt2img));
  w['3'].inputs.seed = seed;
  return w;
};
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

async function round(no, oomRetry) {
  const prefix = `sdflow-full-${process.pid}-${no}`;
  const redisArgs = ['--redis', `redis://127.0.0.1:${redisPort}`, '--redis-prefix', prefix];
  rcli('CONFIG', 'SET', 'maxmemory', '0');
  const server = await launch(`server${no}`, bin, ['serve', '--port', 0, ...redisArgs, ...models, ...own(`server${no}`), '--no-cache'],
                              path.join(dir, `server-${no}.log`), /listening on http:\/\/[^:]+:(\d+)\//);
  const base = `http://127.0.0.1:${server.match[1]}`;
  const workers = [];
  const logs = [];
  const startWorker = async (name, ready = true) => {
    const logPath = path.join(dir, `${name}-r${no}.log`);
    logs.push(logPath);
    const w = await launch(name, bin, ['worker', ...redisArgs, '--name', name, '--claim-timeout', CLAIM_TIMEOUT,
                                       '--oom-retry', oomRetry, ...models, ...own(`${name}-r${no}`), '--no-cache'],
                           logPath, ready ? new RegExp(`sdflow worker ${name}: ready`) : null);
    workers.push(w);
    return w;
  };
  const starts = (id) => logs.flatMap((p) => fs.readFileSync(p, 'utf8').split('\n'))
    .filter((l) => new RegExp(`prompt ${esc(id)}: attempt \\d+ on `).test(l));
  const post = async (body) => {
    const r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify(body) });
    return { status: r.status, body: await r.json().catch(() => null) };
  };
  const history = async () => {
    const raw = await (await fetch(`${base}/history?max_items=10000`)).text();
    return { raw, h: JSON.parse(raw) };
  };
  const queueNow = async () => (await fetch(`${base}/queue`)).json();

  // queued first (the job hashes hold the prompts), then the limit: room
  // for a handful of pictures beyond what is there
  const ids = [];
  for (let i = 0; i < N_PROMPTS; i++) {
    const r = await post({ prompt: prompt(5000 * no + i) });
    if (r.status !== 200) throw new Error(`POST /prompt: ${r.status} ${JSON.stringify(r.body)}`);
    ids.push(r.body.prompt_id);
  }
  for (const n of ['w1', 'w2', 'w3']) await startWorker(n);
  rcli('CONFIG', 'SET', 'maxmemory', usedMemory() + 64 * 1024);
  // full: the workers say so, and new prompts are refused
  await until(() => logs.some((p) => /redis is full/.test(fs.readFileSync(p, 'utf8'))), 'a worker to meet a full Redis', 180000);
  const refused = await post({ prompt: prompt(1) });
  ok(refused.status === 503 && refused.body?.error?.type === 'redis_full',
     `round ${no}: POST /prompt on a full Redis: 503 redis_full (${refused.status} ${JSON.stringify(refused.body?.error)})`);
  // a worker started now waits instead of exiting
  const late = await startWorker('w4', false);
  await until(() => /redis is full/.test(late.log()) || !late.alive(), 'the late worker to meet the full Redis', 60000);
  ok(late.alive(), `round ${no}: a worker started on a full Redis waits (${late.log().split('\n').slice(-3).join(' | ')})`);
  // kept full for longer than the claim timeout (a waiting worker's prompt
  // must not be taken over) and than the shorter --oom-retry
  const t0 = Date.now();
  await until(() => Date.now() - t0 > (CLAIM_TIMEOUT * 3 + 1) * 1000, 'time to pass', 60000);
  rcli('CONFIG', 'SET', 'maxmemory', '0');
  await until(() => /sdflow worker w4: ready/.test(late.log()), 'the late worker to be ready once there is room', 60000)
    .then(() => ok(true, ''), (e) => ok(false, `round ${no}: ${e.message}`));

  // every prompt ends, once
  const t1 = Date.now();
  for (;;) {
    const { h } = await history();
    if (ids.every((id) => h[id])) break;
    if (Date.now() - t1 > 240000) break;
    await sleep(250);
  }
  const { raw, h } = await history();
  const missing = ids.filter((id) => !h[id]);
  ok(missing.length === 0, `round ${no}: every prompt ended (missing: ${missing.join(', ')})`);
  const q = await queueNow();
  ok(q.queue_running.length === 0 && q.queue_pending.length === 0,
     `round ${no}: nothing stays running or pending (${JSON.stringify(q.queue_running.map((e) => e[1]))})`);
  const twice = ids.filter((id) => (raw.match(new RegExp(`"${esc(id)}"\\s*:\\s*\\{`, 'g')) || []).length > 1);
  ok(twice.length === 0, `round ${no}: each prompt once in /history (not: ${twice.join(', ')})`);
  const reruns = ids.filter((id) => starts(id).length !== 1);
  ok(reruns.length === 0, `round ${no}: every prompt started exactly once (not: ${reruns.map((id) => `${id} x${starts(id).length}`).join(', ')})`);
  let ok_ = 0, failed = 0, notServed = [];
  for (const id of ids.filter((i) => h[i])) {
    const st = h[id].status?.status_str;
    if (st === 'success') {
      ok_++;
      const ims = Object.values(h[id].outputs || {}).flatMap((o) => o.images || []);
      if (ims.length !== 1) notServed.push(`${id} (${ims.length} images)`);
      for (const im of ims) {
        const r = await fetch(`${base}/view?${new URLSearchParams({ filename: im.filename, subfolder: im.subfolder, type: im.type })}`);
        const b = Buffer.from(await r.arrayBuffer());
        if (r.status !== 200 || !b.subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47]))) notServed.push(`${id} ${im.filename}: ${r.status}`);
      }
    } else {
      failed++;
      const msg = JSON.stringify(h[id].status?.messages || []);
      if (!/Redis is full|maxmemory|OOM/.test(msg)) notServed.push(`${id} failed without naming the full Redis: ${msg.slice(0, 200)}`);
    }
  }
  ok(notServed.length === 0, `round ${no}: success = images served by /view; errors name the full Redis (${notServed.slice(0, 5).join('; ')})`);
  if (oomRetry >= 30) ok(failed === 0, `round ${no} (--oom-retry ${oomRetry}): every prompt waited for room and succeeded (${failed} failed)`);
  else ok(failed > 0 && ok_ > 0, `round ${no} (--oom-retry ${oomRetry}): some prompts met the full Redis and failed, the first ones succeeded (${ok_} ok, ${failed} failed)`);
  console.log(`round ${no}: ${ok_} succeeded, ${failed} failed (Redis full)`);
  for (const w of workers) await w.stop();
  await server.stop();
}

try {
  await round(1, 60);
  await round(2, 1);
} catch (e) {
  ok(false, `exception: ${e.stack || e}`);
}
rcli('SHUTDOWN', 'NOSAVE');
done();
