/**
 * Operator commands (`npm run cli -- <command>`), against DATABASE_URL or the embedded Postgres:
 *
 *   cluster register --name N --endpoint URL [--provider P] [--region R] [--api-key-env VAR] [--hosted]
 *   cluster sync --name N          read the engine's workers and record them as instances
 *   cluster list
 *   model enable|disable --name M  make a catalog model deployable or not
 *   model restrict --name M --organizations 1,2   offer it only to these organizations ("all" lifts it)
 *
 * The API key of a cluster is read from the environment variable named by --api-key-env, never from
 * the command line (which shells and process lists keep), and is sealed at rest.
 */
import { parseArgs } from 'node:util';
import type { Knex } from 'knex';
import { ClustersService } from '../clusters/clusters.service.ts';
import { loadConfig } from '../config.ts';
import { Keyring } from '../crypto.ts';
import { createDatabase, migrateToLatest } from '../db/database.ts';
import { resolveDatabase } from '../db/resolve.ts';
import { createLogger } from '../logger.ts';

export class UsageError extends Error {}

export async function runOperatorCommand(argv: string[], deps: { db: Knex; clusters: ClustersService; env?: NodeJS.ProcessEnv }): Promise<string> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      endpoint: { type: 'string' },
      provider: { type: 'string', default: 'self-hosted' },
      region: { type: 'string', default: 'default' },
      'api-key-env': { type: 'string' },
      hosted: { type: 'boolean', default: false },
      organizations: { type: 'string' },
    },
  });
  const [area, action] = positionals;
  const name = () => {
    if (!values.name) throw new UsageError('--name is required');
    return values.name;
  };
  switch (`${area} ${action}`) {
    case 'cluster register': {
      if (!values.endpoint) throw new UsageError('--endpoint is required');
      const keyVariable = values['api-key-env'];
      const apiKey = keyVariable ? (deps.env ?? process.env)[keyVariable] : undefined;
      if (keyVariable && !apiKey) throw new UsageError(`the environment variable ${keyVariable} is empty`);
      const cluster = await deps.clusters.register({
        name: name(),
        endpoint: values.endpoint,
        provider: values.provider,
        region: values.region,
        apiKey,
        hosted: values.hosted,
      });
      return `registered cluster ${cluster.name} (${cluster.id}) at ${cluster.endpoint}${apiKey ? ' with its API key sealed' : ''}`;
    }
    case 'cluster sync': {
      const cluster = await deps.clusters.byName(name());
      if (!cluster) throw new UsageError(`no cluster is named ${name()}`);
      const result = await deps.clusters.sync(cluster.id);
      return [
        ...result.instances.map((i) => `instance ${i.worker}: ${i.instanceType} (${i.gpus} GPUs)`),
        ...result.unmatched.map((u) => `skipped ${u.worker}: ${u.reason}`),
        ...result.unavailable.map((worker) => `unavailable ${worker}: no longer reported by the engine`),
      ].join('\n');
    }
    case 'cluster list': {
      const rows = await deps.db('clusters').orderBy('name').select('name', 'provider', 'region', 'endpoint', 'status', 'hosted');
      return rows.map((c) => `${c.name}\t${c.provider}/${c.region}\t${c.endpoint}\t${c.status}${c.hosted ? '\thosted' : ''}`).join('\n');
    }
    case 'model enable':
    case 'model disable': {
      const updated = await deps.db('deployable_models').where({ model_name: name() }).update({ enabled: action === 'enable' });
      if (!updated) throw new UsageError(`no catalog model is named ${name()}`);
      return `${name()} is ${action === 'enable' ? 'enabled' : 'disabled'}`;
    }
    case 'model restrict': {
      const list = values.organizations;
      if (!list) throw new UsageError('--organizations is required (ids, comma-separated, or "all")');
      const ids = list === 'all' ? null : list.split(',').map((id) => Number(id.trim()));
      if (ids?.some((id) => !Number.isInteger(id) || id <= 0)) throw new UsageError('--organizations takes organization ids, e.g. 7,12');
      const updated = await deps.db('deployable_models').where({ model_name: name() }).update({ allowed_organization_ids: ids });
      if (!updated) throw new UsageError(`no catalog model is named ${name()}`);
      return ids ? `${name()} is offered only to organizations ${ids.join(', ')}` : `${name()} is offered to every organization`;
    }
    default:
      throw new UsageError('usage: cluster register|sync|list, model enable|disable|restrict (see src/cli/operator.ts)');
  }
}

if (import.meta.main) {
  const config = loadConfig();
  const log = createLogger('warn');
  const database = await resolveDatabase(config, log);
  const db = createDatabase({ url: database.url, poolMax: 2, log });
  try {
    await migrateToLatest(db);
    process.stdout.write(`${await runOperatorCommand(process.argv.slice(2), { db, clusters: new ClustersService({ db, keyring: new Keyring(config.appSecret) }) })}\n`);
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = error instanceof UsageError ? 2 : 1;
  } finally {
    await db.destroy();
    await database.stop();
  }
}
