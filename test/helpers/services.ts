import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { components } from '../../generated/api.d.ts';
import type { SessionPrincipal } from '../../src/principal.ts';
import { loadConfig } from '../../src/config.ts';
import { createContainer, jobDefinitions, type Container } from '../../src/container.ts';
import { createDatabase } from '../../src/db/database.ts';
import { createJobQueue, startJobQueue, stopJobQueue } from '../../src/jobs/queue.ts';
import type { ClusterSimulator, SimulatedWorker } from '../../dev/cluster-simulator.ts';
import { markEmailVerified } from '../../src/accounts/accounts.repository.ts';
import { startLocalCluster } from '../../dev/local-cluster.ts';
import { createLogger } from '../../src/logger.ts';
import { loadOpenApiDocument } from '../../src/openapi-document.ts';
import { findDeployment } from '../../src/deployments/deployments.repository.ts';
import { uniqueEmail, PASSWORD } from '../factories/accounts.ts';
import { APP_ORIGIN, TEST_APP_SECRET } from './app.ts';
import { createTestDatabase } from './database.ts';
import { waitUntil } from './net.ts';

type RegisterRequest = components['schemas']['RegisterRequest'];

/**
 * The service tier: the container's services against a database of their own, with no HTTP and no
 * workers. Jobs are queued as the services queue them and run only when a test runs the step it
 * means to (the provisioner's `provision`, the recorder's `flush`...), so a rule that is awkward to
 * reach over HTTP (a step arriving in a state it must not act in, a lapse in time) is tested where
 * it lives. As immich's `server/test/medium`.
 */
export interface Services {
  container: Container;
  db: Knex;
  log: Logger;
  simulator: ClusterSimulator | undefined;
  /** A new user with an organization of their own, registered through the accounts service, their email verified: their session's principal. */
  owner(overrides?: Partial<RegisterRequest>): Promise<SessionPrincipal>;
  close(): Promise<void>;
}

export async function startServices(
  env: Record<string, string> = {},
  options: { log?: Logger; cluster?: { modelLoadMs?: number; workers?: SimulatedWorker[] } } = {},
): Promise<Services> {
  const database = await createTestDatabase();
  const config = loadConfig({ NODE_ENV: 'test', PUBLIC_URL: APP_ORIGIN, APP_SECRET: TEST_APP_SECRET, ...env });
  const log = options.log ?? createLogger('silent');
  const db = createDatabase({ url: database.url, poolMax: 4, log });
  const boss = createJobQueue({ url: database.url, work: false, log });
  const container = createContainer({ config, log, db, boss, document: loadOpenApiDocument(), smtpUrl: 'smtp://127.0.0.1:9' });
  await startJobQueue(boss, { work: false, jobs: jobDefinitions(container), log });
  const simulator = options.cluster ? await startLocalCluster({ clusters: container.clusters, log, ...options.cluster }) : undefined;
  let registered = 0;
  return {
    container,
    db,
    log,
    simulator,
    async owner(overrides = {}) {
      const email = overrides.email ?? uniqueEmail('owner');
      const input = { email, password: PASSWORD, organization: `Org of ${email}`, ...overrides };
      // Each owner from an address of its own: the per-address registration limit is not under test here.
      const session = await container.accounts.register(input, `192.0.2.${++registered}`);
      // An owner who proved their address, as the factories' registered users (an unverified account creates no keys or invitations).
      await markEmailVerified(db, session.principal.user.id);
      const verified = await container.sessions.load(session.principal.sessionId);
      if (!verified) throw new Error('the new session is gone');
      return verified;
    },
    async close() {
      await simulator?.stop();
      await stopJobQueue(boss, 1_000);
      await container.mailer.close();
      await db.destroy();
      await database.drop();
    },
  };
}

/**
 * A deployment of `owner`'s provisioned by running its steps here, as the workers would: placed and
 * launched, then awaited until running (services started with a cluster). Its id.
 */
export async function runningDeployment(services: Services, owner: SessionPrincipal, model_name = 'qwen2.5-instruct'): Promise<string> {
  const { provisioner, deployments } = services.container;
  const { id } = await deployments.create(owner, { model_name });
  await provisioner.provision(id, services.log, false);
  await waitUntil(async () => {
    await provisioner.awaitReady(id, services.log);
    return (await findDeployment(services.db, id))?.status === 'running';
  }, `deployment ${id} to run`);
  return id;
}
