import type { IncomingMessage, ServerResponse } from 'node:http';
import type Stripe from 'stripe';
import type { Context } from './api.ts';
import { completeSetupSession } from './checkout.ts';
import { decodeForm } from './form.ts';

/**
 * The emulator's own pages, standing in for checkout.stripe.com, invoice.stripe.com and
 * billing.stripe.com: the Checkout page where a card is entered (a form posting back to the same
 * address, so a test does with one POST what a person does in the browser), the hosted invoice
 * page and its PDF, and a read-only customer portal.
 */
export async function servePage(ctx: Context, req: IncomingMessage, res: ServerResponse, body: string): Promise<boolean> {
  const url = new URL(req.url ?? '/', 'http://emulator');
  const [, area, id, extra] = url.pathname.split('/');
  if (area === 'checkout' && id && !extra) {
    if (req.method === 'POST') {
      const form = decodeForm(body);
      const field = (name: string) => (typeof form[name] === 'string' ? (form[name] as string) : '');
      const result = completeSetupSession(ctx, id, { number: field('card_number'), expiry: field('card_expiry'), name: field('name') || undefined });
      if (result.outcome === 'completed') {
        if (result.redirect) {
          res.writeHead(303, { location: result.redirect }).end();
        } else {
          html(res, 200, 'Setup complete', `<p role="status">Your card is saved (${result.paymentMethod}). You can close this page.</p>`);
        }
      } else {
        html(res, result.outcome === 'declined' ? 402 : 400, 'Set up your card', checkoutForm(ctx, id, result.message));
      }
      return true;
    }
    html(res, ctx.store.find(id, 'checkout.session') ? 200 : 404, 'Set up your card', checkoutForm(ctx, id));
    return true;
  }
  if (area === 'invoices' && id && req.method === 'GET') {
    const invoice = ctx.store.find<Stripe.Invoice>(id, 'invoice');
    if (!invoice || invoice.status === 'draft') return notFound(res);
    if (extra === 'pdf') {
      const pdf = minimalPdf(`Invoice ${invoice.number} - ${money(invoice.amount_due, invoice.currency)} - ${invoice.status}`);
      res.writeHead(200, { 'content-type': 'application/pdf', 'content-length': pdf.length }).end(pdf);
      return true;
    }
    const lines = invoice.lines.data.map((line) => `<tr><td>${escape(line.description ?? '')}</td><td>${money(line.amount, line.currency)}</td></tr>`).join('');
    html(res, 200, `Invoice ${invoice.number}`, `<p>Status: <strong>${invoice.status}</strong>. Amount due: ${money(invoice.amount_due, invoice.currency)}; paid: ${money(invoice.amount_paid, invoice.currency)}.</p><table>${lines}</table><p><a href="${invoice.invoice_pdf}">Download PDF</a></p>`);
    return true;
  }
  if (area === 'portal' && id && req.method === 'GET') {
    const session = ctx.store.find<Stripe.BillingPortal.Session>(id, 'billing_portal.session');
    if (!session) return notFound(res);
    const cards = ctx.store.all<Stripe.PaymentMethod>('payment_method', (pm) => pm.customer === session.customer);
    const invoices = ctx.store.all<Stripe.Invoice>('invoice', (i) => i.customer === session.customer && i.status !== 'draft');
    html(
      res,
      200,
      'Billing portal',
      `<h2>Cards</h2><ul>${cards.map((pm) => `<li>${pm.card?.brand} •••• ${pm.card?.last4} (${pm.card?.exp_month}/${pm.card?.exp_year})</li>`).join('')}</ul>` +
        `<h2>Invoices</h2><ul>${invoices.map((i) => `<li><a href="${i.hosted_invoice_url}">${i.number}</a> ${money(i.amount_due, i.currency)} ${i.status}</li>`).join('')}</ul>` +
        (session.return_url ? `<p><a href="${escape(session.return_url)}">Return</a></p>` : ''),
    );
    return true;
  }
  return false;
}

/**
 * The card form of a Checkout Session. Its fields and button carry the ids of Stripe Checkout's own
 * form (`#cardNumber`, `#cardExpiry`, `#cardCvc`, `#billingName`, the submit button's test id), so
 * that one browser script completes a session here or on a Stripe test account
 * (test/helpers/checkout-browser.ts).
 */
function checkoutForm(ctx: Context, id: string, error?: string): string {
  const session = ctx.store.find<Stripe.Checkout.Session>(id, 'checkout.session');
  if (!session) return '<p>This checkout session does not exist.</p>';
  if (session.status !== 'open') return `<p>This checkout session is ${session.status}.</p>`;
  return `<p>Stripe emulator (a local stand-in for Stripe Checkout): save a card for later payments.
Use the test card <code>4242 4242 4242 4242</code>, any future expiry and any CVC; <code>4000 0000 0000 0002</code> is declined.</p>
${error ? `<p role="alert" style="color:#b00">${escape(error)}</p>` : ''}
<form method="post" action="/checkout/${escape(id)}">
<label>Card number <input id="cardNumber" name="card_number" inputmode="numeric" autocomplete="cc-number" required></label><br>
<label>Expiry (MM / YY) <input id="cardExpiry" name="card_expiry" autocomplete="cc-exp" required></label><br>
<label>CVC <input id="cardCvc" name="card_cvc" autocomplete="cc-csc" required></label><br>
<label>Name on card <input id="billingName" name="name" autocomplete="cc-name"></label><br>
<button type="submit" class="SubmitButton" data-testid="hosted-payment-submit-button">Save card</button>
</form>${session.cancel_url ? `<p><a href="${escape(session.cancel_url)}">Cancel</a></p>` : ''}`;
}

function html(res: ServerResponse, status: number, title: string, content: string): void {
  const page = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title></head><body style="font-family:sans-serif;max-width:40em;margin:2em auto"><h1>${escape(title)}</h1>${content}</body></html>`;
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(page) }).end(page);
}

function notFound(res: ServerResponse): true {
  html(res, 404, 'Not found', '<p>Nothing here.</p>');
  return true;
}

function escape(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function money(amount: number, currency: string): string {
  return `${(amount / 100).toFixed(2)} ${currency.toUpperCase()}`;
}

/** A one-page PDF with one line of text (enough for a viewer to open it). */
function minimalPdf(text: string): Buffer {
  const safe = text.replace(/[()\\]/g, '');
  const stream = `BT /F1 12 Tf 72 720 Td (${safe}) Tj ET`;
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>',
    `<< /Length ${stream.length} >>\nstream\n${stream}\nendstream`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
  ];
  let out = '%PDF-1.4\n';
  const offsets: number[] = [];
  objects.forEach((object, i) => {
    offsets.push(out.length);
    out += `${i + 1} 0 obj\n${object}\nendobj\n`;
  });
  const xref = out.length;
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n${offsets.map((o) => `${String(o).padStart(10, '0')} 00000 n \n`).join('')}`;
  out += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(out, 'latin1');
}
