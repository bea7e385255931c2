import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { noSuch } from './errors.ts';

/**
 * The emulator's memory: every Stripe object by id, in creation order, and its clock.
 *
 * Objects start from Stripe's own example of their resource (`stripe-fixtures.json`, taken from
 * the `fixtures3.json` Stripe publishes in github.com/stripe/openapi, MIT licence in
 * `stripe-fixtures.LICENSE`) with the fields the emulator knows set over it, so a field we do not
 * model still has the shape and type the SDK's resource types give it.
 */
export interface StripeObject {
  id: string;
  object: string;
  [field: string]: unknown;
}

const fixtures = (JSON.parse(readFileSync(new URL('./stripe-fixtures.json', import.meta.url), 'utf8')) as { resources: Record<string, StripeObject> })
  .resources;

/** Stripe's example `resource` with `fields` set over it (a deep copy: examples are never shared). */
export function build<T>(resource: string, fields: Partial<T> & { id: string }): T {
  const example = fixtures[resource];
  if (!example) throw new Error(`no Stripe example for ${resource}`);
  return { ...structuredClone(example), livemode: false, ...fields } as T;
}

/** Ids as Stripe writes them: a prefix and 24 base62 characters (`cus_…`, `pm_…`). */
export function newId(prefix: string, length = 24): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = randomBytes(length);
  let id = '';
  for (const byte of bytes) id += alphabet[byte % alphabet.length];
  return `${prefix}_${id}`;
}

/** What each `object` value is called in Stripe's "No such …" messages. */
const NAMES: Record<string, string> = {
  customer: 'customer',
  payment_method: 'PaymentMethod',
  setup_intent: 'setupintent',
  'checkout.session': 'checkout.session',
  product: 'product',
  price: 'price',
  'billing.meter': 'billing.meter',
  subscription: 'subscription',
  invoice: 'invoice',
  event: 'event',
  'v2.core.event': 'event',
  webhook_endpoint: 'webhook_endpoint',
  'test_helpers.test_clock': 'test_clock',
  'billing_portal.session': 'billing_portal.session',
  'billing_portal.configuration': 'billing_portal.configuration',
  invoiceitem: 'invoiceitem',
  credit_note: 'credit_note',
};

export class StripeStore {
  private readonly objects = new Map<string, StripeObject>();
  /** Meter events as accepted (they have no id of their own; an identifier may recur once its uniqueness window ended). */
  readonly meterEvents: Array<{ event_name: string; identifier: string; payload: Record<string, string>; timestamp: number; created: number }> = [];
  /** When each meter event identifier was last accepted, for its uniqueness window. */
  readonly meterEventIdentifiers = new Map<string, number>();
  /** Seconds added to the real time for objects on no test clock (`advanceTime`, emulator only). */
  offsetSeconds = 0;

  put<T extends { id: string; object: string }>(object: T): T {
    this.objects.set(object.id, object as unknown as StripeObject);
    return object;
  }

  delete(id: string): void {
    this.objects.delete(id);
  }

  find<T>(id: string, object: string): T | undefined {
    const found = this.objects.get(id);
    return found && found.object === object ? (found as unknown as T) : undefined;
  }

  /** The object, or Stripe's 404 `resource_missing` naming `param`. */
  get<T>(id: string, object: string, param = 'id'): T {
    const found = this.find<T>(id, object);
    if (!found) throw noSuch(NAMES[object] ?? object, id, param);
    return found;
  }

  any(id: string): StripeObject | undefined {
    return this.objects.get(id);
  }

  /** Every object of a kind, newest first (the order of Stripe's list endpoints). */
  all<T>(object: string, where: (item: T) => boolean = () => true): T[] {
    const found: T[] = [];
    for (const item of this.objects.values()) {
      if (item.object === object && where(item as unknown as T)) found.push(item as unknown as T);
    }
    return found.reverse();
  }

  /** Now for a customer: its test clock's frozen time, else the real time plus the emulator's offset. */
  now(customerId?: string | null): number {
    const customer = customerId ? this.find<{ test_clock: string | null }>(customerId, 'customer') : undefined;
    const clock = customer?.test_clock ? this.find<{ frozen_time: number }>(customer.test_clock, 'test_helpers.test_clock') : undefined;
    return clock ? clock.frozen_time : Math.floor(Date.now() / 1000) + this.offsetSeconds;
  }
}
