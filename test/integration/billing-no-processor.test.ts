import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';

/** A server with no payment processor configured: billing says so and fakes nothing. */
let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

describe('billing without a payment processor', () => {
  it('says every feature is off, still gives the account and usage, and answers 501 where the processor is needed', async () => {
    const owner = await registeredUser(app);
    expect((await owner.api.GET('/v1/billing/config')).data).toEqual({
      publishable_key: '',
      features: { postpaid: false, payment_methods: false, invoices: false, customer_portal: false, enforcement: false },
    });
    expect((await owner.api.GET('/v1/billing/account')).data).toMatchObject({ billing_mode: 'postpaid', status: 'active', processor_customer_id: null });
    expect((await owner.api.GET('/v1/billing/usage-summary')).data).toMatchObject({ usage_totals: [], open_anomalies: 0 });
    expect((await owner.api.GET('/v1/billing/payment-methods')).data).toEqual([]);
    const session = await owner.api.POST('/v1/billing/checkout/setup-session', { body: { purpose: 'payment_method_setup' } });
    expect(session.response.status).toBe(501);
    expect(session.error).toMatchObject({ code: 'NOT_IMPLEMENTED' });
  });

  it('refuses a webhook without its Stripe-Signature header (422) and answers 501 to a signed one', async () => {
    const body = JSON.stringify({ id: 'evt_1', object: 'event', type: 'invoice.paid', created: 1, data: { object: { id: 'in_1', object: 'invoice' } }, livemode: false });
    const unsigned = await fetch(`${app.url}/v1/billing/webhook`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(unsigned.status).toBe(422);
    const signed = await fetch(`${app.url}/v1/billing/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=00' }, body });
    expect(signed.status).toBe(501);
  });
});
