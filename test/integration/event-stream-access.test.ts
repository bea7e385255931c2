import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { moveDeployment } from '../../src/deployments/deployment-changes.ts';
import { registeredUser, signedIn, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { addedMember } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Browser } from '../helpers/browser.ts';
import { checkResponse } from '../helpers/contract.ts';
import { statusOf } from '../helpers/http.ts';
import { waitUntil } from '../helpers/net.ts';

/**
 * Deployment event streams live no longer than the session and membership they were opened with,
 * are capped per user and per process, and share one read of each event per
 * process. The service is an API process; every change is made on another database
 * connection, so it reaches the streams only through Postgres notifications, as from any process.
 */
const EVENTS_PATH = '/api/v1/model-deployments/{deployment_id}/events';
const PER_USER = 6;
const PER_PROCESS = 10;

let app: TestApp;
/** A connection of the test's own: a change made on it reaches the service only through Postgres. */
let otherConnection: Knex;

beforeAll(async () => {
  app = await startTestApp({ EVENT_STREAMS_PER_USER: String(PER_USER), EVENT_STREAMS_PER_PROCESS: String(PER_PROCESS), MAX_ACTIVE_RESOURCES: '50' });
  otherConnection = createDatabase({ url: app.databaseUrl, poolMax: 1 });
});
afterAll(async () => {
  await otherConnection?.destroy();
  await app?.close();
});

/** An open stream: the ids of the events received, and whether the server closed it. */
class Stream {
  readonly ids: string[] = [];
  closedByServer = false;
  readonly #abort = new AbortController();

  static async open(browser: Browser, deploymentId: string): Promise<{ response: Response; stream: Stream }> {
    const stream = new Stream();
    const response = await browser.fetch(EVENTS_PATH.replace('{deployment_id}', deploymentId), { signal: stream.#abort.signal });
    await checkResponse('GET', EVENTS_PATH, response);
    if (response.status === 200) void stream.#read(response);
    return { response, stream };
  }

  async #read(response: Response): Promise<void> {
    const decoder = new TextDecoder();
    let text = '';
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        text += decoder.decode(chunk, { stream: true });
        const ids = [...text.matchAll(/^id: (\d+)$/gm)].map((match) => match[1] ?? '');
        this.ids.splice(0, this.ids.length, ...ids);
      }
      this.closedByServer = true;
    } catch {
      // Aborted by the test.
    }
  }

  close(): void {
    this.#abort.abort();
  }
}

async function opened(user: SignedInUser, deploymentId: string): Promise<Stream> {
  const { response, stream } = await Stream.open(user.browser, deploymentId);
  expect(response.status).toBe(200);
  // The history: at least the `requested` event.
  await waitUntil(async () => stream.ids.length > 0, () => 'the stream’s history');
  return stream;
}

async function closeAll(streams: readonly Stream[]): Promise<void> {
  for (const stream of streams) stream.close();
  await waitUntil(async () => app.container.eventStreams.size === 0, () => `${app.container.eventStreams.size} streams still open`);
}

const organizationIdOf = async (user: SignedInUser) => (await user.api.GET('/v1/organization')).data?.id ?? 0;

describe('an event stream and the access it was opened with', () => {
  it('ends when its session signs out', async () => {
    const owner = await registeredUser(app);
    const made = await deployment(app, owner, 'requested');
    const stream = await opened(owner, made.id);

    expect(await statusOf(owner.api.POST('/v1/user/logout'))).toBe(200);

    await waitUntil(async () => stream.closedByServer, () => 'the stream of a signed-out session is still open');
    await closeAll([stream]);
  });

  it('ends when its session is revoked from another one, and keeps the streams of the other session', async () => {
    const owner = await registeredUser(app);
    const made = await deployment(app, owner, 'requested');
    const other = await signedIn(app, owner.email);
    const revoked = await opened(other, made.id);
    const kept = await opened(owner, made.id);
    const sessions = (await owner.api.GET('/v1/user/sessions')).data ?? [];
    const otherId = sessions.find((session) => !session.current)?.id ?? '';

    expect(await statusOf(owner.api.DELETE('/v1/user/sessions/{session_id}', { params: { path: { session_id: otherId } } }))).toBe(204);

    await waitUntil(async () => revoked.closedByServer, () => 'the stream of a revoked session is still open');
    // The kept stream still receives events.
    expect(await moveDeployment(otherConnection, made.id, { from: 'requested', to: 'failed', changes: { failure_stage: 'capacity', failure_reason: 'Stopped by the test.' } })).toBe(true);
    await waitUntil(async () => kept.closedByServer && kept.ids.length === 2, () => `the kept stream got ${JSON.stringify(kept.ids)}`);
    await closeAll([revoked, kept]);
  });

  it('ends when its user is removed from the organization', async () => {
    const owner = await registeredUser(app);
    const member = await addedMember(app, await organizationIdOf(owner), 'member');
    const made = await deployment(app, member, 'requested');
    const stream = await opened(member, made.id);

    expect(await statusOf(owner.api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: member.user.id } } }))).toBe(204);

    await waitUntil(async () => stream.closedByServer, () => 'the removed member’s stream is still open');
    await closeAll([stream]);
  });

  it('ends when its user leaves the organization', async () => {
    const owner = await registeredUser(app);
    const member = await addedMember(app, await organizationIdOf(owner), 'member');
    const made = await deployment(app, member, 'requested');
    const stream = await opened(member, made.id);

    expect(await statusOf(member.api.DELETE('/v1/organization/members/{user_id}', { params: { path: { user_id: member.user.id } } }))).toBe(204);

    await waitUntil(async () => stream.closedByServer, () => 'the stream of a member who left is still open');
    await closeAll([stream]);
  });
});

describe('event streams of one process', () => {
  it('read each event once, however many streams follow the deployment', async () => {
    const owner = await registeredUser(app);
    const made = await deployment(app, owner, 'requested');
    const streams: Stream[] = [];
    for (let i = 0; i < PER_USER; i++) streams.push(await opened(owner, made.id));
    let reads = 0;
    const count = (query: { sql: string; method?: string }) => {
      if (query.method === 'select' && query.sql.includes('"deployment_events"')) reads++;
    };
    app.db.on('query', count);
    try {
      expect(await moveDeployment(otherConnection, made.id, { from: 'requested', to: 'failed', changes: { failure_stage: 'capacity', failure_reason: 'Stopped by the test.' } })).toBe(true);
      await waitUntil(async () => streams.every((stream) => stream.closedByServer), () => 'every stream ends with the failure');
    } finally {
      app.db.off('query', count);
    }
    expect(streams.map((stream) => stream.ids.length)).toEqual(streams.map(() => 2));
    expect(reads).toBe(1);
    await closeAll(streams);
  });

  it('caps the streams of a user, and of the process, with 429 RATE_LIMITED and Retry-After', async () => {
    const owner = await registeredUser(app);
    const made = await deployment(app, owner, 'requested');
    const streams: Stream[] = [];
    for (let i = 0; i < PER_USER; i++) streams.push(await opened(owner, made.id));

    const { response: overUser } = await Stream.open(owner.browser, made.id);
    expect(overUser.status).toBe(429);
    expect(overUser.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(await overUser.json()).toMatchObject({ code: 'RATE_LIMITED' });

    // Another user may open streams until the process holds PER_PROCESS.
    const other = await registeredUser(app);
    const theirs = await deployment(app, other, 'requested');
    for (let i = PER_USER; i < PER_PROCESS; i++) streams.push(await opened(other, theirs.id));
    const { response: overProcess } = await Stream.open(other.browser, theirs.id);
    expect(overProcess.status).toBe(429);
    expect(await overProcess.json()).toMatchObject({ code: 'RATE_LIMITED' });

    // A stream that closes makes room again.
    streams.shift()?.close();
    await waitUntil(async () => app.container.eventStreams.size === PER_PROCESS - 1, () => 'the closed stream is still counted');
    streams.push(await opened(owner, made.id));
    await closeAll(streams);
  });
});
