import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runOperatorCommand } from '../../src/cli/operator.ts';
import { startClusterSimulator, type ClusterSimulator } from '../../dev/cluster-simulator.ts';
import type { ClusterRegistration } from '../../src/clusters/clusters.service.ts';
import { startServices, type Services } from '../helpers/services.ts';

/**
 * Whether a cluster's engine has the replica API (Xinference 3.2's scale-up route), as the
 * clusters service detects it at registration, check and sync, records it on the cluster
 * (`clusters.replica_api`) and shows it to operators (`cluster list`, `cluster sync`).
 */
let services: Services;
let current: ClusterSimulator;
let older: ClusterSimulator;
beforeAll(async () => {
  services = await startServices();
  [current, older] = await Promise.all([startClusterSimulator({ version: '3.2.0' }), startClusterSimulator({ version: '3.1.2' })]);
});
afterAll(async () => {
  await Promise.all([current?.stop(), older?.stop()]);
  await services?.close();
});

const registration = (name: string, simulator: ClusterSimulator): ClusterRegistration => {
  const credentials = simulator.credentials;
  if (!credentials) throw new Error('the simulator runs without authentication');
  return {
    name,
    provider: 'local',
    region: 'test',
    endpoint: simulator.url,
    auth: { mode: 'advanced', username: credentials.adminUser, password: credentials.adminPassword, apiKey: credentials.apiKey },
  };
};
const run = (...argv: string[]) => runOperatorCommand(argv, { db: services.db, clusters: services.container.clusters });
const replicaApiOf = async (name: string) => ((await services.db('clusters').where({ name }).first()) as { replica_api: boolean | null }).replica_api;

describe('the replica API of a cluster', () => {
  it('is recorded at registration: present on a 3.2 engine, absent before, and the probe changes nothing on the engine', async () => {
    const probes = older.requests['POST /v1/models/{model_uid}/replicas'] ?? 0;
    await services.container.clusters.register(registration('replicas-current', current));
    await services.container.clusters.register(registration('replicas-older', older));
    expect(await replicaApiOf('replicas-current')).toBe(true);
    expect(await replicaApiOf('replicas-older')).toBe(false);
    expect(older.requests.unmatched).toBe(1);
    expect(older.requests['POST /v1/models/{model_uid}/replicas'] ?? 0).toBe(probes);
    expect([...current.launches, ...older.launches]).toEqual([]);
  });

  it('is detected again at each sync and check, and shown by cluster sync and cluster list', async () => {
    const cluster = await services.container.clusters.byName('replicas-older');
    if (!cluster) throw new Error('replicas-older is not registered');
    await services.db('clusters').where({ id: cluster.id }).update({ replica_api: null });
    expect(await run('cluster', 'list')).toMatch(/^replicas-older\t.*\tversion unknown\treplica API unknown$/m);
    const synced = await services.container.clusters.sync(cluster.id);
    expect(synced).toMatchObject({ engineVersion: '3.1.2', replicaApi: false });
    expect(await replicaApiOf('replicas-older')).toBe(false);
    expect(await run('cluster', 'sync', '--name', 'replicas-current')).toMatch(/^engine version 3\.2\.0, replica API$/m);
    expect(await run('cluster', 'list')).toMatch(/^replicas-older\t.*\tactive\t3\.1\.2\tno replica API \(Xinference before 3\.2\)$/m);
    expect(await run('cluster', 'list')).toMatch(/^replicas-current\t.*\tactive\t3\.2\.0\treplica API$/m);

    // The operator upgrades the engine and registers it again at its new address: the next detection tells.
    await services.container.clusters.register({ ...registration('replicas-older', current) });
    expect(await replicaApiOf('replicas-older')).toBe(true);
    await services.db('clusters').where({ id: cluster.id }).update({ replica_api: false });
    expect((await services.container.clusters.check('replicas-older')).replica_api).toBe(true);
    expect(await replicaApiOf('replicas-older')).toBe(true);
  });
});
