import type { Knex } from 'knex';
import pg from 'pg';
import type { Logger } from 'pino';

/**
 * What one process tells the others through Postgres (`pg_notify`, delivered on commit): each
 * channel names what changed, its payload which one.
 */
export const CHANGE_CHANNELS = {
  /** An API key was revoked, disabled, re-enabled or re-scoped; payload: its id. */
  apiKey: 'api_key_changed',
  /** A deployment event was appended (src/events/); payload: the deployment's id. */
  deploymentEvent: 'deployment_event',
  /**
   * A user's sessions ended or moved, or their memberships ended or changed role (announced by
   * triggers: migrations/20261128110000_access_change_notifications.ts); payload: the user's id.
   */
  accessChanged: 'access_changed',
  /** A deployment's replica became ready or stopped taking requests (src/deployments/scaling.ts); payload: the deployment's id. */
  replicas: 'deployment_replicas_changed',
  /** A cluster's status changed (its engine refused its credentials, or it is active again); payload: `<id> <status>`. */
  cluster: 'cluster_status_changed',
} as const;
export type ChangeChannel = (typeof CHANGE_CHANNELS)[keyof typeof CHANGE_CHANNELS];

/** Announces a change to every process; in a transaction, it goes out when (and only if) it commits. */
export async function announceChange(db: Knex | Knex.Transaction, channel: ChangeChannel, payload: string | number): Promise<void> {
  await db.raw('select pg_notify(?, ?)', [channel, String(payload)]);
}

const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 5_000;

interface Subscription {
  /** One change. */
  changed(payload: string): void;
  /** Changes may have been missed (the connection was lost): forget everything. */
  resync(): void;
}

/**
 * One dedicated connection per process that LISTENs to the change channels and tells the
 * in-process caches what changed, so a revocation made in one process is refused by every other
 * within milliseconds. A lost connection is re-opened with backoff, and since notifications sent
 * meanwhile are lost, each subscriber then drops what it cached (`resync`); until then the caches'
 * own expiry bounds how stale they get.
 */
export class ChangeListener {
  readonly #url: string;
  readonly #log: Logger;
  readonly #subscriptions = new Map<ChangeChannel, Subscription[]>();
  #client: pg.Client | undefined;
  #stopped = false;
  #retryMs = RECONNECT_MIN_MS;
  #retry: NodeJS.Timeout | undefined;

  constructor(url: string, log: Logger) {
    this.#url = url;
    this.#log = log;
  }

  subscribe(channel: ChangeChannel, subscription: Subscription): void {
    this.#subscriptions.set(channel, [...(this.#subscriptions.get(channel) ?? []), subscription]);
  }

  /** Resolves once listening (the first connection must work: the caller's start-up fails otherwise). */
  async start(): Promise<void> {
    await this.#connect();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retry);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }

  /** Whether notifications are being received right now. */
  get listening(): boolean {
    return this.#client !== undefined;
  }

  async #connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.#url, application_name: 'model-deployment-service:changes' });
    client.on('notification', (message) => this.#dispatch(message.channel as ChangeChannel, message.payload ?? ''));
    client.on('error', (error) => this.#lost(client, error));
    client.on('end', () => this.#lost(client, new Error('the connection ended')));
    await client.connect();
    for (const channel of this.#subscriptions.keys()) await client.query(`listen ${pg.escapeIdentifier(channel)}`);
    if (this.#stopped) {
      await client.end();
      return;
    }
    this.#client = client;
    this.#retryMs = RECONNECT_MIN_MS;
  }

  #dispatch(channel: ChangeChannel, payload: string): void {
    for (const subscription of this.#subscriptions.get(channel) ?? []) subscription.changed(payload);
  }

  #lost(client: pg.Client, error: Error): void {
    if (this.#client !== client || this.#stopped) return;
    this.#client = undefined;
    client.end().catch(() => undefined);
    this.#log.warn({ err: error }, 'the change listener lost its connection; reconnecting');
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    this.#retry = setTimeout(() => {
      this.#connect().then(
        () => {
          if (this.#stopped) return;
          this.#log.info('the change listener is listening again');
          for (const subscriptions of this.#subscriptions.values()) for (const subscription of subscriptions) subscription.resync();
        },
        (error: unknown) => {
          this.#log.warn({ err: error }, 'the change listener could not reconnect; retrying');
          this.#retryMs = Math.min(this.#retryMs * 2, RECONNECT_MAX_MS);
          this.#scheduleReconnect();
        },
      );
    }, this.#retryMs);
    this.#retry.unref();
  }
}
