#!/usr/bin/env node
// Validates every Kubernetes object of deploy/ against the API's OpenAPI schemas
// (kubernetes-models, and @kubernetes-models/prometheus-operator for ServiceMonitor and
// PrometheusRule): field names, types (e.g. a grpc probe port must be an integer), required
// fields, enums. What `kubectl apply --dry-run=server` would reject, without a cluster.
//
//   node validate_k8s_schemas.mjs REPO_ROOT [NODE_MODULES_DIR]
// Raw files of deploy/base and deploy/monitoring are checked, and, when kubectl is installed,
// the rendered output of `kubectl kustomize` for deploy/base, deploy and deploy/overlays/gpu.
// Exit 0 valid, 1 invalid, 77 skipped (node_modules missing: npm ci --prefix tests/interop).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(process.argv[2] || '.');
const nm = path.resolve(process.argv[3] || path.join(root, 'tests/interop/node_modules'));
// ESM entry (index.mjs) when the package has one, else index.js; module namespace or CJS default.
const load = async (rel) => {
  const mjs = path.join(nm, rel.replace(/\.js$/, '.mjs'));
  const m = await import(pathToFileURL(fs.existsSync(mjs) ? mjs : path.join(nm, rel)).href);
  return m.default && Object.keys(m).length <= 2 && typeof m.default === 'object' ? { ...m.default, ...m } : m;
};

let YAML, core, apps, autoscaling, policy, monitoring;
try {
  YAML = (await load('yaml/dist/index.js')).default;
  core = await load('kubernetes-models/v1/index.js');
  apps = await load('kubernetes-models/apps/v1/index.js');
  autoscaling = await load('kubernetes-models/autoscaling/v2/index.js');
  policy = await load('kubernetes-models/policy/v1/index.js');
  monitoring = await load('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js');
} catch (e) {
  console.log(`SKIP: ${nm} lacks kubernetes-models/yaml (${e.code || e.message}); run: npm ci --prefix tests/interop`);
  process.exit(77);
}

const models = {
  'v1/ConfigMap': core.ConfigMap, 'v1/Service': core.Service, 'v1/ServiceAccount': core.ServiceAccount,
  'apps/v1/Deployment': apps.Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': autoscaling.HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': policy.PodDisruptionBudget,
  'monitoring.coreos.com/v1/ServiceMonitor': monitoring.ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': monitoring.PrometheusRule,
};

let failures = 0;
let validated = 0;
function validateDocs(where, docs) {
  for (const obj of docs) {
    if (!obj || typeof obj !== 'object') continue;
    const key = `${obj.apiVersion}/${obj.kind}`;
    const Model = models[key];
    const name = `${where}: ${obj.kind}/${obj.metadata && obj.metadata.name}`;
    if (!Model) { console.log(`FAIL ${name}: no schema for ${key}`); failures++; continue; }
    try {
      new Model(obj).validate();
      validated++;
    } catch (e) {
      console.log(`FAIL ${name}: ${e.message}`);
      failures++;
    }
  }
}

for (const dir of ['deploy/base', 'deploy/monitoring']) {
  for (const f of fs.readdirSync(path.join(root, dir)).sort()) {
    if (!/\.ya?ml$/.test(f) || f === 'kustomization.yaml') continue;
    const text = fs.readFileSync(path.join(root, dir, f), 'utf8');
    validateDocs(`${dir}/${f}`, YAML.parseAllDocuments(text).map((d) => d.toJS()));
  }
}
let kubectl = true;
for (const target of ['deploy/base', 'deploy', 'deploy/overlays/gpu']) {
  let out;
  try {
    out = execFileSync('kubectl', ['kustomize', path.join(root, target)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (e.code === 'ENOENT') { kubectl = false; break; }
    console.log(`FAIL kubectl kustomize ${target}: ${e.stderr || e.message}`);
    failures++;
    continue;
  }
  const docs = YAML.parseAllDocuments(out).map((d) => d.toJS());
  validateDocs(`${target} (rendered)`, docs);
  console.log(`${target} (rendered): ${docs.length} objects`);
}
if (!kubectl) console.log('note: kubectl not installed; rendered kustomizations not validated (raw files were)');
console.log(`${validated} objects valid against the Kubernetes / Prometheus Operator schemas, ${failures} invalid`);
process.exit(failures ? 1 : 0);
