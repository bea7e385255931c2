import type { Knex } from 'knex';

/**
 * `hosted_model_endpoints.engine_unhealthy_since`: since when the engine has reported a running
 * hosted model not ready (an auto-recovery), as `deployments.engine_unhealthy_since` is for
 * deployments: the reconciler checks hosted models too (issue 32 item 23; the review's N5), and
 * fails one that does not come back within the recovery grace.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table hosted_model_endpoints add column engine_unhealthy_since timestamptz');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table hosted_model_endpoints drop column engine_unhealthy_since');
}
