import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  applyJsonPatch,
  configSettings,
  envFileKeys,
  LOCAL_ONLY_SETTINGS,
  renderKustomization,
  schemaProblems,
  serviceProblems,
  unknownFieldProblems,
} from '../../scripts/check-kubernetes.ts';

const context = {
  settings: configSettings(),
  secretKeys: envFileKeys(readFileSync('deploy/kubernetes/secret.example.env', 'utf8')),
};

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rendered Kubernetes objects
type K8sObject = Record<string, any>;

/** The production overlay, rendered, with one change. */
function production(change: (objects: K8sObject[], find: (kind: string, name: string) => K8sObject) => void = () => {}): K8sObject[] {
  const objects = renderKustomization('deploy/kubernetes/overlays/production');
  const find = (kind: string, name: string) => {
    const object = objects.find((candidate) => candidate.kind === kind && candidate.metadata?.name === name);
    if (!object) throw new Error(`${kind}/${name} not rendered`);
    return object;
  };
  change(objects, find);
  return objects;
}

const problemsOf = (objects: K8sObject[]) => serviceProblems({ name: 'overlays/production', objects }, context);
const api = (find: (kind: string, name: string) => K8sObject) => find('Deployment', 'model-deployment-api').spec.template.spec;

describe('the Kubernetes manifests check (make k8s-check)', () => {
  it('reads the settings of src/config.ts and the Secret keys', () => {
    expect(context.settings).toEqual(expect.arrayContaining(['DATABASE_URL', 'MIGRATE_ON_START', 'WEBHOOK_DISABLE_AFTER_FAILURES', ...LOCAL_ONLY_SETTINGS]));
    // make run's stand-ins are configured in dev/config.ts, which production never reads.
    expect(context.settings).not.toContain('MAILDEV_WEB_PORT');
    expect(context.secretKeys).toEqual(['APP_SECRET', 'DATABASE_URL', 'SMTP_URL', 'STRIPE_SECRET_KEY', 'STRIPE_WEBHOOK_SECRET', 'STRIPE_EVENT_DESTINATION_SECRET', 'OIDC_CLIENT_SECRET']);
  });

  it('renders the production overlay: namespace, image, patches', () => {
    const objects = production();
    expect(new Set(objects.filter((object) => object.kind !== 'Namespace').map((object) => object.metadata.namespace))).toEqual(new Set(['model-deployment']));
    const find = (kind: string) => objects.find((object) => object.kind === kind);
    expect(find('Deployment')?.spec.template.spec.containers[0].image).toBe('registry.example.com/platform/model-deployment-service:1.1.0');
    expect(find('HorizontalPodAutoscaler')?.spec).toMatchObject({ minReplicas: 3, maxReplicas: 12 });
  });

  it('passes the production overlay, with its schema types and no unknown field', () => {
    const objects = production();
    expect(problemsOf(objects)).toEqual([]);
    expect(unknownFieldProblems(objects)).toEqual([]);
  });

  it('refuses a misspelt field at any depth, and a value of the wrong type', () => {
    const misspelt = production((_, find) => {
      const container = api(find).containers[0];
      container.readinesProbe = container.readinessProbe;
    });
    expect(unknownFieldProblems(misspelt)).toEqual([expect.stringMatching(/^Deployment\/model-deployment-api: .*'"readinesProbe"' does not exist in type 'IContainer'/)]);
    const mistyped = production((_, find) => (api(find).terminationGracePeriodSeconds = '45'));
    expect(unknownFieldProblems(mistyped)).toEqual([expect.stringMatching(/Deployment\/model-deployment-api: .*terminationGracePeriodSeconds.*not assignable to type 'number'/)]);
  });

  it('refuses what the Kubernetes schemas refuse', async () => {
    expect(await schemaProblems(production())).toEqual([]);
    const problems = await schemaProblems(production((_, find) => delete find('Deployment', 'model-deployment-worker').spec.selector));
    expect(problems).toEqual([expect.stringMatching(/^Deployment\/model-deployment-worker: .*selector/)]);
  });

  it('refuses replicas that would migrate, or a setting of src/config.ts that no manifest sets', () => {
    expect(problemsOf(production((_, find) => (find('ConfigMap', 'model-deployment-config').data.MIGRATE_ON_START = 'true')))).toEqual([
      'ConfigMap/model-deployment-config: MIGRATE_ON_START is not "false": replicas would race the migration Job',
    ]);
    expect(problemsOf(production((_, find) => delete find('ConfigMap', 'model-deployment-config').data.WEBHOOK_TIMEOUT_SECONDS))).toEqual([
      'ConfigMap/model-deployment-config: WEBHOOK_TIMEOUT_SECONDS (a setting of src/config.ts) is in neither the ConfigMap nor model-deployment-secrets',
    ]);
    expect(problemsOf(production((_, find) => (find('ConfigMap', 'model-deployment-config').data.APP_SECRET = 'x')))).toEqual([
      'ConfigMap/model-deployment-config: APP_SECRET is a secret: it belongs in model-deployment-secrets',
      'ConfigMap/model-deployment-config: APP_SECRET is also a key of model-deployment-secrets',
    ]);
    expect(problemsOf(production((_, find) => (find('ConfigMap', 'model-deployment-config').data.WEBHOOK_TIMEOUT = '5')))).toEqual([
      'ConfigMap/model-deployment-config: WEBHOOK_TIMEOUT is no setting of src/config.ts',
    ]);
  });

  it('refuses probes on the wrong paths, a grace period shorter than the shutdown, and replicas beside the autoscaler', () => {
    expect(problemsOf(production((_, find) => (api(find).containers[0].readinessProbe.httpGet.path = '/healthz')))).toEqual([
      'Deployment/model-deployment-api: readiness is not GET /readyz on port http',
    ]);
    expect(problemsOf(production((_, find) => (api(find).terminationGracePeriodSeconds = 30)))).toEqual([
      'Deployment/model-deployment-api: terminationGracePeriodSeconds 30 is not above the preStop pause (5 s) plus twice SHUTDOWN_TIMEOUT_MS (15 s)',
    ]);
    expect(problemsOf(production((_, find) => (find('ConfigMap', 'model-deployment-config').data.SHUTDOWN_TIMEOUT_MS = '30000')))).toEqual([
      'Deployment/model-deployment-api: terminationGracePeriodSeconds 45 is not above the preStop pause (5 s) plus twice SHUTDOWN_TIMEOUT_MS (30 s)',
      'Deployment/model-deployment-worker: terminationGracePeriodSeconds 45 is not above the preStop pause (0 s) plus twice SHUTDOWN_TIMEOUT_MS (30 s)',
    ]);
    expect(problemsOf(production((_, find) => (find('Deployment', 'model-deployment-api').spec.replicas = 3)))).toEqual([
      'Deployment/model-deployment-api: sets replicas while a HorizontalPodAutoscaler scales it (every apply would reset its count)',
    ]);
  });

  it('refuses a metrics port or scrape annotation other than METRICS_PORT', () => {
    expect(problemsOf(production((_, find) => (find('ConfigMap', 'model-deployment-config').data.METRICS_PORT = '9100')))).toEqual([
      'Deployment/model-deployment-api: the metrics port is not METRICS_PORT (9100)',
      'Deployment/model-deployment-api: the prometheus.io/port annotation (9464) is not METRICS_PORT (9100)',
      'Deployment/model-deployment-worker: the metrics port is not METRICS_PORT (9100)',
      'Deployment/model-deployment-worker: the prometheus.io/port annotation (9464) is not METRICS_PORT (9100)',
    ]);
  });

  it('refuses a worker that is no worker, a root or unpinned container, and a migration Job the first apply would not start', () => {
    expect(problemsOf(production((_, find) => (find('Deployment', 'model-deployment-worker').spec.template.spec.containers[0].env[0].value = 'all')))).toEqual([
      'Deployment/model-deployment-worker: ROLE is not worker',
    ]);
    expect(
      problemsOf(
        production((_, find) => {
          const spec = find('Job', 'model-deployment-migrate').spec.template.spec;
          spec.securityContext.runAsNonRoot = false;
          spec.containers[0].image = 'registry.example.com/platform/model-deployment-service:latest';
        }),
      ),
    ).toEqual([
      'Job/model-deployment-migrate: container migrate: image registry.example.com/platform/model-deployment-service:latest is not pinned to a tag or digest',
      'Job/model-deployment-migrate: container migrate: runAsNonRoot is not true',
    ]);
    expect(problemsOf(production((_, find) => delete find('ConfigMap', 'model-deployment-config').metadata.labels['model-deployment-service/rollout-phase']))).toEqual([
      'Job/model-deployment-migrate: needs ConfigMap/model-deployment-config, which is not labeled model-deployment-service/rollout-phase=migrate',
    ]);
    expect(problemsOf(production((objects) => objects.splice(objects.findIndex((object) => object.kind === 'Job'), 1)))).toEqual([
      'overlays/production: 0 migration Jobs (node dist/cli/migrate.js), not 1',
    ]);
  });

  it('refuses a Service or budget that selects no pods', () => {
    expect(problemsOf(production((_, find) => (find('Service', 'model-deployment-api').spec.selector['app.kubernetes.io/component'] = 'web')))).toEqual([
      'Service/model-deployment-api: selects the pods of 0 Deployments, not 1',
      'Service/model-deployment-api: targetPort http is no container port of the pods it selects',
    ]);
    expect(problemsOf(production((_, find) => (find('PodDisruptionBudget', 'model-deployment-worker').spec.selector.matchLabels = {})))).toEqual([
      'PodDisruptionBudget/model-deployment-worker: selects the pods of 0 Deployments, not 1',
    ]);
  });

  it('applies JSON 6902 patches as kustomize does, and refuses a path that is not there', () => {
    const object = { spec: { list: [1, 2], value: 'a' } };
    applyJsonPatch(object, [
      { op: 'replace', path: '/spec/value', value: 'b' },
      { op: 'add', path: '/spec/list/-', value: 3 },
      { op: 'remove', path: '/spec/list/0' },
      { op: 'add', path: '/spec/new~1key', value: true },
    ], 'test');
    expect(object).toEqual({ spec: { list: [2, 3], value: 'b', 'new/key': true } });
    expect(() => applyJsonPatch(object, [{ op: 'replace', path: '/spec/missing', value: 1 }], 'patch.yaml')).toThrow('patch.yaml: replace /spec/missing: no such path');
  });
});
