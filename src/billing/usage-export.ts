import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import type { BillingAccountRow } from '../db/models/billing-accounts.ts';
import type { InvoiceRow } from '../db/models/invoices.ts';
import { AppError } from '../errors.ts';
import { currentSecond, usageExportRowsQuery, type Period, type UsageExportRow as OwnerRow, type UsageTotalRow } from '../metering/metering.repository.ts';
import { toCents } from '../metering/money.ts';
import { currentPeriod, periodUsage } from '../metering/usage-summary.ts';
import { findBillingAccount } from './billing.repository.ts';
import { findInvoiceOf, findInvoiceOfPeriod } from './processor-state.repository.ts';

type Schemas = components['schemas'];
export type UsageExportGroupBy = Schemas['UsageExportGroupBy'];
export type UsageExportFormat = Schemas['UsageExportFormat'];
type ExportRow = Schemas['UsageExportRow'];
/** Everything of the export but its rows, known before the first row is read. */
type ExportHead = Omit<Schemas['UsageExport'], 'rows'>;

/** Rows read from the cursor per round trip: a batch is what the export holds in memory at once. */
const BATCH = 1000;

/** An export under way: its head, then its rows in batches, read in one database snapshot. */
export interface UsageExport {
  head: ExportHead;
  /** The rows, in batches as they are asked for (read through a cursor for owners' rows). */
  batches(): AsyncGenerator<ExportRow[]>;
  /** Ends the snapshot; called once the rows are written or the client left (again: nothing). */
  close(): Promise<void>;
}

/** A `period` as asked for: the summary's current period, a calendar month (UTC), or an invoice's. */
export type PeriodRequest = { kind: 'current' } | { kind: 'month'; start: Date; end: Date } | { kind: 'invoice'; id: string };

/** `current`, `YYYY-MM` or `in_…` (the contract's pattern checked it already). */
export function parsePeriod(period: string): PeriodRequest {
  if (period === 'current') return { kind: 'current' };
  const month = /^(\d{4})-(\d{2})$/.exec(period);
  if (!month) return { kind: 'invoice', id: period };
  const [year, index] = [Number(month[1]), Number(month[2]) - 1];
  return { kind: 'month', start: new Date(Date.UTC(year, index, 1)), end: new Date(Date.UTC(year, index + 1, 1)) };
}

/**
 * Opens the organization's usage export (interface: exportUsage). One read-only, repeatable-read
 * transaction holds it together: the totals are the usage summary's computation for the period
 * (`periodUsage`) and the rows are read afterwards in the same snapshot with the same `now`, so rows
 * and totals cannot disagree, whatever is metered meanwhile. Rows grouped by service are the
 * summary's own lines; rows grouped by deployment or API key come through a cursor
 * (`usageExportRowsQuery`), a batch at a time, so no export is ever held whole.
 */
export async function openUsageExport(db: Knex, organizationId: number, request: { period: string; groupBy: UsageExportGroupBy }): Promise<UsageExport> {
  const trx = await db.transaction({ isolationLevel: 'repeatable read', readOnly: true });
  let open = true;
  const close = async () => {
    if (!open) return;
    open = false;
    await trx.rollback().catch(() => undefined);
  };
  try {
    const account = await findBillingAccount(trx, organizationId);
    if (!account) throw new AppError('NOT_FOUND', 'Your organization has no billing account.');
    const now = await currentSecond(trx);
    const { id, period, invoice } = await resolvePeriod(trx, account, request.period, now);
    const usage = await periodUsage(trx, organizationId, period, now, account.currency);
    const closed = period.end <= now;
    const head: ExportHead = {
      period: { id, start: period.start.toISOString(), end: period.end.toISOString(), closed },
      currency: account.currency,
      group_by: request.groupBy,
      totals: { meter_totals: usage.meterTotals, estimated_total: usage.estimatedTotal },
      invoice: closed && invoice ? invoiceBeside(invoice, usage.estimatedTotal) : null,
    };
    if (request.groupBy === 'service_key') {
      const rows = usage.services.map(serviceRow);
      return { head, close, batches: () => once(rows) };
    }
    const owner = request.groupBy;
    const { sql, bindings } = usageExportRowsQuery(trx, organizationId, owner, period, now).toSQL();
    await trx.raw(`declare usage_export no scroll cursor for ${sql}`, bindings);
    return { head, close, batches: () => fetchBatches(trx, (row) => ownerRow(row, owner)) };
  } catch (error) {
    await close();
    throw error;
  }
}

/** The period asked for, as bounds, and the invoice stored for it (checked only once it is closed). */
async function resolvePeriod(
  trx: Knex.Transaction,
  account: BillingAccountRow,
  asked: string,
  now: Date,
): Promise<{ id: string; period: Period; invoice: InvoiceRow | undefined }> {
  const request = parsePeriod(asked);
  if (request.kind === 'current') return { id: asked, period: currentPeriod(account, now), invoice: undefined };
  if (request.kind === 'month') {
    if (request.start > now) {
      throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location: 'query/period', message: 'is a month that has not begun' }] });
    }
    return { id: asked, period: request, invoice: await findInvoiceOfPeriod(trx, account.id, request) };
  }
  const invoice = await findInvoiceOf(trx, account.id, request.id);
  if (!invoice) throw new AppError('NOT_FOUND', 'No such invoice of your organization.');
  return { id: asked, period: { start: invoice.period_start, end: invoice.period_end }, invoice };
}

/** The invoice's lines beside the export's total: what the processor charged for the period against what the usage says. */
function invoiceBeside(invoice: InvoiceRow, estimatedTotal: string): Schemas['UsageExportInvoice'] {
  const linesAmount = invoice.lines.reduce((sum, line) => sum + BigInt(line.amount), 0n);
  return {
    processor_invoice_id: invoice.processor_invoice_id,
    status: invoice.status,
    lines_amount: Number(linesAmount),
    matches_totals: linesAmount === toCents(estimatedTotal),
  };
}

async function* once(rows: ExportRow[]): AsyncGenerator<ExportRow[]> {
  if (rows.length) yield rows;
}

/** The cursor's rows, a batch per round trip, until it is exhausted. */
async function* fetchBatches(trx: Knex.Transaction, toRow: (row: OwnerRow) => ExportRow): AsyncGenerator<ExportRow[]> {
  for (;;) {
    const { rows } = await trx.raw<{ rows: OwnerRow[] }>(`fetch forward ${BATCH} from usage_export`);
    if (rows.length) yield rows.map(toRow);
    if (rows.length < BATCH) return;
  }
}

/** A service's line of the summary as an export row grouped by service. */
function serviceRow(row: UsageTotalRow): ExportRow {
  return {
    group: { service_key: row.service_key, display_name: row.display_name },
    meter: row.meter,
    service_key: row.service_key,
    quantity: row.total_quantity,
    unit: row.unit,
    unit_amount_decimal: row.unit_amount_decimal,
    amount: trimDecimal(row.exact_amount),
  };
}

function ownerRow(row: OwnerRow, owner: 'deployment' | 'api_key'): ExportRow {
  const group =
    owner === 'deployment'
      ? { deployment_id: row.group_id, model_name: row.group_name }
      : { api_key_id: row.group_id === null ? null : Number(row.group_id), name: row.group_name, key_prefix: row.key_prefix };
  const { meter, service_key, quantity, unit, unit_amount_decimal, amount } = row;
  return { group, meter, service_key, quantity, unit, unit_amount_decimal, amount };
}

/** A decimal without the trailing zeros of its fraction (`357.566400` → `357.5664`, `2.000` → `2`), as Postgres's `trim_scale`. */
export function trimDecimal(amount: string): string {
  return amount.includes('.') ? amount.replace(/\.?0+$/, '') : amount;
}

// ---- the formats

/** The CSV columns (RFC 4180, CRLF line ends), documented on the CSV answer. */
const CSV_COLUMNS = ['line', 'group_id', 'group_name', 'meter', 'service_key', 'quantity', 'unit', 'unit_amount_decimal', 'amount', 'currency'] as const;

/** The export as JSON text, the head first, then each batch of rows as it is read. */
export async function* jsonChunks(exported: UsageExport): AsyncGenerator<string> {
  const head = JSON.stringify(exported.head);
  yield `${head.slice(0, -1)},"rows":[`;
  let first = true;
  for await (const batch of exported.batches()) {
    const rows = batch.map((row) => JSON.stringify(row)).join(',');
    yield first ? rows : `,${rows}`;
    first = false;
  }
  yield ']}';
}

/** The export as CSV text: the header line, a `usage` line per row, then the meters' and the overall total lines. */
export async function* csvChunks(exported: UsageExport): AsyncGenerator<string> {
  const { currency, totals } = exported.head;
  yield csvLine(CSV_COLUMNS);
  for await (const batch of exported.batches()) {
    yield batch
      .map((row) => {
        const [id, name] = groupCells(row.group);
        return csvLine(['usage', id, name, row.meter, row.service_key, row.quantity, row.unit, row.unit_amount_decimal, row.amount, currency]);
      })
      .join('');
  }
  for (const line of totals.meter_totals) yield csvLine(['meter_total', '', '', line.meter, '', '', '', '', line.estimated_amount, currency]);
  yield csvLine(['total', '', '', '', '', '', '', '', totals.estimated_total, currency]);
}

/** A row's owner as the CSV's `group_id` and `group_name`. */
function groupCells(group: ExportRow['group']): [string, string] {
  const id = group.deployment_id ?? group.api_key_id ?? group.service_key ?? null;
  const name = group.model_name ?? group.name ?? group.display_name ?? null;
  return [id === null ? '' : String(id), spreadsheetSafe(name ?? '')];
}

/** One CSV record: a field with a comma, a quote or a line break quoted, its quotes doubled (RFC 4180). */
export function csvLine(fields: readonly string[]): string {
  return `${fields.map((field) => (/[",\r\n]/.test(field) ? `"${field.replaceAll('"', '""')}"` : field)).join(',')}\r\n`;
}

/**
 * A name someone typed (an API key's), kept from being read as a formula by a spreadsheet: one
 * starting with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'` (OWASP, CSV
 * injection). Ids, keys and amounts never start so.
 */
function spreadsheetSafe(text: string): string {
  return /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
}
