import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../generated/api.d.ts';
import { insertUsageRecords } from '../../src/inference/inference.repository.ts';
import { formatCents, roundedSumCents } from '../../src/metering/money.ts';
import { upsertInvoice } from '../../src/billing/processor-state.repository.ts';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment, untilStatus } from '../factories/deployments.ts';
import { addedMember } from '../factories/organizations.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { liveBytes } from '../helpers/memory.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { runningSince } from '../helpers/time-travel.ts';

/**
 * The usage export over HTTP: usage made by real calls (a deployment that ran on the cluster
 * simulator, hosted-model calls by session and by API key through the gateway), exported by each
 * grouping in both formats, and its totals compared with the usage summary's to the cent.
 */
type UsageExport = components['schemas']['UsageExport'];
type UsageSummary = components['schemas']['UsageSummary'];
type GroupBy = components['schemas']['UsageExportGroupBy'];

let app: TestApp;
const HOSTED = 'qwen2.5-instruct';
const HOSTED_KEY = `platform::hosted_model:${HOSTED}::`;
const MiB = 1024 * 1024;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 50, tokenLatencyMs: 1 } });
  expect((await operatorCli(app, 'hosted', 'launch', HOSTED)).code).toBe(0);
});
afterAll(() => app.close());

const organizationOf = async (user: SignedInUser): Promise<number> => (await user.api.GET('/v1/organization')).data?.id ?? 0;

/** The export as JSON, through the typed client (its answer checked against the contract). */
async function exportJson(user: SignedInUser, query: { period?: string; group_by?: GroupBy }): Promise<UsageExport> {
  const { data, response } = await user.api.GET('/v1/billing/usage/export', { params: { query: { ...query, format: 'json' } } });
  expect(response.status).toBe(200);
  if (!data || typeof data === 'string') throw new Error('no JSON export');
  return data;
}

/** The export as CSV, asked for by `Accept` (no `format`): its records, parsed. */
async function exportCsv(user: SignedInUser, query: { period?: string; group_by?: GroupBy }): Promise<{ records: string[][]; disposition: string | null; text: string }> {
  const { data, response } = await user.api.GET('/v1/billing/usage/export', { params: { query }, headers: { accept: 'text/csv' }, parseAs: 'text' });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/csv; charset=utf-8');
  const text = String(data);
  return { records: parseCsv(text), disposition: response.headers.get('content-disposition'), text };
}

/** RFC 4180 records: CRLF line ends, quoted fields with doubled quotes. */
function parseCsv(text: string): string[][] {
  expect(text.endsWith('\r\n')).toBe(true);
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    if (quoted && char === '"' && text[i + 1] === '"') {
      field += '"';
      i++;
    } else if (char === '"') {
      quoted = !quoted;
    } else if (quoted || (char !== ',' && char !== '\r')) {
      field += char;
    } else if (char === ',') {
      record.push(field);
      field = '';
    } else {
      // CR LF: the record ends.
      record.push(field);
      records.push(record);
      [record, field] = [[], ''];
      i++;
    }
  }
  return records;
}

/** Each meter's rows, their exact amounts added up and rounded once: what the export says its meter totals are. */
function rowSums(rows: UsageExport['rows']): Record<string, { amount: string; quantity: Record<string, bigint> }> {
  const sums: Record<string, { amounts: string[]; quantity: Record<string, bigint> }> = {};
  for (const row of rows) {
    const meter = (sums[row.meter] ??= { amounts: [], quantity: {} });
    meter.amounts.push(row.amount);
    meter.quantity[row.service_key] = (meter.quantity[row.service_key] ?? 0n) + BigInt(row.quantity);
  }
  return Object.fromEntries(Object.entries(sums).map(([meter, { amounts, quantity }]) => [meter, { amount: formatCents(roundedSumCents(amounts)), quantity }]));
}

/** The summary's figures in the same shape. */
function summarySums(summary: UsageSummary): Record<string, { amount: string; quantity: Record<string, bigint> }> {
  return Object.fromEntries(
    summary.meter_totals.map((line) => [
      line.meter,
      {
        amount: line.estimated_amount,
        quantity: Object.fromEntries(summary.usage_totals.filter((total) => total.meter === line.meter).map((total) => [total.service_key, BigInt(total.total_quantity)])),
      },
    ]),
  );
}

describe('the usage export', () => {
  let owner: SignedInUser;
  let organizationId: number;
  let deploymentId: string;
  let keys: Array<{ id: number; name: string }>;
  let summary: UsageSummary;

  beforeAll(async () => {
    owner = await registeredUser(app);
    organizationId = await organizationOf(owner);
    // GPU seconds: a deployment that served for about three hours (the meter closing its seconds on the
    // way), then deleted, so its seconds stop growing and the summary and the exports read the same.
    const running = await deployment(app, owner, 'running');
    deploymentId = running.id;
    await runningSince(app, deploymentId, new Date(Math.floor(Date.now() / 1000) * 1000 - 3 * 3_600_000 - 17_000));
    await app.container.gpuMeter.tick(app.container.log);
    await owner.api.DELETE('/api/v1/model-deployments/{deployment_id}', { params: { path: { deployment_id: deploymentId } } });
    await untilStatus(owner, deploymentId, 'terminated');
    // Hosted tokens: by session, and by two keys (one named with what CSV must quote).
    const chat = { model: HOSTED, messages: [{ role: 'user' as const, content: 'hello there' }] };
    expect((await owner.api.POST('/v1/chat/completions', { body: chat })).response.status).toBe(200);
    keys = [];
    for (const name of ['nightly, "batch"', '=web app']) {
      const key = await apiKey(owner, [], { name, allow_hosted_models: true });
      for (let call = 0; call < 2; call++) await inferenceClient(app, key.key).chat.completions.create(chat);
      keys.push({ id: key.id, name });
    }
    await app.container.usage.flush();
    summary = (await owner.api.GET('/v1/billing/usage-summary')).data as UsageSummary;
    expect(summary.meter_totals.map((line) => line.meter)).toEqual(['gpu_instance_seconds', 'hosted_tokens']);
  });

  it.each(['service_key', 'deployment', 'api_key'] as const)('by %s, in JSON: totals exactly the usage summary’s, and the rows add up to them per meter and service', async (groupBy) => {
    const exported = await exportJson(owner, { group_by: groupBy });
    expect(exported).toMatchObject({
      period: { id: 'current', start: summary.period_start, end: summary.period_end, closed: false },
      currency: 'usd',
      group_by: groupBy,
      invoice: null,
    });
    expect(exported.totals).toEqual({ meter_totals: summary.meter_totals, estimated_total: summary.estimated_total });
    expect(rowSums(exported.rows)).toEqual(summarySums(summary));
  });

  it('groups by deployment (hosted tokens, which have none, under null) and by API key (GPU seconds and calls by session under null)', async () => {
    const byDeployment = await exportJson(owner, { group_by: 'deployment' });
    expect(byDeployment.rows.map((row) => [row.meter, row.group])).toEqual([
      ['gpu_instance_seconds', { deployment_id: deploymentId, model_name: HOSTED }],
      ['hosted_tokens', { deployment_id: null, model_name: null }],
    ]);
    const byKey = await exportJson(owner, { group_by: 'api_key' });
    const [first, second] = keys.map((key) => ({ api_key_id: key.id, name: key.name, key_prefix: expect.stringMatching(/^svc-sk-/) }));
    expect(byKey.rows.map((row) => [row.meter, row.service_key, row.group])).toEqual([
      ['gpu_instance_seconds', expect.stringContaining(':gpu_instance:'), { api_key_id: null, name: null, key_prefix: null }],
      ['hosted_tokens', HOSTED_KEY, first],
      ['hosted_tokens', HOSTED_KEY, second],
      ['hosted_tokens', HOSTED_KEY, { api_key_id: null, name: null, key_prefix: null }],
    ]);
    // Each row's amount is its quantity at the unit price, exactly.
    for (const row of byKey.rows) expect(Number(row.amount)).toBeCloseTo(Number(row.quantity) * Number(row.unit_amount_decimal), 12);
  });

  it.each(['service_key', 'deployment', 'api_key'] as const)('by %s, in CSV (Accept: text/csv): the JSON rows as usage lines, and total lines equal to the summary', async (groupBy) => {
    const [json, csv] = await Promise.all([exportJson(owner, { group_by: groupBy }), exportCsv(owner, { group_by: groupBy })]);
    expect(csv.disposition).toBe(`attachment; filename="usage-${organizationId}-${summary.period_start.slice(0, 10)}-${groupBy}.csv"`);
    const [header, ...records] = csv.records;
    expect(header).toEqual(['line', 'group_id', 'group_name', 'meter', 'service_key', 'quantity', 'unit', 'unit_amount_decimal', 'amount', 'currency']);
    const usage = records.filter((record) => record[0] === 'usage');
    expect(usage.map((record) => record.slice(3, 9))).toEqual(json.rows.map((row) => [row.meter, row.service_key, row.quantity, row.unit, row.unit_amount_decimal, row.amount]));
    expect(records.filter((record) => record[0] !== 'usage')).toEqual([
      ...summary.meter_totals.map((line) => ['meter_total', '', '', line.meter, '', '', '', '', line.estimated_amount, 'usd']),
      ['total', '', '', '', '', '', '', '', summary.estimated_total, 'usd'],
    ]);
    if (groupBy === 'api_key') {
      // Quoted as RFC 4180 says; a name a spreadsheet would run as a formula is kept from it.
      expect(csv.text).toContain(`usage,${keys[0]?.id},"nightly, ""batch""",hosted_tokens,`);
      expect(usage.map((record) => record[2])).toEqual(['', 'nightly, "batch"', "'=web app", '']);
    }
  });

  it('answers JSON without format or Accept, and format=csv whatever Accept says', async () => {
    const plain = await owner.browser.fetch('/v1/billing/usage/export');
    expect(plain.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(((await plain.json()) as UsageExport).group_by).toBe('service_key');
    const csv = await owner.browser.fetch('/v1/billing/usage/export?format=csv', { headers: { accept: 'application/json' } });
    expect(csv.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect((await csv.text()).split('\r\n')[0]).toMatch(/^line,group_id,/);
  });

  it('lets admins export and refuses members and viewers with 403 FORBIDDEN', async () => {
    const admin = await addedMember(app, organizationId, 'admin');
    expect((await exportJson(admin, { group_by: 'deployment' })).totals.estimated_total).toBe(summary.estimated_total);
    for (const role of ['member', 'viewer'] as const) {
      const user = await addedMember(app, organizationId, role);
      const { error, response } = await user.api.GET('/v1/billing/usage/export', { params: { query: {} } });
      expect(response.status).toBe(403);
      expect(error).toMatchObject({ status: 403, code: 'FORBIDDEN' });
    }
  });

  it('refuses a bad period, grouping or format with 422 VALIDATION_FAILED naming the parameter, and an invoice not the organization’s with 404', async () => {
    const now = new Date();
    const nextMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString().slice(0, 7);
    for (const [query, location] of [
      ['period=2026-13', 'query/period'],
      ['period=last', 'query/period'],
      [`period=${nextMonth}`, 'query/period'],
      ['group_by=team', 'query/group_by'],
      ['format=xml', 'query/format'],
    ] as const) {
      const response = await owner.browser.fetch(`/v1/billing/usage/export?${query}`);
      expect(response.status, query).toBe(422);
      expect(response.headers.get('content-type')).toMatch(/^application\/(problem\+)?json/);
      expect(await response.json()).toMatchObject({ status: 422, code: 'VALIDATION_FAILED', errors: [expect.objectContaining({ location })], request_id: expect.any(String) });
    }
    const { error, response } = await owner.api.GET('/v1/billing/usage/export', { params: { query: { period: 'in_NotOurs1' } } });
    expect(response.status).toBe(404);
    expect(error).toMatchObject({ code: 'NOT_FOUND' });
  });
});

describe('a closed period', () => {
  it('exports a past month, closed, beside its invoice: by month and by the invoice’s id, with whether the invoice’s lines equal the totals', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(owner);
    const now = new Date();
    const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1));
    const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    // Last month's hosted tokens, stored as the usage recorder stores them: 3 × 1,234,567 tokens at the seeded price.
    await insertUsageRecords(
      app.container.db,
      [0, 1, 2].map((i) => ({ usage_id: randomUUID(), request_id: `closed-${organizationId}-${i}`, organization_id: organizationId, deployment_id: null, api_key_id: null, user_id: owner.user.id, route: 'POST /v1/chat/completions', model: HOSTED, prompt_tokens: 1_234_567, completion_tokens: 0, total_tokens: 1_234_567, unit: 'token' as const, quantity: 1_234_567, outcome: 'completed' as const, estimated: false, created_at: new Date(start.getTime() + (i + 1) * 86_400_000) })),
    );
    const month = start.toISOString().slice(0, 7);
    const before = await exportJson(owner, { period: month });
    expect(before).toMatchObject({ period: { id: month, start: start.toISOString(), end: end.toISOString(), closed: true }, invoice: null });
    expect(before.rows).toEqual([expect.objectContaining({ meter: 'hosted_tokens', service_key: HOSTED_KEY, quantity: '3703701' })]);
    expect(formatCents(roundedSumCents(before.rows.map((row) => row.amount)))).toBe(before.totals.estimated_total);

    // The period's invoice, as the webhook job stores it; its line charges the totals' cents.
    const account = await app.db('billing_accounts').where({ organization_id: organizationId }).first('id');
    const cents = Number(before.totals.estimated_total.replace('.', ''));
    const invoice = { id: `in_closed${organizationId}`, customerId: 'cus_closed', subscriptionId: null, status: 'paid', collectionMethod: 'charge_automatically', amountDue: cents, amountPaid: cents, currency: 'usd', hostedInvoiceUrl: null, invoicePdf: null, dueDate: null, periodStart: start, periodEnd: end, created: end, number: 'CLOSED-0001', subtotal: cents, tax: 0, total: cents };
    await upsertInvoice(app.db, account.id, { ...invoice, lines: [{ description: 'hosted tokens', priceId: 'price_hosted', quantity: cents * 10_000, amount: cents, periodStart: start, periodEnd: end }] });
    for (const period of [month, invoice.id]) {
      const exported = await exportJson(owner, { period });
      expect(exported.totals).toEqual(before.totals);
      expect(exported.invoice).toEqual({ processor_invoice_id: invoice.id, status: 'paid', lines_amount: cents, matches_totals: true });
    }
    // A line the usage does not explain (a correction, say) is told apart.
    await upsertInvoice(app.db, account.id, { ...invoice, lines: [{ description: 'hosted tokens', priceId: 'price_hosted', quantity: cents * 10_000, amount: cents, periodStart: start, periodEnd: end }, { description: 'correction', priceId: null, quantity: 1, amount: 3, periodStart: start, periodEnd: end }] });
    expect((await exportJson(owner, { period: invoice.id })).invoice).toMatchObject({ lines_amount: cents + 3, matches_totals: false });
  });
});

describe('a large export', () => {
  it('streams 60,000 rows by API key while the process holds a fraction of what the rows take whole', async () => {
    const owner = await registeredUser(app);
    const organizationId = await organizationOf(owner);
    // Hosted tokens of 60,000 API keys, stored as the usage recorder stores them.
    const rows = 60_000;
    for (let first = 0; first < rows; first += 10_000) {
      await insertUsageRecords(
        app.container.db,
        Array.from({ length: 10_000 }, (_, i) => ({ usage_id: randomUUID(), request_id: `large-${organizationId}-${first + i}`, organization_id: organizationId, deployment_id: null, api_key_id: 1_000_000 + first + i, user_id: null, route: 'POST /v1/chat/completions', model: HOSTED, prompt_tokens: 7, completion_tokens: 0, total_tokens: 7, unit: 'token' as const, quantity: 7 + ((first + i) % 13), outcome: 'completed' as const, estimated: false, created_at: new Date() })),
      );
    }
    const summary = (await owner.api.GET('/v1/billing/usage-summary')).data as UsageSummary;
    // What this process (client and app) holds live, sampled after a collection at each MiB received.
    const baseline = liveBytes();
    let peak = baseline;
    let [bytes, lines, tail, last] = [0, 0, '', [] as string[]];
    const response = await owner.browser.fetch('/v1/billing/usage/export?group_by=api_key&format=csv');
    expect(response.status).toBe(200);
    const decoder = new TextDecoder();
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      if (Math.floor((bytes + chunk.byteLength) / MiB) > Math.floor(bytes / MiB)) peak = Math.max(peak, liveBytes());
      bytes += chunk.byteLength;
      const text = tail + decoder.decode(chunk, { stream: true });
      const cut = text.lastIndexOf('\r\n') + 2;
      const complete = text.slice(0, cut).split('\r\n').slice(0, -1);
      [lines, last, tail] = [lines + complete.length, [...last, ...complete].slice(-3), text.slice(cut)];
    }
    expect([lines, tail]).toEqual([1 + rows + 2, '']);
    expect(last).toEqual([expect.stringMatching(/^usage,1059999,,hosted_tokens,/), `meter_total,,,hosted_tokens,,,,,${summary.estimated_total},usd`, `total,,,,,,,,${summary.estimated_total},usd`]);
    expect(bytes).toBeGreaterThan(5 * MiB);
    // A batch of rows and the sockets' buffers: 1 to 4 MB seen (the more, the busier the machine). The
    // rows held whole before writing (tried once, a cursor batch of a million) took 45 MB.
    expect(peak - baseline).toBeLessThan(12 * MiB);
  }, 60_000);
});
