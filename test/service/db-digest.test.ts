import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changedTables, tableDigester } from '../helpers/db-digest.ts';
import { startServices, type Services } from '../helpers/services.ts';

/** The "writes nothing" digest (test/helpers/db-digest.ts) sees a queued job, not only a table's row. */
let services: Services;
beforeAll(async () => {
  services = await startServices();
});
afterAll(() => services.close());

describe('the database digest', () => {
  it('changes with a row of a table and with a job queued, and not with a skipped queue’s job', async () => {
    const digest = await tableDigester(services.db, ['billing-event']);
    const before = await digest();
    await services.db.raw("insert into pgboss.job (name, data) values ('billing-event', '{}')");
    expect(changedTables(before, await digest())).toEqual([]);
    await services.db.raw("insert into pgboss.job (name, data) values ('send-email', '{\"emailId\": 1}')");
    expect(changedTables(before, await digest())).toEqual(['pgboss.job']);
    const afterJob = await digest();
    await services.owner();
    expect(changedTables(afterJob, await digest())).toEqual(expect.arrayContaining(['users', 'organizations']));
  });
});
