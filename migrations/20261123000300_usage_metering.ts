import type { Knex } from 'knex';

/**
 * Usage keyed on a server-made id: `usage_id` is made by the service for each inference request,
 * so no client can merge its calls into one row or pre-claim another tenant's ids. `request_id`
 * becomes a label (the id echoed in `X-Request-Id`, the client's own when it sent a well-formed
 * one). Every route is metered in its own unit: `token` (chat, embeddings, rerank), `image`
 * (image generation) or `request` (transcriptions). `outcome` says whether the answer was delivered
 * in full; `estimated` marks token counts the engine did not report (see docs/decisions/2026-11-23-usage-records.md).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table usage_records drop constraint usage_records_request_id_key;
    create index usage_records_request on usage_records (request_id);

    alter table usage_records add column usage_id uuid not null default gen_random_uuid();
    alter table usage_records add constraint usage_records_usage_id_key unique (usage_id);

    alter table usage_records
      add column unit text not null default 'token' check (unit in ('token', 'image', 'request')),
      add column quantity bigint not null default 0 check (quantity >= 0),
      add column outcome text not null default 'completed' check (outcome in ('completed', 'aborted')),
      add column estimated boolean not null default false;
    update usage_records set quantity = total_tokens;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table usage_records drop column unit, drop column quantity, drop column outcome, drop column estimated, drop column usage_id;
    drop index usage_records_request;
    delete from usage_records u using usage_records v where u.request_id = v.request_id and u.id > v.id;
    alter table usage_records add constraint usage_records_request_id_key unique (request_id);
  `);
}
