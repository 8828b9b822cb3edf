#!/usr/bin/env node
// ONNX Runtime (onnxruntime-node, CPU execution provider) on a model exported by
// `python3 -m odeserve_models export-onnx`: runs each case of an inputs file once and prints
// (or writes) its outputs, or with --bench times each case. Used by tests/bench/test_onnx_export.py
// (parity with TorchScript) and tests/bench/side_by_side.py (the ORT column).
//
//   node tests/bench/ort/run.js --model M.onnx --inputs in.json [--output out.json]
//        [--threads 2] [--bench [--min_time 2] [--warmup 3] [--min_iters 5]] [--no_spin]
//        [--opt all|extended|basic|disabled] [--optimized_model PATH]
//
// in.json: {"cases": [{"name": "1x64", "feeds": {"ids":  {"type": "int64",   "dims": [1, 64], "data": [...]},
//                                                 "mask": {"type": "float32", "dims": [1, 64], "data": [...]}}}]}
// (data flat, row-major). out.json: {"cases": [{"name", "outputs": {NAME: {"dims", "data"}}}]}.
//
// stdout: one JSON object per line: first {"ort": version, "threads", ...}, then one per case
// ({"case", "outputs": {NAME: dims}} or, with --bench, {"case", "iterations", "mean_ms",
// "p50_ms", "min_ms", "rows_per_s"}; rows = the first dimension of the case's first feed).
// Exits 2 on a usage error, 3 when onnxruntime-node is not installed (the callers skip then).
'use strict';

const fs = require('fs');
const path = require('path');

function usage(message) {
  process.stderr.write(`run.js: ${message}\n` +
    'usage: node run.js --model M.onnx --inputs in.json [--output out.json] [--threads N] ' +
    '[--bench] [--min_time S] [--warmup N] [--min_iters N] [--no_spin] [--opt LEVEL] [--optimized_model PATH]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const a = {threads: 2, bench: false, min_time: 2, warmup: 3, min_iters: 5, spin: true, opt: 'all'};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    switch (arg) {
      case '--model': a.model = value(); break;
      case '--inputs': a.inputs = value(); break;
      case '--output': a.output = value(); break;
      case '--threads': a.threads = parseInt(value(), 10); break;
      case '--bench': a.bench = true; break;
      case '--min_time': a.min_time = parseFloat(value()); break;
      case '--warmup': a.warmup = parseInt(value(), 10); break;
      case '--min_iters': a.min_iters = parseInt(value(), 10); break;
      case '--no_spin': a.spin = false; break;
      case '--opt': a.opt = value(); break;
      case '--optimized_model': a.optimized_model = value(); break;
      case '-h': case '--help': usage('help'); break;
      default: usage(`unknown argument ${arg}`);
    }
  }
  if (!a.model || !a.inputs) usage('--model and --inputs are required');
  if (!(a.threads >= 1)) usage('--threads must be >= 1');
  return a;
}

function loadOrt() {
  try {
    return require('onnxruntime-node');
  } catch (e) {
    process.stderr.write(`run.js: onnxruntime-node is not installed (npm ci --prefix ${path.relative(process.cwd(), __dirname) || '.'}): ${e.message}\n`);
    process.exit(3);
  }
}

function toTensor(ort, name, spec) {
  const count = spec.dims.reduce((x, y) => x * y, 1);
  if (spec.data.length !== count) throw new Error(`feed ${name}: ${spec.data.length} values for dims [${spec.dims}]`);
  switch (spec.type) {
    case 'int64': return new ort.Tensor('int64', BigInt64Array.from(spec.data, (v) => BigInt(v)), spec.dims);
    case 'int32': return new ort.Tensor('int32', Int32Array.from(spec.data), spec.dims);
    case 'float32': return new ort.Tensor('float32', Float32Array.from(spec.data), spec.dims);
    default: throw new Error(`feed ${name}: unsupported type ${spec.type}`);
  }
}

function percentile(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function timeCase(session, feeds, a) {
  for (let i = 0; i < a.warmup; i++) await session.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  while (times.length < a.min_iters || Number(process.hrtime.bigint() - start) / 1e9 < a.min_time) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const sorted = [...times].sort((x, y) => x - y);
  const mean = times.reduce((x, y) => x + y, 0) / times.length;
  return {iterations: times.length, mean_ms: mean, p50_ms: percentile(sorted, 50), p99_ms: percentile(sorted, 99),
          min_ms: sorted[0]};
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ort = loadOrt();
  const input = JSON.parse(fs.readFileSync(a.inputs, 'utf8'));
  if (!Array.isArray(input.cases) || input.cases.length === 0) usage(`${a.inputs} has no "cases"`);
  const options = {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: a.opt,
    extra: {session: {intra_op: {allow_spinning: a.spin ? '1' : '0'}}},
  };
  if (a.optimized_model) options.optimizedModelFilePath = a.optimized_model;
  const session = await ort.InferenceSession.create(a.model, options);
  console.log(JSON.stringify({ort: ort.env.versions.node || ort.env.versions.common, model: a.model,
                              threads: a.threads, spin: a.spin, opt: a.opt, inputs: session.inputNames,
                              outputs: session.outputNames}));
  const written = [];
  for (const c of input.cases) {
    const feeds = {};
    for (const [name, spec] of Object.entries(c.feeds)) feeds[name] = toTensor(ort, name, spec);
    const result = await session.run(feeds);
    const outputs = {};
    const shapes = {};
    for (const name of session.outputNames) {
      outputs[name] = {dims: result[name].dims, data: Array.from(result[name].data)};
      shapes[name] = result[name].dims;
    }
    written.push({name: c.name, outputs});
    const line = {case: c.name, outputs: shapes};
    if (a.bench) {
      const rows = Object.values(c.feeds)[0].dims[0];
      const t = await timeCase(session, feeds, a);
      Object.assign(line, t, {rows, rows_per_s: rows / (t.mean_ms / 1000)});
    }
    console.log(JSON.stringify(line));
  }
  if (a.output) fs.writeFileSync(a.output, JSON.stringify({cases: written}));
}

main().catch((e) => {
  process.stderr.write(`run.js: ${e.stack || e}\n`);
  process.exit(1);
});
