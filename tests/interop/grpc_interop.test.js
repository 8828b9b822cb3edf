#!/usr/bin/env node
// End-to-end test of a real odeserve with a client NOT built from this repository:
// Node's @grpc/grpc-js + @grpc/proto-loader reading proto/odeserve/v1/inference.proto,
// proto/grpc/health/v1/health.proto, the vendored grpc.reflection.v1alpha proto (protos/), and
// protobufjs to decode what reflection returns.
//
//   node grpc_interop.test.js --server BIN --repository DIR [--proto_root DIR] [--log FILE]
//
// Covers: every Inference RPC (Embed, Classify, ListModels, GetModel, Translate with the status
// its repository implies), error codes, concurrent calls, health Check + Watch, a reflection
// listing and a call made from the reflected descriptors alone, bearer-token auth and mutual
// TLS on a second server (certificates made with openssl), and the SIGTERM drain seen from the
// client (Watch -> NOT_SERVING, exit 0).
// Exit 0 all passed, 1 a check failed, 77 skipped (node_modules missing: npm ci).
'use strict';

const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const net = require('node:net');
const { spawn, execFileSync } = require('node:child_process');

const here = __dirname;
let grpc, protoLoader, descriptorExt, protobuf;
try {
  grpc = require('@grpc/grpc-js');
  protoLoader = require('@grpc/proto-loader');
  protobuf = require('protobufjs');
  descriptorExt = require('protobufjs/ext/descriptor');
} catch (e) {
  console.log(`SKIP: ${path.join(here, 'node_modules')} is missing or incomplete (${e.code || e.message}); ` +
              'run: npm ci --prefix tests/interop');
  process.exit(77);
}

// ------------------------------------------------------------------------------------ args
const args = {};
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  const m = a.match(/^--([^=]+)(?:=(.*))?$/);
  if (!m) throw new Error(`bad argument ${a}`);
  args[m[1]] = m[2] !== undefined ? m[2] : process.argv[++i];
}
if (!args.server) { console.error('usage: --server BIN --repository DIR'); process.exit(2); }
const protoRoot = args.proto_root || path.resolve(here, '../../proto');
const logPath = args.log || path.join(os.tmpdir(), `odeserve-interop-${process.pid}.log`);
const startTimeout = Number(args.start_timeout || 240) * 1000;

// ------------------------------------------------------------------------------- reporting
let failures = 0;
const failed = [];
function check(cond, msg) {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${msg}`);
  if (!cond) { failures++; failed.push(msg); }
  return cond;
}
const codeName = (c) => Object.keys(grpc.status).find((k) => grpc.status[k] === c) || String(c);

// ---------------------------------------------------------------------------------- protos
const loadOpts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
                   includeDirs: [protoRoot, path.join(here, 'protos'), '/usr/include'] };
const pkg = grpc.loadPackageDefinition(protoLoader.loadSync(
  ['odeserve/v1/inference.proto', 'grpc/health/v1/health.proto',
   'grpc/reflection/v1alpha/reflection.proto'], loadOpts));
const Inference = pkg.odeserve.v1.Inference;
const Health = pkg.grpc.health.v1.Health;
const Reflection = pkg.grpc.reflection.v1alpha.ServerReflection;

// --------------------------------------------------------------------------------- helpers
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function unary(client, method, req, { timeoutMs = 60000, metadata } = {}) {
  return new Promise((resolve) => {
    const md = metadata || new grpc.Metadata();
    client[method](req, md, { deadline: Date.now() + timeoutMs }, (err, resp) => {
      resolve(err ? { code: err.code, details: err.details, resp: null }
                  : { code: grpc.status.OK, details: '', resp });
    });
  });
}

class ServerProc {
  constructor(extra = [], log = logPath) { this.extra = extra; this.log = log; }
  async start() {
    this.grpcPort = await freePort();
    this.metricsPort = await freePort();
    const argv = [`--grpc_port=${this.grpcPort}`, `--metrics_port=${this.metricsPort}`,
                  '--metrics_address=127.0.0.1', '--device=cpu', '--intra_op_threads=1',
                  ...(args.repository ? [`--model_repository=${args.repository}`] : []), ...this.extra];
    console.log(`starting: ${args.server} ${argv.join(' ')}`);
    const out = fs.openSync(this.log, 'w');
    this.proc = spawn(args.server, argv, { stdio: ['ignore', out, out] });
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, sig) => resolve({ code, sig })));
    this.proc.on('exit', () => { this.done = true; });
    return this;
  }
  get target() { return `127.0.0.1:${this.grpcPort}`; }
  tail(n = 30) {
    try { return fs.readFileSync(this.log, 'utf8').split('\n').slice(-n).join('\n'); } catch { return ''; }
  }
  kill() { if (!this.done) this.proc.kill('SIGKILL'); }
}

async function waitServing(health, service, proc, creds) {
  const until = Date.now() + startTimeout;
  let last = '';
  while (Date.now() < until) {
    if (proc.done) throw new Error(`server exited before serving:\n${proc.tail()}`);
    const r = await unary(health, 'Check', { service }, { timeoutMs: 2000 });
    if (r.code === grpc.status.OK && r.resp.status === 'SERVING') return;
    last = r.code === grpc.status.OK ? r.resp.status : codeName(r.code);
    await sleep(200);
  }
  throw new Error(`health ${JSON.stringify(service)} not SERVING after ${startTimeout / 1000}s (last ${last})`);
}

function watchFirst(health, service, timeoutMs = 10000) {
  // Resolves with the first status a Watch stream sends, then cancels it.
  return new Promise((resolve) => {
    const call = health.Watch({ service });
    const t = setTimeout(() => { call.cancel(); resolve('TIMEOUT'); }, timeoutMs);
    call.on('data', (m) => { clearTimeout(t); call.cancel(); resolve(m.status); });
    call.on('error', (e) => { clearTimeout(t); if (e.code !== grpc.status.CANCELLED) resolve(codeName(e.code)); });
  });
}

function reflect(client, requests) {
  // Sends the requests on one ServerReflectionInfo stream; resolves with the responses in order.
  return new Promise((resolve, reject) => {
    const call = client.ServerReflectionInfo();
    const out = [];
    call.on('data', (m) => { out.push(m); if (out.length === requests.length) call.end(); });
    call.on('error', reject);
    call.on('end', () => resolve(out));
    for (const r of requests) call.write({ host: '', ...r });
  });
}

const seconds = (d) => (d ? Number(d.seconds || 0) + (d.nanos || 0) / 1e9 : 0);

// ------------------------------------------------------------------------------ the checks
async function inferenceChecks(inf, health, models) {
  const ready = models.filter((m) => m.state === 'READY');
  const emb = ready.find((m) => m.task === 'EMBEDDING');
  const cls = ready.find((m) => m.task === 'CLASSIFICATION');
  const tr = ready.find((m) => m.task === 'TRANSLATION');
  check(emb, `a READY embedding model (${emb && emb.name})`);
  check(cls, `a READY classification model (${cls && cls.name})`);
  const text = ['Debian packages are built from source packages.', 'A tiny game about ducks.'];

  // GetModel
  for (const m of ready) {
    const r = await unary(inf, 'GetModel', { name: m.name });
    const info = r.resp && r.resp.model;
    check(r.code === grpc.status.OK && info.name === m.name,
          `GetModel ${m.name}: ${codeName(r.code)} task=${info && info.task} family=${info && info.family}`);
    if (info) {
      check(info.trained_depth > 0 && info.min_steps >= 1 && info.min_steps <= info.default_steps &&
            info.default_steps <= info.max_steps && info.solvers.length > 0,
            `GetModel ${m.name}: depth ${info.trained_depth}, steps [${info.min_steps}, ${info.max_steps}] default ` +
            `${info.default_steps}, solvers ${info.solvers.join('/')}`);
    }
  }
  const nf = await unary(inf, 'GetModel', { name: 'no-such-model' });
  check(nf.code === grpc.status.NOT_FOUND, `GetModel unknown model: ${codeName(nf.code)} (want NOT_FOUND)`);

  if (emb) {
    const info = (await unary(inf, 'GetModel', { name: emb.name })).resp.model;
    const r = await unary(inf, 'Embed', { model: emb.name, inputs: text, normalize: true });
    check(r.code === grpc.status.OK, `Embed ${emb.name}: ${codeName(r.code)} ${r.details}`);
    if (r.resp) {
      const e = r.resp.embeddings;
      const norms = e.map((x) => Math.sqrt(x.values.reduce((s, v) => s + v * v, 0)));
      check(e.length === 2 && e.every((x) => x.values.length === info.embedding_dimension),
            `Embed: 2 embeddings of dimension ${info.embedding_dimension} (got ${e.map((x) => x.values.length)})`);
      check(norms.every((n) => Math.abs(n - 1) < 1e-3), `Embed normalize: L2 norms ${norms.map((n) => n.toFixed(4))}`);
      const rep = r.resp.report;
      check(rep && rep.steps >= info.min_steps && rep.steps <= info.max_steps && rep.batch_size >= 1 &&
            seconds(rep.total_time) > 0 && rep.tokens > 0,
            `Embed report: steps ${rep.steps} ${rep.solver} dt=${rep.step_size} batch ${rep.batch_size} ` +
            `tokens ${rep.tokens} total ${(seconds(rep.total_time) * 1e3).toFixed(1)} ms (${rep.step_choice})`);
    }
    const lo = await unary(inf, 'Embed', { model: emb.name, inputs: text.slice(0, 1),
                                           compute: { steps: info.min_steps } });
    check(lo.code === grpc.status.OK && lo.resp.report.steps === info.min_steps && lo.resp.report.step_choice === 'REQUESTED',
          `Embed steps=${info.min_steps}: ran ${lo.resp && lo.resp.report.steps} (${lo.resp && lo.resp.report.step_choice})`);
    const bud = await unary(inf, 'Embed', { model: emb.name, inputs: text.slice(0, 1),
                                            compute: { latency_budget: { seconds: 5, nanos: 0 } } });
    check(bud.code === grpc.status.OK && bud.resp.report.budget_set,
          `Embed budget 5s: ${codeName(bud.code)} budget_set=${bud.resp && bud.resp.report.budget_set} ` +
          `met=${bud.resp && bud.resp.report.budget_met} steps=${bud.resp && bud.resp.report.steps} (${bud.resp && bud.resp.report.step_choice})`);
    const refuse = await unary(inf, 'Embed', { model: emb.name, inputs: text.slice(0, 1),
      compute: { latency_budget: { seconds: 0, nanos: 1000 }, on_budget_miss: 'REFUSE' } });
    check(refuse.code === grpc.status.DEADLINE_EXCEEDED,
          `Embed budget 1us + REFUSE: ${codeName(refuse.code)} (want DEADLINE_EXCEEDED) ${refuse.details}`);
    const cases = [
      [{ model: emb.name, inputs: [] }, grpc.status.INVALID_ARGUMENT, 'no inputs'],
      [{ model: emb.name, inputs: [''] }, grpc.status.INVALID_ARGUMENT, 'empty input'],
      [{ model: emb.name, inputs: ['x'], compute: { steps: info.max_steps + 1 } }, grpc.status.INVALID_ARGUMENT, 'steps > max'],
      [{ model: emb.name, inputs: ['x'], compute: { latency_budget: { seconds: -1, nanos: 0 } } }, grpc.status.INVALID_ARGUMENT, 'budget < 0'],
      [{ model: 'no-such-model', inputs: ['x'] }, grpc.status.NOT_FOUND, 'unknown model'],
    ];
    if (cls) cases.push([{ model: cls.name, inputs: ['x'] }, grpc.status.FAILED_PRECONDITION, 'Embed on a classifier']);
    for (const [req, want, what] of cases) {
      const r2 = await unary(inf, 'Embed', req);
      check(r2.code === want, `Embed ${what}: ${codeName(r2.code)} (want ${codeName(want)}) ${r2.details}`);
    }
    // Concurrency: 16 parallel single-input calls, all answered.
    const par = await Promise.all(Array.from({ length: 16 }, (_, i) =>
      unary(inf, 'Embed', { model: emb.name, inputs: [`parallel call number ${i}`] })));
    const batches = par.filter((p) => p.resp).map((p) => p.resp.report.batch_size);
    check(par.every((p) => p.code === grpc.status.OK),
          `16 concurrent Embed calls: ${par.filter((p) => p.code === grpc.status.OK).length} OK, batch sizes seen ${[...new Set(batches)].sort((a, b) => a - b)}`);
  }

  if (cls) {
    const info = (await unary(inf, 'GetModel', { name: cls.name })).resp.model;
    const r = await unary(inf, 'Classify', { model: cls.name, inputs: text, top_k: 3 });
    check(r.code === grpc.status.OK, `Classify ${cls.name}: ${codeName(r.code)} ${r.details}`);
    if (r.resp) {
      const k = Math.min(3, info.labels.length);
      const res = r.resp.results;
      check(res.length === 2 && res.every((x) => x.labels.length === k), `Classify top_k=3: ${res.map((x) => x.labels.length)} labels each (want ${k})`);
      const okScores = res.every((x) => x.labels.every((l, i) => l.score >= 0 && l.score <= 1 &&
        (i === 0 || l.score <= x.labels[i - 1].score + 1e-6) && info.labels.includes(l.label)));
      check(okScores, `Classify: known labels, probabilities sorted best first: ${res.map((x) => x.labels.map((l) => `${l.label}:${l.score.toFixed(3)}`).join(' ')).join(' | ')}`);
    }
  }

  // Translate: OK on a READY translation model; otherwise the status the repository implies.
  if (tr) {
    const r = await unary(inf, 'Translate', { model: tr.name, inputs: ['The package contains documentation.'], beam_size: 1 });
    check(r.code === grpc.status.OK && r.resp.translations.length === 1 && r.resp.translations[0].length > 0,
          `Translate ${tr.name}: ${codeName(r.code)} ${r.resp ? JSON.stringify(r.resp.translations) : r.details}`);
  } else {
    const listed = models.find((m) => m.name === 'translate-en-de');
    const want = listed ? grpc.status.UNAVAILABLE : grpc.status.NOT_FOUND;
    const r = await unary(inf, 'Translate', { model: 'translate-en-de', inputs: ['Hello'] });
    check(r.code === want || (listed && r.code === grpc.status.FAILED_PRECONDITION),
          `Translate translate-en-de (${listed ? 'listed, ' + listed.state : 'not in this repository'}): ${codeName(r.code)} ${r.details}`);
  }
  if (emb) {
    const r = await unary(inf, 'Translate', { model: emb.name, inputs: ['Hello'] });
    check(r.code === grpc.status.FAILED_PRECONDITION, `Translate on an embedding model: ${codeName(r.code)} (want FAILED_PRECONDITION)`);
  }
  return { emb, cls };
}

async function reflectionChecks(target) {
  const refl = new Reflection(target, grpc.credentials.createInsecure());
  const [list] = await reflect(refl, [{ list_services: '' }]);
  const names = (list.list_services_response ? list.list_services_response.service : []).map((s) => s.name);
  check(names.includes('odeserve.v1.Inference') && names.includes('grpc.health.v1.Health'),
        `reflection list_services: ${names.join(', ')}`);

  // Fetch odeserve.v1.Inference's file (and what it imports), rebuild the types with protobufjs
  // from those descriptors alone, and make a call with them: what grpcurl does.
  const files = new Map();
  let pending = [{ file_containing_symbol: 'odeserve.v1.Inference' }];
  for (let round = 0; round < 4 && pending.length; round++) {
    const resps = await reflect(refl, pending);
    pending = [];
    for (const r of resps) {
      if (!r.file_descriptor_response) { check(false, `reflection error: ${JSON.stringify(r.error_response)}`); continue; }
      for (const buf of r.file_descriptor_response.file_descriptor_proto) {
        const fd = descriptorExt.FileDescriptorProto.decode(buf);
        if (!files.has(fd.name)) files.set(fd.name, fd);
      }
    }
    for (const fd of files.values()) {
      for (const dep of fd.dependency || []) {
        if (!files.has(dep) && !pending.some((p) => p.file_by_filename === dep)) pending.push({ file_by_filename: dep });
      }
    }
  }
  const inferenceFile = [...files.values()].find((f) => f.package === 'odeserve.v1' &&
                                                       (f.service || []).some((s) => s.name === 'Inference'));
  const svc = inferenceFile && inferenceFile.service.find((s) => s.name === 'Inference');
  const methods = svc ? svc.method.map((m) => m.name) : [];
  check(['Embed', 'Classify', 'Translate', 'ListModels', 'GetModel'].every((m) => methods.includes(m)),
        `reflection file_containing_symbol: ${[...files.keys()].join(', ')}; Inference methods ${methods.join(', ')}`);
  if (!svc) { refl.close(); return; }
  const root = protobuf.Root.fromDescriptor({ file: [...files.values()] });
  const Req = root.lookupType('odeserve.v1.ListModelsRequest');
  const Resp = root.lookupType('odeserve.v1.ListModelsResponse');
  const Dyn = grpc.makeGenericClientConstructor({
    ListModels: { path: '/odeserve.v1.Inference/ListModels', requestStream: false, responseStream: false,
                  requestSerialize: (o) => Buffer.from(Req.encode(Req.fromObject(o)).finish()),
                  responseDeserialize: (b) => Resp.toObject(Resp.decode(b), { enums: String }) },
  }, 'Inference');
  const dyn = new Dyn(target, grpc.credentials.createInsecure());
  const r = await unary(dyn, 'ListModels', {});
  check(r.code === grpc.status.OK && r.resp.models.length > 0,
        `ListModels through reflected descriptors only: ${r.resp ? r.resp.models.map((m) => m.name).join(', ') : codeName(r.code)}`);
  dyn.close();
  refl.close();
}

function makeCerts(dir) {
  const run = (...a) => execFileSync('openssl', a, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=odeserve-test-ca',
      '-keyout', 'ca.key', '-out', 'ca.crt');
  fs.writeFileSync(path.join(dir, 'san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  for (const who of ['server', 'client']) {
    run('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=odeserve-${who}`, '-keyout', `${who}.key`, '-out', `${who}.csr`);
    run('x509', '-req', '-in', `${who}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
        ...(who === 'server' ? ['-extfile', 'san.ext'] : []), '-out', `${who}.crt`);
  }
  const rd = (f) => fs.readFileSync(path.join(dir, f));
  return { ca: rd('ca.crt'), serverCrt: rd('server.crt'), clientCrt: rd('client.crt'), clientKey: rd('client.key') };
}

async function secureChecks(emb) {
  // Second server: mutual TLS + bearer tokens, health exempt from auth (the default).
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'odeserve-tls-'));
  let certs;
  try { certs = makeCerts(dir); } catch (e) { check(false, `openssl could not make test certificates: ${e.message}`); return; }
  const token = 'interop-token-' + process.pid;
  fs.writeFileSync(path.join(dir, 'tokens'), `${token}\n`);
  const srv = await new ServerProc([`--tls_cert=${dir}/server.crt`, `--tls_key=${dir}/server.key`,
    `--tls_client_ca=${dir}/ca.crt`, `--auth_tokens_file=${dir}/tokens`], logPath + '.secure').start();
  const mtls = grpc.credentials.createSsl(certs.ca, certs.clientKey, certs.clientCrt);
  const opts = { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' };
  try {
    const health = new Health(srv.target, mtls, opts);
    await waitServing(health, 'odeserve.v1.Inference', srv);
    check(true, 'mTLS server: health SERVING over mutual TLS without a token (health is exempt from auth)');
    const inf = new Inference(srv.target, mtls, opts);
    const noTok = await unary(inf, 'ListModels', {});
    check(noTok.code === grpc.status.UNAUTHENTICATED, `mTLS, no token: ${codeName(noTok.code)} (want UNAUTHENTICATED)`);
    const bad = new grpc.Metadata(); bad.set('authorization', 'Bearer wrong');
    const badTok = await unary(inf, 'ListModels', {}, { metadata: bad });
    check(badTok.code === grpc.status.UNAUTHENTICATED, `mTLS, wrong token: ${codeName(badTok.code)} (want UNAUTHENTICATED)`);
    const good = new grpc.Metadata(); good.set('authorization', `Bearer ${token}`);
    const ok1 = await unary(inf, 'ListModels', {}, { metadata: good });
    check(ok1.code === grpc.status.OK, `mTLS + token ListModels: ${codeName(ok1.code)} ${ok1.details}`);
    // RFC 7235: the scheme is case-insensitive, the token is not.
    const lower = new grpc.Metadata(); lower.set('authorization', `bearer ${token}`);
    const ok2 = await unary(inf, 'ListModels', {}, { metadata: lower });
    check(ok2.code === grpc.status.OK, `mTLS + token with the scheme in lower case: ${codeName(ok2.code)} ${ok2.details}`);
    const upperTok = new grpc.Metadata(); upperTok.set('authorization', `Bearer ${token.toUpperCase()}`);
    const badCase = await unary(inf, 'ListModels', {}, { metadata: upperTok });
    check(badCase.code === grpc.status.UNAUTHENTICATED, `mTLS, token in another case: ${codeName(badCase.code)} (want UNAUTHENTICATED)`);
    if (emb) {
      const e = await unary(inf, 'Embed', { model: emb.name, inputs: ['secure call'] }, { metadata: good });
      check(e.code === grpc.status.OK, `mTLS + token Embed: ${codeName(e.code)} ${e.details}`);
    }
    inf.close(); health.close();
    const noCert = new Inference(srv.target, grpc.credentials.createSsl(certs.ca), opts);
    const r1 = await unary(noCert, 'ListModels', {}, { metadata: good, timeoutMs: 5000 });
    check(r1.code !== grpc.status.OK, `TLS without a client certificate: ${codeName(r1.code)} (refused)`);
    noCert.close();
    const plain = new Inference(srv.target, grpc.credentials.createInsecure());
    const r2 = await unary(plain, 'ListModels', {}, { metadata: good, timeoutMs: 5000 });
    check(r2.code !== grpc.status.OK, `plaintext client against TLS: ${codeName(r2.code)} (refused)`);
    plain.close();
  } catch (e) {
    check(false, `secure server: ${e.message}`);
  } finally {
    srv.proc.kill('SIGTERM');
    const ex = await Promise.race([srv.exited, sleep(60000).then(() => ({ code: 'timeout' }))]);
    if (ex.code !== 0) console.log(srv.tail());
    srv.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function drainCheck(srv, inf, health, emb, info) {
  // SIGTERM while calls are in flight: Watch sees NOT_SERVING, calls accepted before it finish
  // OK, a call made during the drain gets UNAVAILABLE, and the process exits 0.
  const statuses = [];
  const watch = health.Watch({ service: 'odeserve.v1.Inference' });
  const sawNotServing = new Promise((resolve) => {
    watch.on('data', (m) => { statuses.push(m.status); if (m.status === 'NOT_SERVING') resolve(true); });
    watch.on('error', () => resolve(false));
    watch.on('end', () => resolve(false));
  });
  await sleep(300);
  let pending = 0;
  const burst = [];
  if (emb) {
    // Enough work to keep the server draining for a while: the model's largest batches at the
    // most expensive solver and step count.
    const n = Math.max(1, Math.min(info.max_inputs_per_request || 8, 32));
    const inputs = Array.from({ length: n }, (_, i) => `draining call input ${i} `.repeat(4));
    const rk4 = info.solvers.includes('RK4') ? 'RK4' : info.solvers[info.solvers.length - 1];
    for (let i = 0; i < 12; i++) {
      pending++;
      burst.push(unary(inf, 'Embed', { model: emb.name, inputs, truncate: true,
                                       compute: { steps: info.max_steps, solver: rk4 } })
        .then((r) => { pending--; r.at = Date.now(); return r; }));
    }
  }
  await sleep(50);
  const t0 = Date.now();
  srv.proc.kill('SIGTERM');
  const seen = await Promise.race([sawNotServing, sleep(10000).then(() => false)]);
  check(seen, `SIGTERM: Watch(odeserve.v1.Inference) went ${statuses.join(' -> ')}`);
  watch.cancel();  // as a client would: the server need not wait for this stream
  const stillPending = pending;
  const during = await unary(inf, 'ListModels', {}, { timeoutMs: 3000 });
  if (stillPending > 0) {
    check(during.code === grpc.status.UNAVAILABLE,
          `SIGTERM: a new call while ${stillPending} calls were in flight gets ${codeName(during.code)} (want UNAVAILABLE)`);
  } else {
    console.log(`note SIGTERM: every call had finished before the probe; a new call got ${codeName(during.code)}`);
  }
  const results = await Promise.all(burst);
  const byCode = {};
  for (const r of results) byCode[codeName(r.code)] = (byCode[codeName(r.code)] || 0) + 1;
  const okAfter = results.filter((r) => r.code === grpc.status.OK && r.at >= t0).length;
  // OK: accepted and finished (some after SIGTERM: the drain let them finish); UNAVAILABLE:
  // arrived after SIGTERM; RESOURCE_EXHAUSTED: refused by a full queue before it. Nothing else.
  const allowed = [grpc.status.OK, grpc.status.UNAVAILABLE, grpc.status.RESOURCE_EXHAUSTED];
  check(results.every((r) => allowed.includes(r.code)) && (stillPending === 0 || okAfter > 0),
        `SIGTERM: the ${results.length} calls of the burst ended ${JSON.stringify(byCode)}, ${okAfter} OK after SIGTERM`);
  const ex = await Promise.race([srv.exited, sleep(60000).then(() => ({ code: 'timeout' }))]);
  check(ex.code === 0, `SIGTERM: exit ${ex.code}${ex.sig ? ' ' + ex.sig : ''} after ${((Date.now() - t0) / 1000).toFixed(1)}s (want 0)`);
}

async function main() {
  const srv = await new ServerProc().start();
  const creds = grpc.credentials.createInsecure();
  const health = new Health(srv.target, creds);
  const inf = new Inference(srv.target, creds);
  try {
    const t0 = Date.now();
    await waitServing(health, '', srv);
    await waitServing(health, 'odeserve.v1.Inference', srv);
    check(true, `health Check "" and odeserve.v1.Inference SERVING after ${((Date.now() - t0) / 1000).toFixed(1)}s`);
    check(await watchFirst(health, 'odeserve.v1.Inference') === 'SERVING', 'health Watch(odeserve.v1.Inference) first message SERVING');
    const unk = await unary(health, 'Check', { service: 'no.such.Service' });
    check(unk.code === grpc.status.NOT_FOUND, `health Check unknown service: ${codeName(unk.code)} (want NOT_FOUND)`);
    const wunk = await watchFirst(health, 'no.such.Service');
    check(wunk === 'SERVICE_UNKNOWN', `health Watch unknown service: ${wunk} (want SERVICE_UNKNOWN)`);

    const lm = await unary(inf, 'ListModels', {});
    const models = lm.resp ? lm.resp.models : [];
    check(lm.code === grpc.status.OK && models.length > 0,
          `ListModels: ${models.map((m) => `${m.name}(${m.task},${m.state})`).join(', ')}`);
    const { emb } = await inferenceChecks(inf, health, models);
    try { await reflectionChecks(srv.target); } catch (e) { check(false, `reflection: ${codeName(e.code)} ${e.details || e.message}`); }
    if (args.skip_secure === undefined) await secureChecks(emb);
    const embInfo = emb ? (await unary(inf, 'GetModel', { name: emb.name })).resp.model : null;
    await drainCheck(srv, inf, health, emb, embInfo);
  } catch (e) {
    check(false, `${e.stack || e}`);
  } finally {
    inf.close(); health.close();
    srv.kill();
  }
  if (failures) console.log(`--- server log (${logPath}) ---\n${srv.tail(40)}`);
  for (const f of failed) console.log(`failed: ${f}`);
  console.log(`${failures} failed`);
  process.exit(failures ? 1 : 0);
}

main();
