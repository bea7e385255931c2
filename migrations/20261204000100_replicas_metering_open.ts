import type { Knex } from 'knex';

/** What made a replica's GPU seconds still to be closed, as the partial indexes spelled it before. */
const SECONDS_TO_CLOSE = 'running_since is not null and (running_until is null or accrued_until is distinct from running_until)';

/**
 * `deployment_replicas.metering_open` (issue #39): true while a replica has GPU seconds still to be
 * closed (it serves, or it stopped serving since its last interval), stored, generated from the
 * columns the meter writes. The meter's work list and the usage summary read it instead of the
 * predicate, and the two partial indexes that served the predicate are made again on it.
 *
 * Postgres cannot estimate `accrued_until is distinct from running_until` (two columns compared),
 * so it estimated the partial index of an organization with 200,000 replicas, 900 of them open, at
 * about 199,000 rows; where its closed replicas had no GPU service key, the custom plans of the
 * usage summary's first five executions on each connection then chose a Gather with two workers for
 * a scan of 900 rows (docs/performance.md, Usage summary). A column has statistics of its own: the
 * estimate follows the open replicas (about 1,500 there).
 *
 * Adding a stored column rewrites the table and rebuilds its indexes under an exclusive lock: no
 * replica is read or written meanwhile (3.6 to 4.4 s with the new indexes and ANALYZE for 500,000
 * replicas, 118 MB, on a shared 2-core machine). Then ANALYZE, so the column has statistics from the
 * first read rather than from autovacuum's next pass (without them a boolean column is taken as
 * true for half the rows).
 *
 * Nothing to do on `deployments`: its partial indexes of the same predicate
 * (`deployments_gpu_metering`, `deployments_metered_by_organization`) went with its metering
 * columns in 20261201000000_deployment_replicas.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployment_replicas add column metering_open boolean not null generated always as (${SECONDS_TO_CLOSE}) stored;
    drop index deployment_replicas_gpu_metering;
    drop index deployment_replicas_metered_by_organization;
    create index deployment_replicas_gpu_metering on deployment_replicas (deployment_id) where metering_open;
    create index deployment_replicas_metered_by_organization on deployment_replicas (organization_id) where metering_open;
    analyze deployment_replicas;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    drop index deployment_replicas_gpu_metering;
    drop index deployment_replicas_metered_by_organization;
    alter table deployment_replicas drop column metering_open;
    create index deployment_replicas_gpu_metering on deployment_replicas (deployment_id) where ${SECONDS_TO_CLOSE};
    create index deployment_replicas_metered_by_organization on deployment_replicas (organization_id) where ${SECONDS_TO_CLOSE};
  `);
}
