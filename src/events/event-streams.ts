import type { Request, Response } from 'express';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { components } from '../../generated/api.d.ts';
import type { DeploymentEventRow } from '../db/models/deployment-events.ts';
import { isFinal, type DeploymentStatus } from '../deployments/deployment-states.ts';
import { AppError } from '../errors.ts';
import { eventsAfter, toDeploymentEvent } from './events.repository.ts';

/** Events read per query while catching up. */
const BATCH = 500;
/** A client that has not taken this much of what was written is dropped (it reconnects with Last-Event-ID). */
const BACKLOG_LIMIT = 1024 * 1024;
/** How long an EventSource waits before reconnecting (the stream's first line). */
const RETRY_MS = 3000;

type StreamEnd = components['schemas']['DeploymentEventStreamEnd'];

/** Who opened a stream, and how to tell whether they still may follow it. */
export interface StreamOwner {
  userId: number;
  /**
   * Whether the session the stream was opened with still exists and still reaches the deployment
   * (asked when the user's access changed); false ends the stream.
   */
  stillAllowed(): Promise<boolean>;
}

/** How many streams may be open at once in this process, in all and per user. */
export interface StreamLimits {
  perProcess: number;
  perUser: number;
}

/** The Retry-After of the 429 for a stream over a cap (streams close when their clients leave). */
const CAP_RETRY_AFTER_SECONDS = 30;

/**
 * The open deployment event streams of this process (server-sent events): each sends the history
 * after the id it resumes from, then what each notification (`notify`, from the change listener)
 * says is new. The streams of one deployment share one feed: one read per event per process. A
 * notification during a read makes the feed read again, and a reconnected listener makes every feed
 * re-read, so nothing is lost; events of one deployment commit in id order, so "after the last id"
 * never skips one. A stream ends at a final status, when its user's access ends, or at shutdown;
 * streams are capped per process and per user (docs/events-and-webhooks.md, The stream).
 */
export class DeploymentEventStreams {
  readonly #db: Knex;
  readonly #log: Logger;
  readonly #heartbeatMs: number;
  readonly #limits: StreamLimits;
  readonly #feeds = new Map<string, DeploymentFeed>();
  readonly #byUser = new Map<number, Set<EventStream>>();
  #size = 0;
  #closed = false;

  constructor(deps: { db: Knex; log: Logger; heartbeatMs: number; limits: StreamLimits }) {
    this.#db = deps.db;
    this.#log = deps.log;
    this.#heartbeatMs = deps.heartbeatMs;
    this.#limits = deps.limits;
  }

  /**
   * Starts the stream on `res`: headers, the history after `lastEventId`, then live events until
   * the client leaves, the deployment is final, or the owner's access ends. `status` is the
   * deployment's, read before the stream opened (the events read after it are as new or newer).
   */
  open(req: Request, res: Response, stream: { deploymentId: string; lastEventId: string | undefined; status: DeploymentStatus; owner: StreamOwner }): void {
    if (this.#closed) throw new AppError('SERVICE_UNAVAILABLE', 'The server is shutting down; reconnect.');
    const { deploymentId, owner } = stream;
    if (this.#size >= this.#limits.perProcess) {
      throw new AppError('RATE_LIMITED', `This server already has ${this.#limits.perProcess} event streams open; retry later.`, {
        headers: { 'Retry-After': String(CAP_RETRY_AFTER_SECONDS) },
      });
    }
    const ofUser = this.#byUser.get(owner.userId) ?? new Set<EventStream>();
    if (ofUser.size >= this.#limits.perUser) {
      throw new AppError('RATE_LIMITED', `You already have ${this.#limits.perUser} event streams open; close one (or retry later).`, {
        headers: { 'Retry-After': String(CAP_RETRY_AFTER_SECONDS) },
      });
    }
    res.statusCode = 200;
    res.setHeader('Content-Type', 'text/event-stream');
    res.setHeader('Cache-Control', 'no-cache, no-transform');
    // Proxies (nginx) pass each event on at once instead of buffering the answer.
    res.setHeader('X-Accel-Buffering', 'no');
    res.flushHeaders();
    res.write(`retry: ${RETRY_MS}\n\n`);
    let feed = this.#feeds.get(deploymentId);
    if (!feed) {
      feed = new DeploymentFeed(deploymentId, { read: (after) => eventsAfter(this.#db, deploymentId, after, BATCH), log: this.#log });
      this.#feeds.set(deploymentId, feed);
    }
    const opened: EventStream = new EventStream(res, deploymentId, stream.lastEventId, stream.status, {
      owner,
      closed: () => this.#remove(opened),
      log: this.#log,
      heartbeatMs: this.#heartbeatMs,
    });
    feed.streams.add(opened);
    ofUser.add(opened);
    this.#byUser.set(owner.userId, ofUser);
    this.#size++;
    req.on('close', () => opened.close());
    // Subscribed first, then the history: an event committed meanwhile is read by this pull or the next.
    feed.pull();
  }

  /** A process committed an event of the deployment. */
  notify(deploymentId: string): void {
    this.#feeds.get(deploymentId)?.pull();
  }

  /** Notifications may have been missed: every feed reads what is new. */
  resync(): void {
    for (const feed of this.#feeds.values()) feed.pull();
  }

  /** The user's sessions or memberships changed (in any process): each of their streams checks it may go on. */
  accessChanged(userId: number): void {
    for (const stream of this.#byUser.get(userId) ?? []) stream.recheck();
  }

  /** Access changes may have been missed: every stream checks it may go on. */
  recheckAll(): void {
    for (const streams of this.#byUser.values()) for (const stream of streams) stream.recheck();
  }

  /** How many streams are open in this process. */
  get size(): number {
    return this.#size;
  }

  /** Ends every stream (shutdown); no new one opens. */
  closeAll(): void {
    this.#closed = true;
    for (const feed of [...this.#feeds.values()]) for (const stream of [...feed.streams]) stream.close();
  }

  #remove(stream: EventStream): void {
    const feed = this.#feeds.get(stream.deploymentId);
    if (feed?.streams.delete(stream)) this.#size--;
    if (feed && !feed.streams.size) this.#feeds.delete(stream.deploymentId);
    const ofUser = this.#byUser.get(stream.userId);
    ofUser?.delete(stream);
    if (ofUser && !ofUser.size) this.#byUser.delete(stream.userId);
  }
}

/** Ids compared as the numbers they are (bigint in Postgres, text here); undefined is before every id. */
function isAfter(id: string, than: string | undefined): boolean {
  return than === undefined || BigInt(id) > BigInt(than);
}

/**
 * The streams of one deployment and the one read they share. A read starts after the oldest last
 * id of the streams; its events go to every stream that had everything up to where it started (a
 * stream that joined further back waits for the read its joining asked for, so it never gets a
 * later event before an earlier one).
 */
class DeploymentFeed {
  readonly streams = new Set<EventStream>();
  readonly #deploymentId: string;
  readonly #deps: { read(after: string | undefined): Promise<DeploymentEventRow[]>; log: Logger };
  #reading = false;
  #again = false;

  constructor(deploymentId: string, deps: { read(after: string | undefined): Promise<DeploymentEventRow[]>; log: Logger }) {
    this.#deploymentId = deploymentId;
    this.#deps = deps;
  }

  /** Reads what is new for the streams; while a read runs, it runs once more afterwards. */
  pull(): void {
    if (!this.streams.size) return;
    if (this.#reading) {
      this.#again = true;
      return;
    }
    this.#reading = true;
    this.#again = false;
    void this.#catchUp().finally(() => {
      this.#reading = false;
      // A notification (or a new stream) that came while the last read was finishing.
      if (this.#again) this.pull();
    });
  }

  async #catchUp(): Promise<void> {
    try {
      let after = this.#oldest();
      for (;;) {
        const from = after;
        const rows = await this.#deps.read(from);
        const receivers = [...this.streams].filter((stream) => !stream.isBehind(from));
        for (const stream of receivers) stream.send(rows);
        if (rows.length < BATCH) break;
        after = rows.at(-1)?.id;
      }
      for (const stream of [...this.streams]) if (!stream.isBehind(after)) stream.endIfFinal();
    } catch (error) {
      // The clients reconnect with Last-Event-ID and miss nothing.
      this.#deps.log.warn({ err: error, deployment_id: this.#deploymentId }, 'could not read deployment events; ending the streams');
      for (const stream of [...this.streams]) stream.close();
    }
  }

  /** The last id of the stream furthest behind (undefined: one wants the whole history). */
  #oldest(): string | undefined {
    let oldest: string | undefined;
    let first = true;
    for (const stream of this.streams) {
      const last = stream.lastId;
      if (last === undefined) return undefined;
      if (first || BigInt(last) < BigInt(oldest as string)) oldest = last;
      first = false;
    }
    return oldest;
  }
}

class EventStream {
  readonly deploymentId: string;
  readonly userId: number;
  readonly #res: Response;
  readonly #deps: { owner: StreamOwner; closed(): void; log: Logger };
  readonly #heartbeat: NodeJS.Timeout;
  #lastId: string | undefined;
  /** The deployment's status as of the last event sent (at first, as of the stream's opening). */
  #status: DeploymentStatus;
  #checking = false;
  #checkAgain = false;
  #closed = false;

  constructor(
    res: Response,
    deploymentId: string,
    lastId: string | undefined,
    status: DeploymentStatus,
    deps: { owner: StreamOwner; closed(): void; log: Logger; heartbeatMs: number },
  ) {
    this.#res = res;
    this.deploymentId = deploymentId;
    this.userId = deps.owner.userId;
    this.#lastId = lastId;
    this.#status = status;
    this.#deps = deps;
    this.#heartbeat = setInterval(() => this.#write(': keep-alive\n\n'), deps.heartbeatMs);
  }

  get lastId(): string | undefined {
    return this.#lastId;
  }

  /** Whether the stream misses events up to `id` (a read after `id` would leave a gap). */
  isBehind(id: string | undefined): boolean {
    return id !== undefined && isAfter(id, this.#lastId);
  }

  /** Sends the events of `rows` after the last one sent. */
  send(rows: readonly DeploymentEventRow[]): void {
    for (const row of rows) {
      if (this.#closed) return;
      if (!isAfter(row.id, this.#lastId)) continue;
      this.#write(`id: ${row.id}\nevent: ${row.type}\ndata: ${JSON.stringify(toDeploymentEvent(row))}\n\n`);
      this.#lastId = row.id;
      this.#status = row.to_status;
    }
  }

  /** Caught up: a deployment nothing but its owner moves any more ends the stream. */
  endIfFinal(): void {
    if (this.#closed || !isFinal(this.#status)) return;
    // No `id:`, so a client that reconnects resumes after the last event.
    const end: StreamEnd = { type: 'end', deployment_id: this.deploymentId, status: this.#status };
    this.#write(`event: end\ndata: ${JSON.stringify(end)}\n\n`);
    this.close();
  }

  /** Asks the owner whether the stream may go on, and ends it if not (one check at a time; one more if asked meanwhile). */
  recheck(): void {
    if (this.#closed) return;
    if (this.#checking) {
      this.#checkAgain = true;
      return;
    }
    this.#checking = true;
    this.#checkAgain = false;
    void this.#deps.owner
      .stillAllowed()
      .catch((error: unknown) => {
        this.#deps.log.warn({ err: error, deployment_id: this.deploymentId }, 'could not check an event stream’s access; ending it');
        return false;
      })
      .then((allowed) => {
        this.#checking = false;
        if (!allowed) this.close();
        else if (this.#checkAgain) this.recheck();
      });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#heartbeat);
    this.#deps.closed();
    this.#res.end();
  }

  #write(chunk: string): void {
    if (this.#closed) return;
    if (this.#res.writableLength > BACKLOG_LIMIT) {
      this.#deps.log.warn({ deployment_id: this.deploymentId }, 'a deployment event stream fell behind; ending it');
      this.close();
      return;
    }
    this.#res.write(chunk);
  }
}
