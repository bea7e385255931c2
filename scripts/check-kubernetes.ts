/**
 * `make k8s-check`: renders every kustomization under deploy/kubernetes/ (the base and each overlay)
 * and checks what it renders, since no cluster is reachable from CI.
 *
 *   node scripts/check-kubernetes.ts [deploy/kubernetes]
 *
 * 1. Rendering. No kustomize runs from the npm registry, so this file renders the subset of
 *    kustomize the manifests use (resources, namespace, images, JSON 6902 patches) and refuses any
 *    other field of a kustomization.yaml. Where a `kubectl` is on PATH (its built-in kustomize), each
 *    rendering is also compared with `kubectl kustomize`'s and must be the same set of objects.
 * 2. Schemas: every object against the Kubernetes OpenAPI schemas of `kubernetes-models` (types,
 *    formats, required fields), and through TypeScript's excess-property check against the same
 *    package's types, which refuses an unknown field at any depth (a misspelt `readinesProbe` would
 *    otherwise be dropped by the API server without a word) — kubeconform's `-strict`.
 * 3. The service's own rules (RULES below): probes, roles, migrations, shutdown, settings.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { parseAllDocuments } from 'yaml';
import { configSchema } from '../src/config.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a Kubernetes object of any kind, read from YAML
type K8sObject = Record<string, any>;

export interface Rendering {
  /** The kustomization's folder, relative to the root checked. */
  name: string;
  objects: K8sObject[];
}

/** The Secret every workload reads; made apart from the manifests (secret.example.env lists its keys). */
export const SECRET_NAME = 'model-deployment-secrets';
/** The label of what `kubectl apply -l` applies before the rollout: the migration Job and what it needs. */
export const PHASE_LABEL = 'model-deployment-service/rollout-phase';
/**
 * Settings of src/config.ts that configure only a local stand-in: the embedded Postgres, which the
 * service uses only without DATABASE_URL, which every deployment sets. (`make run`'s other
 * stand-ins are configured in dev/config.ts, which production never reads.)
 */
export const LOCAL_ONLY_SETTINGS: readonly string[] = ['DATA_DIR', 'EMBEDDED_PG_PORT'];
/** Set by each workload itself, not by the ConfigMap. */
const PER_WORKLOAD_SETTINGS = ['ROLE'];
/** Settings the manifests may set ahead of their setting in src/config.ts (the metrics server's). */
const ANNOUNCED_SETTINGS = ['METRICS_PORT'];
const SECRET_SETTING = /SECRET|PASSWORD|TOKEN|DATABASE_URL|SMTP_URL|PRIVATE_KEY/;

export const RULES = [
  'every object is valid against the Kubernetes schemas, with no unknown field',
  'no two objects share a kind and name',
  'a Deployment\'s selector matches its pod template; a Service, PodDisruptionBudget and HorizontalPodAutoscaler each reach a Deployment',
  'every container: a pinned image in an overlay, requests of CPU and memory and a memory limit, non-root, no privilege escalation, a read-only root filesystem',
  'every ConfigMap and Secret a container reads exists, or is the Secret made apart',
  'the api Deployment: ROLE=api, readiness on /readyz and liveness on /healthz at the `http` port (PORT), a `metrics` port and scrape annotation at METRICS_PORT, no replicas field (the HPA\'s), a preStop pause',
  'the worker Deployment: ROLE=worker, liveness on the `metrics` port',
  'both Deployments: terminationGracePeriodSeconds above the preStop pause plus twice SHUTDOWN_TIMEOUT_MS',
  'a migration Job (node dist/cli/migrate.js, restartPolicy Never) labeled for the first apply, with everything it reads',
  'the ConfigMap: MIGRATE_ON_START=false, no secret, only known settings; with secret.example.env it covers every setting of src/config.ts but the local stand-ins\' and ROLE',
] as const;

// ---- rendering

const KUSTOMIZATION_FIELDS = new Set(['apiVersion', 'kind', 'resources', 'namespace', 'images', 'patches']);
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PersistentVolume', 'StorageClass', 'PriorityClass']);

interface Kustomization {
  resources?: string[];
  namespace?: string;
  images?: { name: string; newName?: string; newTag?: string; digest?: string }[];
  patches?: { path: string; target: { kind: string; name: string } }[];
}

function readYaml(file: string): K8sObject[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((document) => {
      if (document.errors.length) throw new Error(`${file}: ${document.errors[0]?.message}`);
      return document.toJS() as K8sObject | null;
    })
    .filter((object): object is K8sObject => object !== null);
}

/** The objects a kustomization renders, as `kustomize build` would for the fields it allows. */
export function renderKustomization(directory: string): K8sObject[] {
  const file = path.join(directory, 'kustomization.yaml');
  const [kustomization] = readYaml(file) as [Kustomization & Record<string, unknown>];
  const unknown = Object.keys(kustomization).filter((key) => !KUSTOMIZATION_FIELDS.has(key));
  if (unknown.length) throw new Error(`${file}: ${unknown.join(', ')}: not rendered by scripts/check-kubernetes.ts (use resources, namespace, images, patches)`);

  const objects: K8sObject[] = [];
  for (const resource of kustomization.resources ?? []) {
    const target = path.join(directory, resource);
    objects.push(...(statSync(target).isDirectory() ? renderKustomization(target) : readYaml(target)));
  }
  for (const patch of kustomization.patches ?? []) {
    const operations = readYaml(path.join(directory, patch.path))[0];
    if (!Array.isArray(operations)) throw new Error(`${path.join(directory, patch.path)}: not a JSON 6902 patch (a list of operations)`);
    const targets = objects.filter((object) => object.kind === patch.target.kind && object.metadata?.name === patch.target.name);
    if (!targets.length) throw new Error(`${file}: patch ${patch.path} targets no object (${patch.target.kind}/${patch.target.name})`);
    for (const object of targets) applyJsonPatch(object, operations as JsonPatchOperation[], patch.path);
  }
  if (kustomization.namespace) {
    for (const object of objects) {
      if (!CLUSTER_SCOPED.has(object.kind)) object.metadata = { ...object.metadata, namespace: kustomization.namespace };
    }
  }
  for (const image of kustomization.images ?? []) {
    for (const container of objects.flatMap(containersOf)) {
      const [name, tag] = splitImage(container.image);
      if (name !== image.name) continue;
      const newName = image.newName ?? name;
      container.image = image.digest ? `${newName}@${image.digest}` : image.newTag ? `${newName}:${image.newTag}` : tag ? `${newName}:${tag}` : newName;
    }
  }
  return objects;
}

interface JsonPatchOperation {
  op: 'add' | 'remove' | 'replace' | 'test';
  path: string;
  value?: unknown;
}

/** RFC 6902 add, remove, replace and test, in place. */
export function applyJsonPatch(object: K8sObject, operations: JsonPatchOperation[], source: string): void {
  for (const operation of operations) {
    const keys = operation.path.split('/').slice(1).map((key) => key.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = keys.pop();
    let parent: K8sObject = object;
    for (const key of keys) {
      parent = parent?.[key];
      if (parent === undefined || parent === null) throw new Error(`${source}: ${operation.op} ${operation.path}: no such path`);
    }
    if (last === undefined) throw new Error(`${source}: ${operation.op} on the whole object`);
    const index = Array.isArray(parent) ? (last === '-' ? parent.length : Number(last)) : undefined;
    if (operation.op !== 'add' && !(Array.isArray(parent) ? index !== undefined && index < parent.length : last in parent)) {
      throw new Error(`${source}: ${operation.op} ${operation.path}: no such path`);
    }
    switch (operation.op) {
      case 'add':
        if (Array.isArray(parent)) parent.splice(index ?? parent.length, 0, operation.value);
        else parent[last] = operation.value;
        break;
      case 'replace':
        parent[Array.isArray(parent) ? (index ?? 0) : last] = operation.value;
        break;
      case 'remove':
        if (Array.isArray(parent)) parent.splice(index ?? 0, 1);
        else Reflect.deleteProperty(parent, last);
        break;
      case 'test':
        if (JSON.stringify(parent[last]) !== JSON.stringify(operation.value)) throw new Error(`${source}: test ${operation.path} failed`);
        break;
      default:
        throw new Error(`${source}: the operation ${String((operation as { op: unknown }).op)} is not rendered here`);
    }
  }
}

function splitImage(image: string): [string, string | undefined] {
  const at = image.indexOf('@');
  if (at >= 0) return [image.slice(0, at), image.slice(at)];
  const colon = image.lastIndexOf(':');
  return colon > image.lastIndexOf('/') ? [image.slice(0, colon), image.slice(colon + 1)] : [image, undefined];
}

function podSpecOf(object: K8sObject): K8sObject | undefined {
  if (object.kind === 'Deployment' || object.kind === 'Job' || object.kind === 'StatefulSet' || object.kind === 'DaemonSet') return object.spec?.template?.spec;
  if (object.kind === 'CronJob') return object.spec?.jobTemplate?.spec?.template?.spec;
  return undefined;
}

function containersOf(object: K8sObject): K8sObject[] {
  const spec = podSpecOf(object);
  return [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])];
}

/** Every kustomization folder under the root: the base and each overlay. */
export function renderAll(root: string): Rendering[] {
  const folders: string[] = [];
  const walk = (directory: string) => {
    if (existsSync(path.join(directory, 'kustomization.yaml'))) folders.push(directory);
    for (const entry of readdirSync(directory, { withFileTypes: true })) if (entry.isDirectory()) walk(path.join(directory, entry.name));
  };
  walk(root);
  return folders.sort().map((folder) => ({ name: path.relative(root, folder), objects: renderKustomization(folder) }));
}

// ---- schemas

const keyOf = (object: K8sObject) => `${object.kind}/${object.metadata?.name ?? '?'}`;

function modelPath(object: K8sObject): string {
  const [group, version] = String(object.apiVersion).includes('/') ? String(object.apiVersion).split('/') : ['', String(object.apiVersion)];
  return `kubernetes-models/${group ? `${group}/` : ''}${version}/${object.kind}`;
}

/** kubernetes-models' validator (the Kubernetes OpenAPI schemas): one message per invalid object. */
export async function schemaProblems(objects: K8sObject[]): Promise<string[]> {
  const problems: string[] = [];
  for (const object of objects) {
    try {
      const module = (await import(modelPath(object))) as Record<string, new (data: K8sObject) => { validate(): void }>;
      const Model = module[object.kind];
      if (!Model) throw new Error(`no model ${object.kind} in ${modelPath(object)}`);
      new Model(object).validate();
    } catch (error) {
      problems.push(`${keyOf(object)}: ${error instanceof Error ? error.message.split('\n').slice(0, 6).join(' ') : String(error)}`);
    }
  }
  return problems;
}

/**
 * Unknown fields, at any depth: each object becomes a typed object literal in a virtual TypeScript
 * file (`const o: IDeployment = {…}`), which the compiler checks for excess properties and types.
 */
export function unknownFieldProblems(objects: K8sObject[], fromDirectory = process.cwd()): string[] {
  const file = path.join(fromDirectory, '__manifests__.ts');
  const lines: string[] = [];
  const spans: { object: K8sObject; first: number; last: number }[] = [];
  objects.forEach((object, index) => {
    const type = `I${object.kind}`;
    lines.push(`import type { ${type} as T${index} } from '${modelPath(object)}';`);
  });
  objects.forEach((object, index) => {
    const body = JSON.stringify(object, null, 2).split('\n');
    spans.push({ object, first: lines.length + 1, last: lines.length + body.length });
    lines.push(`export const o${index}: T${index} = ${body[0]}`, ...body.slice(1));
  });
  const source = lines.join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, languageVersion, ...rest) =>
    path.resolve(name) === file ? ts.createSourceFile(name, source, languageVersion) : getSourceFile(name, languageVersion, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => path.resolve(name) === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((diagnostic) => {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ');
    if (!diagnostic.file || path.resolve(diagnostic.file.fileName) !== file || diagnostic.start === undefined) return message;
    const line = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line + 1;
    const span = spans.find((candidate) => line >= candidate.first && line <= candidate.last);
    return `${span ? keyOf(span.object) : 'manifests'}: ${lines[line - 1]?.trim()} — ${message}`;
  });
}

// ---- the service's rules

/** The settings of the service: the names of the schema in src/config.ts (docs/configuration.md is generated from it). */
export function configSettings(): string[] {
  return Object.keys(configSchema.shape);
}

/** The keys of an env file (`KEY=value` lines). */
export function envFileKeys(text: string): string[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => line.split('=')[0] ?? '');
}

function labelsMatch(selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  return Boolean(selector && Object.keys(selector).length && Object.entries(selector).every(([key, value]) => labels?.[key] === value));
}

function envValue(container: K8sObject, name: string): string | undefined {
  return (container.env as { name: string; value?: string }[] | undefined)?.find((variable) => variable.name === name)?.value;
}

function portNumber(container: K8sObject, name: string): number | undefined {
  return (container.ports as { name?: string; containerPort: number }[] | undefined)?.find((port) => port.name === name)?.containerPort;
}

export function serviceProblems(rendering: Rendering, context: { settings: string[]; secretKeys: string[] }): string[] {
  const problems: string[] = [];
  const { objects } = rendering;
  const report = (object: K8sObject | undefined, message: string) => problems.push(`${object ? keyOf(object) : rendering.name}: ${message}`);
  const isOverlay = rendering.name.startsWith('overlays');

  const seen = new Set<string>();
  for (const object of objects) {
    if (seen.has(keyOf(object))) report(object, 'defined twice');
    seen.add(keyOf(object));
  }

  const byKind = (kind: string) => objects.filter((object) => object.kind === kind);
  const deployments = byKind('Deployment');
  const component = (name: string) => objects.find((object) => object.kind !== 'Service' && object.kind !== 'PodDisruptionBudget' && object.kind !== 'HorizontalPodAutoscaler' && object.metadata?.labels?.['app.kubernetes.io/component'] === name);
  const configMaps = byKind('ConfigMap');
  const config = configMaps.find((object) => object.metadata?.name === 'model-deployment-config');
  const data = (config?.data ?? {}) as Record<string, string>;
  if (!config) report(undefined, 'no ConfigMap model-deployment-config');

  for (const deployment of deployments) {
    if (!labelsMatch(deployment.spec?.selector?.matchLabels, deployment.spec?.template?.metadata?.labels)) report(deployment, 'selector does not match the pod template labels');
  }
  for (const object of [...byKind('Service'), ...byKind('PodDisruptionBudget')]) {
    const selector = object.kind === 'Service' ? object.spec?.selector : object.spec?.selector?.matchLabels;
    const reached = deployments.filter((deployment) => labelsMatch(selector, deployment.spec?.template?.metadata?.labels));
    if (reached.length !== 1) report(object, `selects the pods of ${reached.length} Deployments, not 1`);
    if (object.kind === 'Service') {
      for (const port of object.spec?.ports ?? []) {
        if (typeof port.targetPort === 'string' && !reached.some((deployment) => containersOf(deployment).some((container) => portNumber(container, port.targetPort) !== undefined))) {
          report(object, `targetPort ${port.targetPort} is no container port of the pods it selects`);
        }
      }
    }
  }
  for (const hpa of byKind('HorizontalPodAutoscaler')) {
    const target = hpa.spec?.scaleTargetRef;
    const deployment = deployments.find((candidate) => target?.kind === 'Deployment' && candidate.metadata?.name === target?.name);
    if (!deployment) report(hpa, `scales ${target?.kind}/${target?.name}, which is not here`);
    else if (deployment.spec?.replicas !== undefined) report(deployment, 'sets replicas while a HorizontalPodAutoscaler scales it (every apply would reset its count)');
    if (!(hpa.spec?.metrics ?? []).some((metric: K8sObject) => metric.type === 'Resource' && metric.resource?.name === 'cpu')) report(hpa, 'does not scale on CPU');
  }

  for (const workload of objects.filter((object) => podSpecOf(object))) {
    const spec = podSpecOf(workload) as K8sObject;
    for (const container of containersOf(workload)) {
      const where = `container ${container.name}`;
      const [, tag] = splitImage(String(container.image));
      if (isOverlay && (!tag || tag === 'latest')) report(workload, `${where}: image ${container.image} is not pinned to a tag or digest`);
      if (!container.resources?.requests?.cpu || !container.resources?.requests?.memory || !container.resources?.limits?.memory) {
        report(workload, `${where}: needs requests of cpu and memory and a memory limit`);
      }
      const security = { ...spec.securityContext, ...container.securityContext };
      if (security.runAsNonRoot !== true) report(workload, `${where}: runAsNonRoot is not true`);
      if (container.securityContext?.allowPrivilegeEscalation !== false) report(workload, `${where}: allowPrivilegeEscalation is not false`);
      if (container.securityContext?.readOnlyRootFilesystem !== true) report(workload, `${where}: readOnlyRootFilesystem is not true`);
      for (const source of container.envFrom ?? []) {
        if (source.configMapRef && !configMaps.some((map) => map.metadata?.name === source.configMapRef.name)) report(workload, `${where}: reads the ConfigMap ${source.configMapRef.name}, which is not here`);
        if (source.secretRef && source.secretRef.name !== SECRET_NAME && !byKind('Secret').some((secret) => secret.metadata?.name === source.secretRef.name)) {
          report(workload, `${where}: reads the Secret ${source.secretRef.name}, which is neither here nor ${SECRET_NAME}`);
        }
      }
      const reads = (container.envFrom ?? []).map((source: K8sObject) => source.configMapRef?.name ?? source.secretRef?.name);
      if (!reads.includes('model-deployment-config') || !reads.includes(SECRET_NAME)) report(workload, `${where}: does not read both model-deployment-config and ${SECRET_NAME}`);
    }
  }

  const shutdownSeconds = Number(data.SHUTDOWN_TIMEOUT_MS || 15_000) / 1000;
  const api = component('api');
  const worker = component('worker');
  for (const [deployment, role] of [
    [api, 'api'],
    [worker, 'worker'],
  ] as const) {
    if (!deployment) {
      report(undefined, `no ${role} Deployment`);
      continue;
    }
    const container = containersOf(deployment)[0] ?? {};
    if (envValue(container, 'ROLE') !== role) report(deployment, `ROLE is not ${role}`);
    const preStop = Number(container.lifecycle?.preStop?.exec?.command?.[0] === 'sleep' ? container.lifecycle.preStop.exec.command[1] : (container.lifecycle?.preStop?.sleep?.seconds ?? 0));
    const grace = deployment.spec?.template?.spec?.terminationGracePeriodSeconds ?? 30;
    if (!(grace > preStop + 2 * shutdownSeconds)) {
      report(deployment, `terminationGracePeriodSeconds ${grace} is not above the preStop pause (${preStop} s) plus twice SHUTDOWN_TIMEOUT_MS (${shutdownSeconds} s)`);
    }
    if (data.METRICS_PORT && portNumber(container, 'metrics') !== Number(data.METRICS_PORT)) report(deployment, `the metrics port is not METRICS_PORT (${data.METRICS_PORT})`);
    const scrapePort = deployment.spec?.template?.metadata?.annotations?.['prometheus.io/port'];
    if (scrapePort !== undefined && scrapePort !== data.METRICS_PORT) report(deployment, `the prometheus.io/port annotation (${scrapePort}) is not METRICS_PORT (${data.METRICS_PORT ?? 'unset'})`);
    if (role === 'api') {
      if (portNumber(container, 'http') !== Number(data.PORT || 8080)) report(deployment, `the http port is not PORT (${data.PORT || 8080})`);
      if (container.readinessProbe?.httpGet?.path !== '/readyz' || container.readinessProbe?.httpGet?.port !== 'http') report(deployment, 'readiness is not GET /readyz on port http');
      if (container.livenessProbe?.httpGet?.path !== '/healthz' || container.livenessProbe?.httpGet?.port !== 'http') report(deployment, 'liveness is not GET /healthz on port http');
      if (!preStop) report(deployment, 'no preStop pause: load balancers would still send connections to a stopping pod');
    } else if (container.livenessProbe?.httpGet?.port !== 'metrics') {
      report(deployment, 'liveness is not on the metrics port');
    }
  }

  const jobs = byKind('Job').filter((job) => containersOf(job).some((container) => (container.command ?? []).includes('dist/cli/migrate.js')));
  if (jobs.length !== 1) report(undefined, `${jobs.length} migration Jobs (node dist/cli/migrate.js), not 1`);
  for (const job of jobs) {
    if (job.metadata?.labels?.[PHASE_LABEL] !== 'migrate') report(job, `not labeled ${PHASE_LABEL}=migrate (applied before the rollout)`);
    if (job.spec?.template?.spec?.restartPolicy !== 'Never') report(job, 'restartPolicy is not Never (failed attempts are counted by backoffLimit)');
    const needs = [
      ...containersOf(job).flatMap((container) => (container.envFrom ?? []).map((source: K8sObject) => (source.configMapRef ? `ConfigMap/${source.configMapRef.name}` : undefined))),
      `ServiceAccount/${job.spec?.template?.spec?.serviceAccountName ?? 'default'}`,
      ...byKind('Namespace').map(keyOf),
    ].filter((key): key is string => Boolean(key) && key !== 'ServiceAccount/default');
    for (const key of needs) {
      const needed = objects.find((object) => keyOf(object) === key);
      if (needed && needed.metadata?.labels?.[PHASE_LABEL] !== 'migrate') report(job, `needs ${key}, which is not labeled ${PHASE_LABEL}=migrate`);
    }
  }

  if (config) {
    if (data.MIGRATE_ON_START !== 'false') report(config, 'MIGRATE_ON_START is not "false": replicas would race the migration Job');
    const known = new Set([...context.settings, ...ANNOUNCED_SETTINGS]);
    for (const key of Object.keys(data)) {
      if (!known.has(key)) report(config, `${key} is no setting of src/config.ts`);
      if (SECRET_SETTING.test(key) && key !== 'STRIPE_PUBLISHABLE_KEY') report(config, `${key} is a secret: it belongs in ${SECRET_NAME}`);
      if (context.secretKeys.includes(key)) report(config, `${key} is also a key of ${SECRET_NAME}`);
    }
    const covered = new Set([...Object.keys(data), ...context.secretKeys, ...LOCAL_ONLY_SETTINGS, ...PER_WORKLOAD_SETTINGS]);
    for (const setting of context.settings) if (!covered.has(setting)) report(config, `${setting} (a setting of src/config.ts) is in neither the ConfigMap nor ${SECRET_NAME}`);
  }
  return problems;
}

// ---- kubectl's kustomize, where there is one

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).sort(([a], [b]) => a.localeCompare(b)).map(([key, inner]) => [key, canonical(inner)]));
  return value;
}

const setOf = (objects: K8sObject[]) => objects.map((object) => JSON.stringify(canonical(object))).sort();

/** Differences from `kubectl kustomize`, or undefined when no kubectl is on PATH. */
function kubectlDifferences(folder: string, objects: K8sObject[]): string[] | undefined {
  let output: string;
  try {
    output = execFileSync('kubectl', ['kustomize', folder], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    return [`kubectl kustomize ${folder} failed: ${String((error as { stderr?: string }).stderr ?? error).trim()}`];
  }
  const theirs = setOf(parseAllDocuments(output).map((document) => document.toJS() as K8sObject));
  const ours = setOf(objects);
  const missing = theirs.filter((object) => !ours.includes(object));
  const extra = ours.filter((object) => !theirs.includes(object));
  return [...missing.map((object) => `only kubectl kustomize renders ${object.slice(0, 300)}`), ...extra.map((object) => `only this script renders ${object.slice(0, 300)}`)];
}

// ---- the command

if (import.meta.main) {
  const root = process.argv[2] ?? 'deploy/kubernetes';
  const context = { settings: configSettings(), secretKeys: envFileKeys(readFileSync(path.join(root, 'secret.example.env'), 'utf8')) };
  const renderings = renderAll(root);
  const problems: string[] = [];
  let compared = 0;
  let kubectl = true;
  for (const rendering of renderings) {
    const at = (message: string) => `${path.join(root, rendering.name)}: ${message}`;
    problems.push(...(await schemaProblems(rendering.objects)).map(at));
    problems.push(...unknownFieldProblems(rendering.objects).map(at));
    problems.push(...serviceProblems(rendering, context).map(at));
    const differences = kubectl ? kubectlDifferences(path.join(root, rendering.name), structuredClone(rendering.objects)) : undefined;
    if (differences === undefined) kubectl = false;
    else {
      compared++;
      problems.push(...differences.map(at));
    }
  }
  for (const problem of problems) process.stderr.write(`${problem}\n`);
  if (problems.length) process.exit(1);
  const objects = renderings.reduce((sum, rendering) => sum + rendering.objects.length, 0);
  process.stdout.write(
    `${root}: ${renderings.length} kustomizations (${renderings.map((rendering) => rendering.name).join(', ')}), ${objects} objects: ` +
      `valid against the Kubernetes schemas with no unknown field, and the ${RULES.length - 1} rules of the service; ` +
      (kubectl ? `each rendering equal to kubectl kustomize's (${compared})\n` : 'no kubectl on PATH: renderings not compared with kubectl kustomize\n'),
  );
}
