import type { Browser as Chromium, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PASSWORD, SUBJECTS, uniqueEmail } from '../factories/accounts.ts';
import { TEST_APP_SECRET } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { chromiumMissing as missing, launchChromium, watchPage } from '../helpers/chromium.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { Inbox } from '../helpers/inbox.ts';
import { freePort } from '../helpers/net.ts';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.ts';

/**
 * The local stand-in for the web app (dev/web-app/): the pages the links of emails and the
 * Stripe emulator's Checkout land on, served under `make run` only. The service is started as
 * `make run` starts it (`node dev/main.ts`, NODE_ENV=development, no WEB_APP_URL, the Stripe
 * emulator), on a test database and SMTP listener, and each landing is driven in headless Chromium.
 * The production entry (`src/main.ts`) has no such pages: it holds nothing of dev/.
 */


/** The landing paths (and the pages' assets), as the service names them in its emails and Checkout sessions. */
const LANDINGS = ['/verify-email?token=abc', '/reset-password?token=abc', '/invitations/abc', '/settings/billing', '/local-web-app/landing.js', '/local-web-app/landing.css'];

interface Service {
  process: ServiceProcess;
  inbox: Inbox;
  /** The service's own origin, `http://localhost:<PORT>`: its PUBLIC_URL and WEB_APP_URL, as under `make run`. */
  url: string;
  stop(): Promise<void>;
}

/** `node <entry>` with `env` on a database and SMTP listener of its own, listening on `url`. */
async function startService(env: Record<string, string>, entry: 'src/main.ts' | 'dev/main.ts' = 'dev/main.ts'): Promise<Service> {
  const database = await createTestDatabase();
  const inbox = await new Inbox().start();
  const port = await freePort();
  try {
    const process = await startServiceProcess(
      { env: {}, databaseUrl: database.url, inbox },
      { PORT: String(port), ROLE: 'all', CLUSTER_SIMULATOR: 'false', METRICS_PORT: '', PUBLIC_URL: '', WEB_APP_URL: '', ALLOWED_ORIGINS: '', ...env },
      entry,
    );
    return {
      process,
      inbox,
      url: `http://localhost:${port}`,
      stop: async () => {
        process.kill('SIGTERM');
        await process.exited;
        await inbox.stop();
        await database.drop();
      },
    };
  } catch (error) {
    await inbox.stop();
    await database.drop();
    throw error;
  }
}

/** A browser of the API (cookies, CSRF header) whose `Origin` is the service's own, as the pages' is. */
function apiBrowser(service: Service): Browser {
  const browser = new Browser(service.url);
  browser.origin = service.url;
  return browser;
}

async function register(service: Service, email = uniqueEmail('web')): Promise<{ browser: Browser; email: string }> {
  const browser = apiBrowser(service);
  const { response } = await browser.api.POST('/v1/user/register', { body: { email, password: PASSWORD, organization: `Org of ${email}` } });
  expect(response.status).toBe(201);
  return { browser, email };
}

/** The first link of an email to `to` about `subject`, on the service's origin. */
async function linkIn(service: Service, to: string, subject: string): Promise<string> {
  const message = await service.inbox.next(to, { subject });
  const link = /https?:\/\/\S+/.exec(message.text)?.[0] ?? '';
  expect(link.startsWith(`${service.url}/`)).toBe(true);
  return link;
}

// Each test drives Chromium through several pages and waits for emails and webhooks: more room than vitest's 30 s on a loaded machine.
describe.skipIf(missing !== '')(`the local stand-in for the web app under make run, in headless Chromium${missing}`, { timeout: 60_000 }, () => {
  let service: Service;
  let stripeUrl: string;
  let chromiumBrowser: Chromium;
  const contexts: BrowserContext[] = [];
  beforeAll(async () => {
    const stripePort = await freePort();
    stripeUrl = `http://127.0.0.1:${stripePort}`;
    service = await startService({ NODE_ENV: 'development', STRIPE_EMULATOR_PORT: String(stripePort) });
    chromiumBrowser = await launchChromium();
  });
  afterAll(async () => {
    for (const context of contexts) await context.close();
    await chromiumBrowser?.close();
    await service?.stop();
  });

  /**
   * A page in a browser of its own (no cookies yet) that records CSP violations, script errors and
   * requests to any origin but the service's and the Stripe emulator's.
   */
  async function newPage(): Promise<{ page: Page; problems: string[] }> {
    const context = await chromiumBrowser.newContext();
    contexts.push(context);
    const page = await context.newPage();
    const problems = await watchPage(page, (url) => url.startsWith(`${service.url}/`) || url.startsWith(`${stripeUrl}/`));
    return { page, problems };
  }

  async function open(link: string): Promise<{ page: Page; problems: string[] }> {
    const opened = await newPage();
    const response = await opened.page.goto(link, { waitUntil: 'load' });
    expect(response?.status()).toBe(200);
    expect(response?.headers()['content-security-policy']).toMatch(/script-src 'self'(;|$)/);
    await expect.poll(() => opened.page.getByText('local stand-in for the web app', { exact: false }).count()).toBeGreaterThan(0);
    return opened;
  }

  /** Fills the page's sign-in form and submits it. */
  async function signInOnPage(page: Page, email: string, password = PASSWORD): Promise<void> {
    const form = page.locator('form', { has: page.getByRole('button', { name: 'Sign in' }) });
    await form.getByLabel('Email').fill(email);
    await form.getByLabel('Password').fill(password);
    await form.getByRole('button', { name: 'Sign in' }).click();
  }

  it('verify-email: the link of the verification email confirms the address, with no session in that browser', async () => {
    const { browser, email } = await register(service);
    const link = await linkIn(service, email, SUBJECTS.verification);
    expect(link).toMatch(/\/verify-email\?token=/);

    const { page, problems } = await open(link);
    await page.getByRole('status').filter({ hasText: `Your email address ${email} is confirmed.` }).waitFor();
    expect((await browser.api.GET('/v1/auth/session')).data?.user.email_verified).toBe(true);

    // The link works once: opened again, the page says why it cannot confirm.
    const again = await open(link);
    await again.page.getByRole('alert').filter({ hasText: 'INVALID_VERIFICATION_TOKEN' }).waitFor();
    expect([...problems, ...again.problems]).toEqual([]);
  });

  it('reset-password: the link of the reset email sets the new password, which then signs in', async () => {
    const { email } = await register(service);
    const anonymous = apiBrowser(service);
    expect((await anonymous.api.POST('/v1/auth/password-reset/request', { body: { email } })).response.status).toBe(200);
    const link = await linkIn(service, email, SUBJECTS.reset);
    expect(link).toMatch(/\/reset-password\?token=/);

    const { page, problems } = await open(link);
    // A password the rules refuse: the page shows the API's reason and keeps the form.
    await page.getByLabel('New password').fill(email);
    await page.getByRole('button', { name: 'Set the new password' }).click();
    await page.getByRole('alert').filter({ hasText: 'password' }).waitFor();
    const newPassword = 'a brand new passphrase 42';
    await page.getByLabel('New password').fill(newPassword);
    await page.getByRole('button', { name: 'Set the new password' }).click();
    await page.getByRole('status').filter({ hasText: 'Your password is changed' }).waitFor();

    expect((await apiBrowser(service).api.POST('/v1/user/signin', { body: { email, password: newPassword } })).response.status).toBe(200);
    expect((await apiBrowser(service).api.POST('/v1/user/signin', { body: { email, password: PASSWORD } })).response.status).toBe(401);
    expect(problems).toEqual([]);
  });

  /** An organization whose owner proved their address (only such an owner may invite), and an invitation to `invitee`. */
  async function invitation(invitee: string): Promise<{ owner: Browser; organization: string; link: string }> {
    const { browser: owner, email } = await register(service);
    const verification = new URL(await linkIn(service, email, SUBJECTS.verification));
    expect((await owner.api.POST('/v1/user/email-verification/confirm', { body: { token: verification.searchParams.get('token') ?? '' } })).response.status).toBe(200);
    const { response } = await owner.api.POST('/v1/organization/invitations', { body: { email: invitee, role: 'member' } });
    expect(response.status).toBe(201);
    const link = await linkIn(service, invitee, SUBJECTS.invitation);
    expect(link).toMatch(/\/invitations\/[^/?]+$/);
    return { owner, organization: `Org of ${email}`, link };
  }

  async function membersOf(owner: Browser): Promise<Array<{ email: string; role: string }>> {
    return ((await owner.api.GET('/v1/organization/members')).data ?? []).map((member) => ({ email: member.email, role: member.role }));
  }

  it('invitations/{token}: an invitee with an account signs in on the page and accepts; the membership exists', async () => {
    const { email: invitee } = await register(service);
    const { owner, organization, link } = await invitation(invitee);

    const { page, problems } = await open(link);
    await page.getByText(`${organization} invited ${invitee} to join as member`).waitFor();
    await signInOnPage(page, invitee);
    await page.getByRole('button', { name: 'Accept the invitation' }).click();
    await page.getByRole('status').filter({ hasText: `You joined ${organization} as member.` }).waitFor();

    expect(await membersOf(owner)).toContainEqual({ email: invitee, role: 'member' });
    expect(problems).toEqual([]);
  });

  it('invitations/{token}: an invitee without an account creates one on the page and joins', async () => {
    const invitee = uniqueEmail('invitee');
    const { owner, organization, link } = await invitation(invitee);

    const { page, problems } = await open(link);
    const form = page.locator('form', { has: page.getByRole('button', { name: 'Create my account and join' }) });
    await form.getByLabel('Password').fill('a fresh invitee passphrase');
    await form.getByRole('button', { name: 'Create my account and join' }).click();
    await page.getByRole('status').filter({ hasText: `You joined ${organization} as member.` }).waitFor();

    expect(await membersOf(owner)).toContainEqual({ email: invitee, role: 'member' });
    expect(problems).toEqual([]);
  });

  it("settings/billing: no card before Checkout; after the emulator's Checkout redirect, the saved card and the billing account", async () => {
    const { browser: owner, email } = await register(service);
    const { page, problems } = await open(`${service.url}/settings/billing`);
    await signInOnPage(page, email);
    await page.getByRole('status').filter({ hasText: 'No card is saved' }).waitFor();

    const { data: session } = await owner.api.POST('/v1/billing/checkout/setup-session', { body: { purpose: 'postpaid_activation' } });
    expect(session?.checkout_session_id).toBeTruthy();
    // The Stripe emulator's Checkout page (embedded session), as a person fills it in.
    await page.goto(`${stripeUrl}/checkout/${session?.checkout_session_id}`);
    await page.getByLabel('Card number').fill('4242 4242 4242 4242');
    await page.getByLabel('Expiry (MM / YY)').fill('12 / 34');
    await page.getByLabel('CVC').fill('123');
    await page.getByRole('button', { name: 'Save card' }).click();
    await page.waitForURL(`${service.url}/settings/billing`);
    await page.getByRole('status').filter({ hasText: 'Your card is saved: visa •••• 4242' }).waitFor();
    await page.getByText('Billing mode: postpaid').waitFor();

    // The subscription is activated by the processor's webhook, a moment later; the page shows it once reloaded.
    await expect.poll(async () => (await owner.api.GET('/v1/billing/account')).data?.subscription_status, { timeout: 15_000 }).toBe('active');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.getByText('Subscription: active').waitFor();
    expect(problems).toEqual([]);
  });
});

describe('the landing pages with the stand-in off', () => {
  it.each([
    ['production', { NODE_ENV: 'production', APP_SECRET: TEST_APP_SECRET, ROLE: 'api' }, 'src/main.ts'],
    ['the production entry in development (LOCAL_WEB_APP is make run\'s)', { NODE_ENV: 'development', LOCAL_WEB_APP: 'true', ROLE: 'api' }, 'src/main.ts'],
    ['make run with a web app of its own (WEB_APP_URL)', { NODE_ENV: 'development', WEB_APP_URL: 'https://app.example.com', ROLE: 'api', STRIPE_EMULATOR: 'false' }, 'dev/main.ts'],
  ] as const)('%s: each landing path still answers 404 NOT_FOUND', async (_name, env, entry) => {
    const service = await startService(env, entry);
    try {
      for (const path of LANDINGS) {
        const response = await fetch(`${service.url}${path}`);
        expect({ path, status: response.status }).toEqual({ path, status: 404 });
        expect(await response.json()).toMatchObject({ code: 'NOT_FOUND' });
      }
    } finally {
      await service.stop();
    }
  });
});
