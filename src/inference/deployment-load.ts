import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import { writeLoad, type LoadReport } from '../deployments/scaling.repository.ts';

/** How often this process reports its load (the autoscaler reads reports younger than LOAD_FRESH_SECONDS). */
const REPORT_INTERVAL_MS = 1_000;

interface Gauge {
  inFlight: number;
  held: number;
  /** Requests in flight on each replica. */
  replicas: Map<string, number>;
  lastRequestAt: Date | null;
  /** Whether the gauge moved since its last report (a gauge back at zero is reported once more, then forgotten). */
  moved: boolean;
}

/**
 * This process's requests of each deployment, in memory: in flight (on which replica) and held for a
 * cold start. The gateway counts each request as it is routed and as it ends; once a second the
 * gauges that moved are written to `deployment_load` in one statement (no write per request), where
 * the autoscaler sums every process's (src/deployments/scaling.ts). The replica counts also pick
 * the least busy replica for the next request (`inFlightOn`).
 */
export class DeploymentLoad {
  /** This process's name in the reports. */
  readonly processId = randomUUID();
  readonly #db: Knex;
  readonly #log: Logger;
  readonly #gauges = new Map<string, Gauge>();
  #timer: NodeJS.Timeout | undefined;
  #reporting: Promise<void> | undefined;

  constructor(db: Knex, log: Logger) {
    this.#db = db;
    this.#log = log;
  }

  /** A request routed to a replica of the deployment; `end` it when its answer is done. */
  begin(deploymentId: string, replicaId: string): void {
    const gauge = this.#gauge(deploymentId);
    gauge.inFlight += 1;
    gauge.replicas.set(replicaId, (gauge.replicas.get(replicaId) ?? 0) + 1);
    gauge.lastRequestAt = new Date();
    gauge.moved = true;
  }

  end(deploymentId: string, replicaId: string): void {
    const gauge = this.#gauges.get(deploymentId);
    if (!gauge) return;
    gauge.inFlight -= 1;
    const left = (gauge.replicas.get(replicaId) ?? 1) - 1;
    if (left > 0) gauge.replicas.set(replicaId, left);
    else gauge.replicas.delete(replicaId);
    gauge.moved = true;
  }

  /** A request held while the deployment has no replica ready; the returned function lets it go. */
  hold(deploymentId: string): () => void {
    const gauge = this.#gauge(deploymentId);
    gauge.held += 1;
    gauge.lastRequestAt = new Date();
    gauge.moved = true;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      gauge.held -= 1;
      gauge.moved = true;
    };
  }

  /** Requests held for the deployment in this process. */
  heldFor(deploymentId: string): number {
    return this.#gauges.get(deploymentId)?.held ?? 0;
  }

  /** Requests in flight on the replica from this process. */
  inFlightOn(deploymentId: string, replicaId: string): number {
    return this.#gauges.get(deploymentId)?.replicas.get(replicaId) ?? 0;
  }

  /** Starts reporting once a second. */
  start(): void {
    this.#timer ??= setInterval(() => void this.report(), REPORT_INTERVAL_MS).unref();
  }

  /** Stops reporting, after a last report. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.report();
  }

  /** Writes the gauges that moved since the last report (one at a time: a slow write is not overlapped). */
  async report(): Promise<void> {
    if (this.#reporting) return this.#reporting;
    const reports: LoadReport[] = [];
    for (const [deploymentId, gauge] of this.#gauges) {
      if (!gauge.moved && gauge.inFlight === 0 && gauge.held === 0) {
        this.#gauges.delete(deploymentId);
        continue;
      }
      gauge.moved = false;
      reports.push({ deploymentId, inFlight: gauge.inFlight, held: gauge.held, replicas: Object.fromEntries(gauge.replicas), lastRequestAt: gauge.lastRequestAt });
    }
    this.#reporting = writeLoad(this.#db, this.processId, reports)
      .catch((error: unknown) => this.#log.warn({ err: error }, 'could not report the deployments\' load'))
      .finally(() => {
        this.#reporting = undefined;
      });
    return this.#reporting;
  }

  #gauge(deploymentId: string): Gauge {
    let gauge = this.#gauges.get(deploymentId);
    if (!gauge) {
      gauge = { inFlight: 0, held: 0, replicas: new Map(), lastRequestAt: null, moved: true };
      this.#gauges.set(deploymentId, gauge);
    }
    return gauge;
  }
}
