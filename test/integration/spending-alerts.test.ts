import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { team, type Team } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { operatorCli } from '../helpers/operator-cli.ts';

/**
 * Spending alerts (src/billing/spending-alerts.ts): an organization's admins are emailed at 50 %,
 * 80 % and 100 % of its monthly spending limit, each once per period. The spending is real: a
 * hosted model's tokens at a price set through the operator CLI, called through the proxy; the
 * check is the scheduled job's, run here rather than awaited for a minute.
 */
let app: TestApp;
let people: Team;
let organizationId: number;
let key: string;
const HOSTED = 'llama-3.1-instruct';

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 1 } });
  await operatorCli(app, 'hosted', 'launch', HOSTED);
  // A cent for every ten tokens: a few answers spend a few cents.
  await operatorCli(app, 'prices', 'set', `platform::hosted_model:${HOSTED}::`, '0.001');
  people = await team(app);
  organizationId = (await people.super_admin.api.GET('/v1/organization')).data?.id ?? 0;
  key = (await apiKey(people.super_admin, [], { allow_hosted_models: true })).key;
});
afterAll(() => app.close());

/** The period's estimated spending, as the usage summary shows it once the usage recorded so far is stored (within a second otherwise). */
async function spent(): Promise<number> {
  await app.container.usage.flush();
  const { data } = await people.super_admin.api.GET('/v1/billing/usage-summary');
  return Number(data?.estimated_total ?? 0);
}

/** Calls the hosted model until the period's spending reaches `dollars` (at most 100 calls). */
async function spendUntil(dollars: number): Promise<void> {
  for (let calls = 0; (await spent()) < dollars; calls++) {
    if (calls >= 100) throw new Error(`spending did not reach $${dollars}`);
    const response = await fetch(`${app.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: HOSTED, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
  }
}

const alertsTo = (email: string) => app.inbox.all(email).filter((mail) => /spending limit/.test(mail.subject));
const check = () => app.container.spendingAlerts.check(organizationId);

describe('spending alerts', () => {
  it('emails the admins at 50, 80 and 100 % of the monthly spending limit, each once per period', async () => {
    const { super_admin: owner, admin, member } = people;
    expect((await owner.api.PUT('/v1/billing/spending-limit', { body: { monthly_spending_limit: '0.20', currency: 'usd' } })).response.status).toBe(200);
    expect(await check()).toBe(0);

    await spendUntil(0.1);
    expect(await check()).toBe(1);
    const fifty = await app.inbox.next(admin.email, { subject: 'has used 50 % of its monthly spending limit' });
    expect(fifty.text).toContain('of its monthly spending limit of $0.20');
    await app.inbox.next(owner.email, { subject: 'has used 50 % of its monthly spending limit' });
    // Once per period: checking again sends nothing.
    expect(await check()).toBe(0);

    await spendUntil(0.16);
    expect(await check()).toBe(1);
    await app.inbox.next(admin.email, { subject: 'has used 80 % of its monthly spending limit' });

    await spendUntil(0.2);
    expect(await check()).toBe(1);
    const reached = await app.inbox.next(owner.email, { subject: 'has reached its monthly spending limit' });
    expect(reached.text).toContain('New deployments are refused');
    expect(await check()).toBe(0);

    const rows = await app.db('spending_alerts').where({ organization_id: organizationId }).orderBy('threshold_percent').pluck('threshold_percent');
    expect(rows).toEqual([50, 80, 100]);
    // Each admin got each alert: those not taken out of the inbox above (\`next\` takes one) are there, and no other.
    await app.inbox.next(admin.email, { subject: 'has reached its monthly spending limit' });
    await app.inbox.next(owner.email, { subject: 'has used 80 % of its monthly spending limit' });
    expect(alertsTo(admin.email)).toEqual([]);
    expect(alertsTo(owner.email)).toEqual([]);
    // Members are not told: the alerts' emails are queued in the transaction that records each
    // threshold, so the outbox, read now, holds every alert email there will be.
    const queued = await app.db('emails').where({ template: 'spending_alert' }).whereIn('to_address', [owner.email, admin.email, member.email]).pluck('to_address');
    expect(queued.sort()).toEqual([admin.email, admin.email, admin.email, owner.email, owner.email, owner.email].sort());
    expect(alertsTo(member.email)).toHaveLength(0);
  });

  it('sends nothing for an organization without a limit', async () => {
    const other = await team(app);
    const otherId = (await other.super_admin.api.GET('/v1/organization')).data?.id ?? 0;
    expect(await app.container.spendingAlerts.check(otherId)).toBe(0);
  });
});
