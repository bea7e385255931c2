import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `invoices`: an organization's invoices as last read from the payment processor. */
export class InvoiceRow extends BaseModel {
  static override tableName = 'invoices';
  static override idColumn = 'processor_invoice_id';
  declare processor_invoice_id: string;
  declare billing_account_id: number;
  declare status: string;
  declare collection_method: 'charge_automatically' | 'send_invoice';
  /** bigint: Postgres hands it as a string. */
  declare amount_due: string | number;
  declare amount_paid: string | number;
  declare currency: string;
  declare hosted_invoice_url: string | null;
  declare invoice_pdf: string | null;
  declare due_date: Date | null;
  declare period_start: Date;
  declare period_end: Date;
  declare created: Date;
  declare number: string | null;
  declare subtotal: string | number | null;
  declare tax: string | number | null;
  declare total: string | number | null;
  declare lines: InvoiceLine[];
  declare synced_at: Date;
}

/** One line of an invoice as stored (`invoices.lines`): as the interface lists it. */
export type InvoiceLine = components['schemas']['InvoiceLine'];
