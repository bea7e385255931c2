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

/**
 * The open deployment event streams of this process (server-sent events). A stream is opened with
 * the id it resumes after; it sends the history from there, then whatever each notification says
 * is new: one LISTEN connection per process (the change listener) calls `notify` with the
 * deployment's id when any process commits an event, and the stream re-reads the log after the
 * last id it sent. A notification that arrives while a read is under way makes it read once more,
 * so none is lost; after the listener reconnects (notifications may have been missed) every
 * stream re-reads. Events of one deployment commit in id order (events.repository.ts), so reading
 * "after the last id" never skips one. A `: keep-alive` comment goes out every heartbeat; at
 * shutdown every stream is ended (clients reconnect elsewhere and resume). Once a read finds
 * nothing more and the deployment is in a final status (its last event's, or at open the
 * deployment's own when nothing follows `lastEventId`), the stream sends `end` and closes.
 */
export class DeploymentEventStreams {
  readonly #db: Knex;
  readonly #log: Logger;
  readonly #heartbeatMs: number;
  readonly #byDeployment = new Map<string, Set<EventStream>>();
  #closed = false;

  constructor(deps: { db: Knex; log: Logger; heartbeatMs: number }) {
    this.#db = deps.db;
    this.#log = deps.log;
    this.#heartbeatMs = deps.heartbeatMs;
  }

  /**
   * Starts the stream on `res`: headers, the history after `lastEventId`, then live events until
   * the client leaves or the deployment is final. `status` is the deployment's, read before the
   * stream opened (the events read after it are as new or newer).
   */
  open(req: Request, res: Response, deploymentId: string, lastEventId: string | undefined, status: DeploymentStatus): void {
    if (this.#closed) throw new AppError('SERVICE_UNAVAILABLE', 'The server is shutting down; reconnect.');
    res.statusCode = 200;
    res.setHeader('Content-Type', 'text/event-stream');
    res.setHeader('Cache-Control', 'no-cache, no-transform');
    // Proxies (nginx) pass each event on at once instead of buffering the answer.
    res.setHeader('X-Accel-Buffering', 'no');
    res.flushHeaders();
    res.write(`retry: ${RETRY_MS}\n\n`);
    const stream = new EventStream(res, deploymentId, lastEventId, status, {
      read: (after) => eventsAfter(this.#db, deploymentId, after, BATCH),
      closed: () => this.#remove(stream),
      log: this.#log,
      heartbeatMs: this.#heartbeatMs,
    });
    const streams = this.#byDeployment.get(deploymentId) ?? new Set<EventStream>();
    streams.add(stream);
    this.#byDeployment.set(deploymentId, streams);
    req.on('close', () => stream.close());
    // Subscribed first, then the history: an event committed meanwhile is read by this pull or the next.
    stream.pull();
  }

  /** A process committed an event of the deployment. */
  notify(deploymentId: string): void {
    for (const stream of this.#byDeployment.get(deploymentId) ?? []) stream.pull();
  }

  /** Notifications may have been missed: every stream reads what is new. */
  resync(): void {
    for (const streams of this.#byDeployment.values()) for (const stream of streams) stream.pull();
  }

  /** How many streams are open in this process. */
  get size(): number {
    let count = 0;
    for (const streams of this.#byDeployment.values()) count += streams.size;
    return count;
  }

  /** Ends every stream (shutdown); no new one opens. */
  closeAll(): void {
    this.#closed = true;
    for (const streams of [...this.#byDeployment.values()]) for (const stream of [...streams]) stream.close();
  }

  #remove(stream: EventStream): void {
    const streams = this.#byDeployment.get(stream.deploymentId);
    streams?.delete(stream);
    if (streams && !streams.size) this.#byDeployment.delete(stream.deploymentId);
  }
}

class EventStream {
  readonly deploymentId: string;
  readonly #res: Response;
  readonly #deps: { read(after: string | undefined): Promise<DeploymentEventRow[]>; closed(): void; log: Logger };
  readonly #heartbeat: NodeJS.Timeout;
  #lastId: string | undefined;
  /** The deployment's status as of the last event sent (at first, as of the stream's opening). */
  #status: DeploymentStatus;
  #reading = false;
  #again = false;
  #closed = false;

  constructor(
    res: Response,
    deploymentId: string,
    lastId: string | undefined,
    status: DeploymentStatus,
    deps: { read(after: string | undefined): Promise<DeploymentEventRow[]>; closed(): void; log: Logger; heartbeatMs: number },
  ) {
    this.#res = res;
    this.deploymentId = deploymentId;
    this.#lastId = lastId;
    this.#status = status;
    this.#deps = deps;
    this.#heartbeat = setInterval(() => this.#write(': keep-alive\n\n'), deps.heartbeatMs);
  }

  /** Sends the events after the last one sent; while a read runs, it runs once more afterwards. */
  pull(): void {
    if (this.#closed) return;
    if (this.#reading) {
      this.#again = true;
      return;
    }
    this.#reading = true;
    this.#again = false;
    void this.#catchUp().finally(() => {
      this.#reading = false;
      // A notification that came while the last read was finishing.
      if (this.#again) this.pull();
    });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#heartbeat);
    this.#deps.closed();
    this.#res.end();
  }

  async #catchUp(): Promise<void> {
    try {
      for (;;) {
        const rows = await this.#deps.read(this.#lastId);
        for (const row of rows) {
          if (this.#closed) return;
          this.#write(`id: ${row.id}\nevent: ${row.type}\ndata: ${JSON.stringify(toDeploymentEvent(row))}\n\n`);
          this.#lastId = row.id;
          this.#status = row.to_status;
        }
        if (rows.length < BATCH) break;
      }
      if (this.#closed || !isFinal(this.#status)) return;
      // Caught up with a deployment nothing but its owner moves any more: the stream is done. No
      // `id:`, so a client that reconnects resumes after the last event.
      const end: StreamEnd = { type: 'end', deployment_id: this.deploymentId, status: this.#status };
      this.#write(`event: end\ndata: ${JSON.stringify(end)}\n\n`);
      this.close();
    } catch (error) {
      // The client reconnects with Last-Event-ID and misses nothing.
      this.#deps.log.warn({ err: error, deployment_id: this.deploymentId }, 'could not read deployment events; ending the stream');
      this.close();
    }
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
