import type { Knex } from 'knex';

/**
 * `clusters.replica_api`: whether the cluster's engine has the replica API of Xinference 3.2
 * (`POST /v1/models/{uid}/replicas` adds a replica to a running model), detected when the cluster
 * is registered, checked and synced. Scaling a deployment needs it; engines before 3.2 lack it.
 * Null until the first detection (clusters registered before this migration, until their next
 * sync or check).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table clusters add column replica_api boolean');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table clusters drop column replica_api');
}
