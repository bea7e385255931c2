import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { networkInterfaces } from 'node:os';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runOperatorCommand, UsageError } from '../../src/cli/operator.ts';
import { ClusterRegistrationError, ClustersService } from '../../src/clusters/clusters.service.ts';
import { startClusterSimulator, type ClusterSimulator } from '../../dev/cluster-simulator.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';

let app: TestApp;
let simulator: ClusterSimulator;
beforeAll(async () => {
  app = await startTestApp();
  simulator = await startClusterSimulator({
    adminPassword: 'admin-password-1',
    apiKey: 'xf-cluster-inference-key',
    auth: { users: [{ username: 'reader', password: 'reader-password', permissions: ['models:list', 'models:read'] }] },
    workers: [
      { name: 'w0', gpuName: 'NVIDIA A10G', gpuCount: 1, gpuMemoryGb: 24 },
      { name: 'w1', gpuName: 'Tesla T4', gpuCount: 4, gpuMemoryGb: 16 },
      { name: 'w2', gpuName: 'AMD Instinct MI250X', gpuCount: 8, gpuMemoryGb: 64 },
      { name: 'w3', gpuName: 'NVIDIA A100-SXM4-80GB', gpuCount: 8, gpuMemoryGb: 80 },
    ],
  });
});
afterAll(async () => {
  await simulator.stop();
  await app.close();
});

const ENV = {
  ADMIN_PASSWORD: 'admin-password-1',
  READER_PASSWORD: 'reader-password',
  WRONG_PASSWORD: 'not-the-password',
  CLUSTER_KEY: 'xf-cluster-inference-key',
  WRONG_KEY: 'xf-not-a-key-of-this-cluster',
  JWT_KEY: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJl',
};
const run = (...argv: string[]) => runOperatorCommand(argv, { db: app.db, clusters: app.container.clusters, env: ENV });
const register = (name: string, ...flags: string[]) => run('cluster', 'register', '--name', name, '--endpoint', simulator.url, ...flags);
const credentials = (user = 'admin', passwordEnv = 'ADMIN_PASSWORD', keyEnv = 'CLUSTER_KEY') => ['--admin-user', user, '--admin-password-env', passwordEnv, '--api-key-env', keyEnv];

describe('cluster register', () => {
  it('checks the admin user and the API key against the engine, seals both, and syncs the inventory by NVML GPU names', async () => {
    expect(await register('gpu-east', '--provider', 'aws', '--region', 'us-east-1', ...credentials())).toMatch(
      /registered cluster gpu-east .* as admin, its credentials checked and sealed/,
    );
    const cluster = await app.db('clusters').where({ name: 'gpu-east' }).first();
    expect(cluster).toMatchObject({ auth_mode: 'advanced', status: 'active' });
    expect(cluster.sealed_credential).not.toContain('xf-cluster-inference-key');
    expect(cluster.sealed_management_credential).not.toContain('admin-password-1');
    expect(app.container.keyring.decrypt('cluster-credential', cluster.sealed_credential)).toBe('xf-cluster-inference-key');
    expect(app.container.clusters.authorizationHeader(cluster.sealed_credential)).toBe('Bearer xf-cluster-inference-key');

    const output = await run('cluster', 'sync', '--name', 'gpu-east');
    expect(output).toContain('engine version 3.2.0');
    expect(output).toContain('instance w0:30001: g5.xlarge (1 GPUs)');
    expect(output).toContain('instance w1:30001: g4dn.12xlarge (4 GPUs)');
    expect(output).toContain('instance w3:30001: p4de.24xlarge (8 GPUs)');
    expect(output).toContain('skipped w2:30001: the GPU name "AMD Instinct MI250X" is not in the GPU name table');
    expect(await app.db('instances').where({ cluster_id: cluster.id, status: 'available' })).toHaveLength(3);
    expect(await run('cluster', 'list')).toContain(`gpu-east\taws/us-east-1\t${simulator.url}\tauth advanced\tactive\t3.2.0`);
  });

  it.each([
    ['a wrong password', credentials('admin', 'WRONG_PASSWORD'), /refused the username or password of admin \(401: Incorrect username or password\)/],
    ['a user without models:write and admin', credentials('reader', 'READER_PASSWORD'), /the management user reader lacks the scopes models:write, admin/],
    ['an API key the engine does not know', credentials('admin', 'ADMIN_PASSWORD', 'WRONG_KEY'), /refused the API key \(401: Could not validate credentials\)/],
    ['an access token given as the API key', credentials('admin', 'ADMIN_PASSWORD', 'JWT_KEY'), /is an access token \(a JWT\), which expires/],
    ['--auth none on an engine with authentication on', ['--auth', 'none'], /runs with authentication on/],
  ])('refuses %s with a clear error, and stores nothing', async (_what, flags, message) => {
    await expect(register('gpu-refused', ...flags)).rejects.toThrow(message);
    await expect(register('gpu-refused', ...flags)).rejects.toBeInstanceOf(ClusterRegistrationError);
    expect(await app.db('clusters').where({ name: 'gpu-refused' }).first()).toBeUndefined();
  });

  it('needs the credential flags, reading secrets only from the environment', async () => {
    await expect(register('gpu-x')).rejects.toThrow(/--admin-user is required/);
    await expect(register('gpu-x', '--admin-user', 'admin', '--api-key-env', 'CLUSTER_KEY')).rejects.toThrow(/--admin-password-env is required/);
    await expect(register('gpu-x', ...credentials('admin', 'NOT_SET'))).rejects.toThrow(new UsageError('the environment variable NOT_SET (--admin-password-env) is empty'));
    await expect(register('gpu-x', '--auth', 'none', '--admin-user', 'admin')).rejects.toThrow(/makes no sense with --auth none/);
  });

  it('registers a cluster run with authentication off only as --auth none', async () => {
    const open = await startClusterSimulator({ auth: false, workers: [{ name: 'o0', gpuName: 'NVIDIA L4', gpuCount: 1, gpuMemoryGb: 24 }] });
    try {
      await expect(run('cluster', 'register', '--name', 'gpu-open', '--endpoint', open.url, ...credentials())).rejects.toThrow(/runs with authentication off .* register it with --auth none/);
      expect(await run('cluster', 'register', '--name', 'gpu-open', '--endpoint', open.url, '--auth', 'none')).toMatch(/with authentication off \(--auth none\)/);
      expect(await run('cluster', 'sync', '--name', 'gpu-open')).toContain('instance o0:30001: g2-standard-4 (1 GPUs)');
      expect(await app.db('clusters').where({ name: 'gpu-open' }).first()).toMatchObject({ auth_mode: 'none', sealed_credential: null, sealed_management_credential: null });
    } finally {
      await open.stop();
    }
  });
});

describe('cluster register over plain http', () => {
  const lanAddress = Object.values(networkInterfaces())
    .flat()
    .find((address) => address && address.family === 'IPv4' && !address.internal)?.address;

  it('refuses http:// to a host that is not loopback, through the CLI process, before contacting it', async () => {
    const child = spawn(process.execPath, ['src/cli/operator.ts', 'cluster', 'register', '--name', 'gpu-lan', '--endpoint', 'http://xinference.internal:9997', ...credentials()], {
      env: { ...process.env, ...ENV, NODE_ENV: 'test', APP_SECRET: app.env.APP_SECRET, DATABASE_URL: app.databaseUrl, LOG_LEVEL: 'silent' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = await once(child, 'exit');
    expect(code).toBe(1);
    expect(stderr).toMatch(/^refused: the endpoint http:\/\/xinference\.internal:9997 is plain http to a host that is not loopback: .* pass --insecure-http/);
    expect(await app.db('clusters').where({ name: 'gpu-lan' }).first()).toBeUndefined();
  });

  it.skipIf(!lanAddress)('accepts http:// to a non-loopback address with --insecure-http', async () => {
    const lan = await startClusterSimulator({ host: lanAddress, adminPassword: 'admin-password-1', apiKey: 'xf-cluster-inference-key' });
    try {
      const endpoint = lan.url;
      await expect(run('cluster', 'register', '--name', 'gpu-lan', '--endpoint', endpoint, ...credentials())).rejects.toThrow(/plain http to a host that is not loopback/);
      expect(await run('cluster', 'register', '--name', 'gpu-lan', '--endpoint', endpoint, ...credentials(), '--insecure-http')).toMatch(/registered cluster gpu-lan/);
    } finally {
      await lan.stop();
    }
  });
});

describe('cluster credentials at run time', () => {
  it('stops a cluster whose engine refuses its credentials, alerts the operator, shows why in cluster list, and makes it active again once fixed', async () => {
    const own = await startClusterSimulator({ adminPassword: 'admin-password-1', apiKey: 'xf-cluster-inference-key', workers: [{ name: 'r0', gpuName: 'NVIDIA L4', gpuCount: 1, gpuMemoryGb: 24 }] });
    const lines: string[] = [];
    const clusters = new ClustersService({ db: app.db, keyring: app.container.keyring, log: pino({ level: 'error' }, { write: (line: string) => void lines.push(line) }) });
    const run = (...argv: string[]) => runOperatorCommand(argv, { db: app.db, clusters, env: ENV });
    try {
      const registerOwn = (...flags: string[]) => run('cluster', 'register', '--name', 'gpu-rotated', '--endpoint', own.url, ...flags);
      await registerOwn(...credentials());
      const cluster = await app.db('clusters').where({ name: 'gpu-rotated' }).first();
      expect(await run('cluster', 'sync', '--name', 'gpu-rotated')).toContain('engine version');
      expect(await run('cluster', 'sync', '--name', 'gpu-rotated')).toContain('instance r0:30001');

      own.auth?.resetPassword('admin', 'rotated-by-someone');
      const before = own.auth?.invalidBearers ?? 0;
      await expect(run('cluster', 'sync', '--name', 'gpu-rotated')).rejects.toThrow(/refused the username or password of admin/);
      await expect(run('cluster', 'sync', '--name', 'gpu-rotated')).rejects.toThrow(/its calls are stopped until an operator runs `cluster register` or `cluster check`/);
      // The held access token is refused once; the sign-in that follows is refused; nothing more.
      expect((own.auth?.invalidBearers ?? 0) - before).toBe(1);
      expect(await app.db('clusters').where({ id: cluster.id }).first()).toMatchObject({ status: 'credentials_invalid', status_reason: expect.stringMatching(/Incorrect username or password/) });
      expect(await run('cluster', 'list')).toMatch(/gpu-rotated\t.*\tcredentials_invalid: the engine refused the username or password of admin/);
      expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toEqual([
        expect.objectContaining({ level: 50, alert: 'cluster_credentials_invalid', cluster: 'gpu-rotated', reason: expect.stringMatching(/Incorrect username or password/) }),
      ]);
      expect(lines.join('')).not.toMatch(/admin-password-1|rotated-by-someone/);
      await expect(run('cluster', 'check', '--name', 'gpu-rotated')).rejects.toThrow(/refused the username or password/);

      own.auth?.resetPassword('admin', 'admin-password-1');
      expect(await run('cluster', 'check', '--name', 'gpu-rotated')).toBe(
        'cluster gpu-rotated: the engine accepts its credentials; status active\nthe inference API key may call every model type (LLM, embedding, rerank, image, audio)',
      );
      expect(await run('cluster', 'sync', '--name', 'gpu-rotated')).toContain('instance r0:30001');
    } finally {
      await own.stop();
    }
  });
});

describe('catalog commands', () => {
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

describe('price commands', () => {
  const cli = (...argv: string[]) => operatorCli(app, ...argv);

  it('lists the seeded prices: instance types at their list price per GPU share, hosted models per token', async () => {
    const lines = (await run('prices', 'list')).split('\n');
    expect(lines).toContain('aws:us-east-1:gpu_instance:g5.xlarge:a10g:1\tgpu_instance_seconds\t0.000279444000 usd/second\tGPU instance g5.xlarge (1 x A10G), us-east-1');
    // g5.12xlarge is $5.672 an hour for 4 GPUs: one of them, $0.000393889 a second.
    expect(lines).toContain('aws:us-east-1:gpu_instance:g5.12xlarge:a10g:1\tgpu_instance_seconds\t0.000393889000 usd/second\tGPU instance g5.12xlarge (1 x A10G), us-east-1');
    expect(lines).toContain('platform::hosted_model:qwen2.5-instruct::\thosted_tokens\t0.000000300000 usd/token\tHosted model qwen2.5-instruct');
  });

  it('sets a price through the real CLI, adds a new service, and refuses a malformed key or amount with exit code 2', async () => {
    const set = await cli('prices', 'set', 'gcp:us-central1:gpu_instance:g2-standard-4:l4:1', '0.0002');
    expect(set).toMatchObject({ code: 0, stderr: '' });
    expect(set.stdout).toBe('price of gcp:us-central1:gpu_instance:g2-standard-4:l4:1 (GPU instance g2-standard-4 (1 x L4), us-central1) set to 0.000200000000 usd/second (was 0.000196333000)\n');

    const added = await cli('prices', 'set', 'platform::hosted_model:qwen3::', '0.00000025');
    expect(added.stdout).toContain('set to 0.000000250000 usd/token (a new service)');
    const listed = await cli('prices', 'list');
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain('gcp:us-central1:gpu_instance:g2-standard-4:l4:1\tgpu_instance_seconds\t0.000200000000 usd/second');
    expect(listed.stdout).toContain('platform::hosted_model:qwen3::\thosted_tokens\t0.000000250000 usd/token\tHosted model qwen3');

    const badKey = await cli('prices', 'set', 'gcp:us-central1:gpu_instance:g2-standard-4:L4:1', '0.0002');
    expect(badKey).toMatchObject({ code: 2, stderr: 'the gpu_type segment is lower case ("l4")\n' });
    const badAmount = await cli('prices', 'set', 'gcp:us-central1:gpu_instance:g2-standard-4:l4:1', '2e-4');
    expect(badAmount.code).toBe(2);
    expect(badAmount.stderr).toMatch(/^the unit amount is a decimal number of dollars/);
    expect((await app.db('prices').where({ service_key: 'gcp:us-central1:gpu_instance:g2-standard-4:l4:1' }).first()).unit_amount_decimal).toBe('0.000200000000');
    await expect(run('prices', 'set', 'platform::hosted_model:qwen3::')).rejects.toThrow(/usage: prices set <service_key> <unit_amount_decimal>/);
    // One price a hosted model: a second key for it would count its tokens twice.
    await expect(run('prices', 'set', 'platform:eu-west-1:hosted_model:qwen3::', '0.0000003')).rejects.toThrow(/qwen3 already has a price under another key/);
  });
});
