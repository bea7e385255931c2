import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';

/** Each database's installation id, read once per process (it never changes). */
const ids = new WeakMap<Knex, Promise<string>>();

/**
 * The installation's random id (table `installation`, migration `20261128210000_billing_stripe_rules`):
 * the prefix of every identifier and idempotency key sent to the payment processor, which keeps them
 * account-wide. Made by the first process that asks (concurrent first asks agree on one).
 */
export function installationId(db: Knex): Promise<string> {
  let id = ids.get(db);
  if (!id) {
    id = db
      .raw<{ rows: Array<{ id: string }> }>(
        `with made as (insert into installation (id) values (?) on conflict (singleton) do nothing returning id)
         select id from made union all select id from installation limit 1`,
        [randomBytes(8).toString('hex')],
      )
      .then(({ rows }) => {
        const [row] = rows;
        if (!row) throw new Error('the installation id could not be made');
        return row.id;
      });
    id.catch(() => ids.delete(db));
    ids.set(db, id);
  }
  return id;
}
