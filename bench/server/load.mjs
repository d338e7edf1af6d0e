// load.mjs - load on `sdflow serve`: N concurrent ComfyUI-style clients
// (each its own WebSocket and clientId) submit PROMPTS prompts in all, each
// client waiting for its prompt's execution_success before sending the
// next. Reports latency (submit -> execution_success) p50/p99, throughput,
// prompts lost, and the server's resident memory (VmRSS) sampled every
// 100 ms. A benchmark, not a test: numbers depend on the machine.
// With WORKERS=N in the environment the server queues on Redis (a
// redis-server started here on a free port) and N `sdflow worker`
// processes run the prompts; their peak RSS is reported too.
// usage: node load.mjs BIN WORKDIR MODELS_JSON [CLIENTS=10] [PROMPTS=200] [MEMORY_BUDGET]
import WebSocket from '../../tests/server/node_modules/ws/wrapper.mjs';
import fs from 'node:fs';
import path from 'node:path';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { startServer, sleep } from '../../tests/server/lib.mjs';

const [bin, dir, modelsJson, nc = '10', np = '200', budget = ''] = process.argv.slice(2);
const clients = Number(nc), prompts = Number(np);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const nWorkers = Number(process.env.WORKERS || 0);
const children = [];
let redisArgs = [];
if (nWorkers > 0) {
  const port = await new Promise((res) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
  children.push(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' }));
  await sleep(300);
  redisArgs = ['--redis', `redis://127.0.0.1:${port}`];
  for (let k = 0; k < nWorkers; k++) {
    const wdir = path.join(dir, `w${k}`);
    children.push(spawn(bin, ['worker', ...redisArgs, '--name', `w${k}`, '--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
      '--output-dir', path.join(wdir, 'out'), '--input-dir', path.join(wdir, 'input'), '--temp-dir', path.join(wdir, 'temp'), '--no-cache',
      ...(budget ? ['--memory-budget', budget] : [])], { stdio: ['ignore', fs.openSync(path.join(dir, `w${k}.log`), 'w'), fs.openSync(path.join(dir, `w${k}.log`), 'a')] }));
  }
}
const server = await startServer(bin, ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
  '--output-dir', path.join(dir, 'out'), '--input-dir', path.join(dir, 'input'), '--temp-dir', path.join(dir, 'temp'),
  '--no-cache', '--history', '50', ...(budget ? ['--memory-budget', budget] : []), ...redisArgs], path.join(dir, 'server.log'));
const base = `http://127.0.0.1:${server.port}`;
const wf = JSON.parse(fs.readFileSync(path.join(setup.src, 'workflows', 'txt2img_sd15.json'), 'utf8'));
wf['4'].inputs.ckpt_name = setup.sd1;
Object.assign(wf['5'].inputs, { width: 64, height: 64 });
wf['3'].inputs.steps = 2;

const rssOf = (pid) => { try { const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/); return m ? Number(m[1]) / 1024 : 0; } catch { return 0; } };
const rss = () => rssOf(server.proc.pid);
const workerPids = children.slice(1).map((c) => c.pid);
let peak = 0, workerPeak = 0;
const rssStart = rss();
const sampler = setInterval(() => {
  peak = Math.max(peak, rss());
  for (const pid of workerPids) workerPeak = Math.max(workerPeak, rssOf(pid));
}, 100);
const latencies = [];
let lost = 0, seed = 1;
const t0 = Date.now();

async function client(k, count) {
  const ws = new WebSocket(`ws://127.0.0.1:${server.port}/ws?clientId=load-${k}`);
  const waiting = new Map(); // prompt_id -> resolve
  ws.on('message', (data, bin) => {
    if (bin) return;
    const m = JSON.parse(data.toString());
    if ((m.type === 'execution_success' || m.type === 'execution_error') && waiting.has(m.data.prompt_id)) {
      waiting.get(m.data.prompt_id)(m.type);
      waiting.delete(m.data.prompt_id);
    }
  });
  await new Promise((res) => ws.once('open', res));
  for (let i = 0; i < count; i++) {
    const w = JSON.parse(JSON.stringify(wf));
    w['3'].inputs.seed = seed++; // every prompt distinct: no cache hits
    const start = Date.now();
    const id = crypto.randomUUID();
    const done = new Promise((res) => { waiting.set(id, res); setTimeout(() => res('timeout'), 600000); });
    const r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: w, client_id: `load-${k}`, prompt_id: id }) });
    if (r.status !== 200) { lost++; waiting.delete(id); continue; }
    const outcome = await done;
    if (outcome === 'execution_success') latencies.push(Date.now() - start); else lost++;
  }
  ws.close();
}

const per = Math.floor(prompts / clients);
await Promise.all(Array.from({ length: clients }, (_, k) => client(k, per + (k < prompts % clients ? 1 : 0))));
const wall = (Date.now() - t0) / 1000;
clearInterval(sampler);
const rssEnd = rss();
await server.stop();
for (const c of children) c.kill('SIGTERM');
latencies.sort((a, b) => a - b);
const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p / 100 * latencies.length))];
console.log(JSON.stringify({
  clients, prompts, workers: nWorkers ? `${nWorkers} (redis)` : 'in the server', memory_budget: budget || 'default (4G)',
  completed: latencies.length, lost,
  memo_trims: nWorkers ? undefined : (server.log().match(/memory: released/g) || []).length,
  latency_ms: { p50: pct(50), p99: pct(99), max: latencies.at(-1) },
  throughput_per_s: +(latencies.length / wall).toFixed(2), wall_s: +wall.toFixed(1),
  server_rss_mib: { start: +rssStart.toFixed(0), peak: +peak.toFixed(0), end: +rssEnd.toFixed(0) },
  ...(nWorkers ? { worker_rss_peak_mib: +workerPeak.toFixed(0) } : {}),
}, null, 1));
process.exit(0); // pending per-prompt timers would keep node alive
