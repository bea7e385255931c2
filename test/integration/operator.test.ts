import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runOperatorCommand, UsageError } from '../../src/cli/operator.ts';
import { startClusterSimulator, type ClusterSimulator } from '../../src/local/cluster-simulator.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';

let app: TestApp;
let simulator: ClusterSimulator;
beforeAll(async () => {
  app = await startTestApp();
  simulator = await startClusterSimulator({
    apiKey: 'cluster-secret-key',
    workers: [
      { name: 'w0', gpuType: 'A10G', gpuCount: 1, gpuMemoryGb: 24 },
      { name: 'w1', gpuType: 'T4', gpuCount: 4, gpuMemoryGb: 16 },
      { name: 'w2', gpuType: 'MI300X', gpuCount: 8, gpuMemoryGb: 192 },
    ],
  });
});
afterAll(async () => {
  await simulator.stop();
  await app.close();
});

const run = (...argv: string[]) => runOperatorCommand(argv, { db: app.db, clusters: app.container.clusters, env: { CLUSTER_KEY: 'cluster-secret-key' } });

describe('operator commands', () => {
  it('registers a cluster with its API key sealed, and syncs its inventory into instances', async () => {
    expect(await run('cluster', 'register', '--name', 'gpu-east', '--endpoint', simulator.url, '--provider', 'aws', '--region', 'us-east-1', '--api-key-env', 'CLUSTER_KEY')).toMatch(
      /registered cluster gpu-east .* with its API key sealed/,
    );
    const cluster = await app.db('clusters').where({ name: 'gpu-east' }).first();
    expect(cluster.sealed_credential).not.toContain('cluster-secret-key');
    expect(app.container.keyring.decrypt('cluster-credential', cluster.sealed_credential)).toBe('cluster-secret-key');

    const output = await run('cluster', 'sync', '--name', 'gpu-east');
    expect(output).toContain('instance w0:30001: g5.xlarge (1 GPUs)');
    expect(output).toContain('instance w1:30001: g4dn.12xlarge (4 GPUs)');
    expect(output).toContain('skipped w2:30001: no instance type has 8 x MI300X');
    expect(await app.db('instances').where({ cluster_id: cluster.id, status: 'available' })).toHaveLength(2);
    expect(await run('cluster', 'list')).toContain(`gpu-east\taws/us-east-1\t${simulator.url}\tactive`);
  });

  it('refuses a cluster whose key is wrong: the engine answers 401', async () => {
    await run('cluster', 'register', '--name', 'gpu-west', '--endpoint', simulator.url);
    await expect(run('cluster', 'sync', '--name', 'gpu-west')).rejects.toThrow();
  });

  it('enables, disables and restricts catalog models', async () => {
    expect(await run('model', 'disable', '--name', 'qwen3')).toBe('qwen3 is disabled');
    expect((await app.db('deployable_models').where({ model_name: 'qwen3' }).first()).enabled).toBe(false);
    expect(await run('model', 'enable', '--name', 'qwen3')).toBe('qwen3 is enabled');
    expect(await run('model', 'restrict', '--name', 'qwen3', '--organizations', '3,9')).toBe('qwen3 is offered only to organizations 3, 9');
    expect((await app.db('deployable_models').where({ model_name: 'qwen3' }).first()).allowed_organization_ids).toEqual([3, 9]);
    expect(await run('model', 'restrict', '--name', 'qwen3', '--organizations', 'all')).toBe('qwen3 is offered to every organization');
    await expect(run('model', 'disable', '--name', 'no-such-model')).rejects.toThrow(UsageError);
    await expect(run('cluster', 'dance')).rejects.toThrow(UsageError);
  });
});
