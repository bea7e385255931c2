import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { JobDefinition } from '../jobs/queue.ts';
import { billingPeriodBounds, currentSecond, findGpuMeteringDue, gpuServiceKeyOf, insertGpuInterval, lockMeteredReplicas, recordAccruedUntil, type MeteredReplica } from './metering.repository.ts';

export const METER_GPU_SECONDS_QUEUE = 'meter-gpu-seconds';

/** What one accrual closed. */
export interface Accrual {
  deploymentId: string;
  seconds: number;
}

/**
 * The `gpu_instance_seconds` meter: each replica of a deployment accrues from `running_since` to
 * `running_until` (the seconds it served), or to now while it serves. An accrual of a deployment
 * closes one interval per replica from the replica's `accrued_until`, under the deployment's row
 * lock, and moves `accrued_until` in the same transaction: the bounds come from the data, never
 * from when the tick ran, so a missed tick is caught up and no second is counted twice. An accrual
 * across a billing period's bound closes one interval on each side (docs/billing.md, Metering and
 * prices).
 */
export class GpuMeter {
  readonly #db: Knex;

  constructor(db: Knex) {
    this.#db = db;
  }

  /**
   * Closes the seconds of every deployment due, each in its own transaction; a deployment that
   * cannot be closed is logged and the others go on. `at` stands for now (tests simulate time with
   * it); by default the database clock.
   */
  async tick(log: Logger, at?: Date): Promise<Accrual[]> {
    const closed: Accrual[] = [];
    let failures = 0;
    for (const deploymentId of await findGpuMeteringDue(this.#db)) {
      try {
        const seconds = await this.accrue(deploymentId, at);
        if (seconds) closed.push({ deploymentId, seconds });
      } catch (error) {
        failures++;
        log.error({ err: error, deployment_id: deploymentId }, 'GPU seconds of a deployment could not be closed; the next tick tries again');
      }
    }
    if (failures) throw new Error(`GPU seconds of ${failures} deployments could not be closed`);
    return closed;
  }

  /** Closes the seconds of the deployment's replicas up to now (or `at`, or the second each stopped serving): the seconds added. */
  async accrue(deploymentId: string, at?: Date): Promise<number> {
    return this.#db.transaction(async (trx) => {
      const metered = await lockMeteredReplicas(trx, deploymentId);
      if (!metered?.replicas.length) return 0;
      const now = at ? wholeSecond(at) : await currentSecond(trx);
      const bounds = await billingPeriodBounds(trx, metered.organizationId);
      let seconds = 0;
      for (const replica of metered.replicas) {
        seconds += await closeReplica(trx, { deploymentId, organizationId: metered.organizationId }, replica, now, bounds);
      }
      return seconds;
    });
  }
}

/** Closes a replica's seconds up to `now` (or the second it stopped serving), one interval per billing period; the seconds added. */
async function closeReplica(
  trx: Knex.Transaction,
  deployment: { deploymentId: string; organizationId: number },
  replica: MeteredReplica,
  now: Date,
  periodBounds: readonly Date[],
): Promise<number> {
  const start = replica.accrued_until ?? (replica.running_since as Date);
  const end = replica.running_until ?? now;
  if (end <= start) {
    // Stopped serving within the second already closed: nothing more to count, and nothing due.
    if (replica.running_until) await recordAccruedUntil(trx, replica.id, replica.running_until);
    return 0;
  }
  const serviceKey = replica.gpu_service_key ?? (await gpuServiceKeyOf(trx, replica.id));
  if (!serviceKey) throw new Error(`replica ${replica.id} of deployment ${deployment.deploymentId} served without GPUs placed: its seconds have no service to be priced as`);
  // One interval per billing period it covers: each is reported (and invoiced) in its own period.
  const cuts = periodBounds.filter((bound) => start < bound && bound < end);
  const bounds = [start, ...cuts, end];
  for (let i = 0; i + 1 < bounds.length; i++) {
    await insertGpuInterval(trx, {
      deployment_id: deployment.deploymentId,
      replica_id: replica.id,
      organization_id: deployment.organizationId,
      service_key: serviceKey,
      started_at: bounds[i] as Date,
      ended_at: bounds[i + 1] as Date,
    });
  }
  await recordAccruedUntil(trx, replica.id, end, serviceKey);
  return (end.getTime() - start.getTime()) / 1000;
}

function wholeSecond(at: Date): Date {
  return new Date(Math.floor(at.getTime() / 1000) * 1000);
}

/** Every minute, the GPU seconds of serving replicas (and of those that just stopped serving) are closed. */
export function meterGpuSecondsJob(meter: GpuMeter): JobDefinition<object> {
  return {
    queue: METER_GPU_SECONDS_QUEUE,
    schedule: '* * * * *',
    async handle(_data, { log }) {
      const closed = await meter.tick(log);
      if (closed.length) log.debug({ deployments: closed.length, seconds: closed.reduce((sum, a) => sum + a.seconds, 0) }, 'GPU seconds closed');
    },
  };
}
