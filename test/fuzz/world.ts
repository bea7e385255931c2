import Stripe from 'stripe';
import { insertUser, setCurrentOrganization } from '../../src/accounts/accounts.repository.ts';
import { insertEmailVerificationToken, insertPasswordResetToken } from '../../src/accounts/accounts.repository.ts';
import { newUserProfile } from '../../src/accounts/identity-rules.ts';
import { hashPassword } from '../../src/accounts/passwords.ts';
import { hashToken, randomToken } from '../../src/crypto.ts';
import { insertInvitation } from '../../src/invitations/invitations.repository.ts';
import { insertMembership } from '../../src/organizations/organizations.repository.ts';
import { PASSWORD, uniqueEmail, type SignedInUser } from '../factories/accounts.ts';
import { apiKey } from '../factories/api-keys.ts';
import { CARDS, checkoutWithCard, webhooksSettled } from '../factories/billing.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { team, type Team } from '../factories/organizations.ts';
import { APP_ORIGIN, FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { TestIdentityProvider } from '../helpers/oidc-provider.ts';
import { operatorCli } from '../helpers/operator-cli.ts';
import { RedirectBrowser } from '../helpers/redirect-browser.ts';
import { startServiceProcess } from '../helpers/service-process.ts';

export const SSO_PROVIDER = 'fuzzidp';
const SSO_CALLBACK = `${APP_ORIGIN}/v1/sso/callback/${SSO_PROVIDER}`;
export const HOSTED_MODEL = 'qwen2.5-instruct';
/** A limit no case reaches: the key's own, so that the organization's defaults a case changes do not apply to it. */
const UNREACHED = { requests_per_minute: 1_000_000, tokens_per_minute: 1_000_000_000, monthly_token_budget: 1_000_000_000_000, monthly_spend_budget: '1000000.00' };

/** The model of each inference operation: a deployment running on the cluster simulator (completions need a `generate` model). */
const MODELS = {
  chat: 'qwen2.5-instruct',
  completion: 'codestral-v0.1',
  embedding: 'bge-m3',
  rerank: 'bge-reranker-v2-m3',
  image: 'FLUX.1-schnell',
  audio: 'whisper-large-v3',
} as const;
export type ModelKind = keyof typeof MODELS;

/**
 * What the fuzz cases run against: an organization with a member of each role, a
 * running deployment of every model type on the GPU cluster simulator, a hosted model, an API key
 * for all of them, a subscription with a saved card, a webhook endpoint and an SSO provider; and,
 * for an operation that uses its target up (deletes it, spends a token, answers an invitation), a
 * fresh one for each case, written with the repositories or made through the API.
 *
 * Provisioning, the hosted launch and the processor's webhooks need workers: a ROLE=worker process
 * runs while the world is built and is stopped before the first case, so that nothing writes in
 * the background while a case checks that a refused request wrote nothing.
 */
interface WorldParts {
  app: TestApp;
  idp: TestIdentityProvider;
  members: Team;
  organizationId: number;
  deployments: Record<ModelKind, Deployment>;
  key: string;
  webhookEndpointId: string;
  catalogModelId: string;
}

export class FuzzWorld implements WorldParts {
  readonly app: TestApp;
  readonly idp: TestIdentityProvider;
  readonly members: Team;
  readonly organizationId: number;
  readonly deployments: Record<ModelKind, Deployment>;
  /** An API key for every deployment and the hosted models. */
  readonly key: string;
  readonly webhookEndpointId: string;
  readonly catalogModelId: string;

  private constructor(parts: WorldParts) {
    this.app = parts.app;
    this.idp = parts.idp;
    this.members = parts.members;
    this.organizationId = parts.organizationId;
    this.deployments = parts.deployments;
    this.key = parts.key;
    this.webhookEndpointId = parts.webhookEndpointId;
    this.catalogModelId = parts.catalogModelId;
  }

  static async build(): Promise<FuzzWorld> {
    const idp = await new TestIdentityProvider(SSO_CALLBACK).start();
    const app = await startTestApp(
      { ...FAST_PROVISIONING, ...idp.env, OIDC_PROVIDER_NAME: SSO_PROVIDER, MAX_ACTIVE_RESOURCES: '1000', INVITATIONS_PER_DAY: '100000', BILLING_ENFORCEMENT: 'false', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' },
      { stripe: true, cluster: { modelLoadMs: 50, tokenLatencyMs: 1 } },
    );
    const worker = await startServiceProcess(app, { ROLE: 'worker' });
    try {
      const members = await team(app);
      const owner = members.super_admin;
      const organizationId = (await owner.api.GET('/v1/organization')).data?.id ?? 0;
      // The worker process provisions them (the factory asks that some process run the workers).
      const provisioned = { ...app, workers: true };
      const running = await Promise.all(Object.values(MODELS).map((model_name) => deployment(provisioned, owner, 'running', { model_name })));
      const deployments = Object.fromEntries(Object.keys(MODELS).map((kind, i) => [kind, running[i]])) as Record<ModelKind, Deployment>;
      const launched = await operatorCli(app, 'hosted', 'launch', HOSTED_MODEL);
      if (launched.code !== 0) throw new Error(`hosted launch: ${launched.stderr}`);
      const { key } = await apiKey(owner, running.map((d) => d.id), { allow_hosted_models: true, limits: UNREACHED });
      const { data: webhook } = await owner.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } });
      const { data: catalog } = await owner.api.GET('/api/v1/deployable-models');
      // A saved card, then the metered subscription on it.
      await checkoutWithCard(app, owner, 'payment_method_setup');
      await webhooksSettled(app);
      const card = (await owner.api.GET('/v1/billing/payment-methods')).data?.[0]?.id ?? '';
      const activated = await owner.api.POST('/v1/billing/subscription/activate-postpaid', { body: { processor_payment_method_id: card } });
      if (!activated.data) throw new Error(`activate-postpaid: ${activated.response.status} ${JSON.stringify(activated.error)}`);
      await webhooksSettled(app);
      return new FuzzWorld({ app, idp, members, organizationId, deployments, key, webhookEndpointId: webhook?.endpoint.id ?? '', catalogModelId: String(catalog?.items[0]?.id ?? '') });
    } finally {
      worker.kill('SIGTERM');
      await worker.exited;
    }
  }

  async close(): Promise<void> {
    await this.app.close();
    await this.idp.stop();
  }

  get owner(): SignedInUser {
    return this.members.super_admin;
  }

  /** A browser with a session of `userId` (in `organizationId`, if any), as sign-in makes one. */
  async sessionFor(userId: number, organizationId: number | null, browser = new Browser(this.app.url)): Promise<Browser> {
    const { cookies, sessions } = this.app.container;
    const session = await sessions.create(this.app.db, { userId, organizationId, authMethod: 'password' });
    browser.cookies.set(cookies.name, session.token);
    browser.cookies.set(cookies.csrfName, cookies.csrfToken(session.principal.sessionId));
    return browser;
  }

  /** A new account (no organization, unless it joins one), written with the repositories: its id, email and a signed-in browser. */
  async newUser(options: { verified?: boolean; joins?: 'member' | 'admin' | 'viewer' } = {}): Promise<{ id: number; email: string; browser: Browser }> {
    const email = uniqueEmail('fuzz');
    const passwordHash = await hashPassword(PASSWORD);
    const id = await this.app.db.transaction(async (trx) => {
      const userId = await insertUser(trx, { email, password_hash: passwordHash, emailVerified: options.verified ?? true, ...newUserProfile({ first_name: 'Fuzz' }, email) });
      if (options.joins) {
        await insertMembership(trx, { organization_id: this.organizationId, user_id: userId, role: options.joins });
        await setCurrentOrganization(trx, userId, this.organizationId);
      }
      return userId;
    });
    return { id, email, browser: await this.sessionFor(id, options.joins ? this.organizationId : null) };
  }

  /** A pending invitation to the organization (for `invitee`, or a new address): its id and token. */
  async invitation(invitee?: { id: number; email: string }): Promise<{ id: string; token: string; email: string }> {
    const token = randomToken(24);
    const email = invitee?.email ?? uniqueEmail('invitee');
    const id = await insertInvitation(this.app.db, {
      organization_id: this.organizationId,
      invitee_email: email,
      invitee_user_id: invitee?.id ?? null,
      invited_by_user_id: this.owner.user.id,
      role: 'member',
      token_hash: hashToken(token),
      expires_at: new Date(Date.now() + 86_400_000),
    });
    return { id: String(id), token, email };
  }

  /** A password reset link's token for a new account. */
  async resetToken(): Promise<string> {
    const { id } = await this.newUser();
    const token = randomToken(20);
    await insertPasswordResetToken(this.app.db, { user_id: id, token_hash: hashToken(token), expires_at: new Date(Date.now() + 3_600_000) });
    return token;
  }

  /** A verification link's token for a new account whose address is not proven yet. */
  async verificationToken(): Promise<string> {
    const { id, email } = await this.newUser({ verified: false });
    const token = randomToken(20);
    await insertEmailVerificationToken(this.app.db, { user_id: id, email, token_hash: hashToken(token), expires_at: new Date(Date.now() + 3_600_000) });
    return token;
  }

  /** A new API key of the organization, made through the API. */
  async apiKeyId(): Promise<string> {
    return String((await apiKey(this.owner, [this.deployments.chat.id])).id);
  }

  /** A new webhook endpoint, made through the API (room made first). */
  async webhookEndpoint(): Promise<string> {
    await this.roomForWebhookEndpoint();
    const { data } = await this.owner.api.POST('/v1/organization/webhook-endpoints', { body: { url: 'http://127.0.0.1:9/hooks' } });
    return data?.endpoint.id ?? '';
  }

  /** Deletes through the API the endpoints earlier cases made once the organization is near its limit (20), the world's own kept. */
  async roomForWebhookEndpoint(): Promise<void> {
    const endpoints = (await this.owner.api.GET('/v1/organization/webhook-endpoints')).data?.items ?? [];
    if (endpoints.length < 15) return;
    for (const { id } of endpoints.filter((endpoint) => endpoint.id !== this.webhookEndpointId)) {
      await this.owner.api.DELETE('/v1/organization/webhook-endpoints/{webhook_endpoint_id}', { params: { path: { webhook_endpoint_id: id } } });
    }
  }

  /** A new deployment (it stays `requested`: no worker runs during the cases). */
  async deploymentId(): Promise<string> {
    return (await deployment(this.app, this.owner, 'requested')).id;
  }

  /** A new member signed in twice: the browser of one session, and the public id of the other. */
  async userWithTwoSessions(): Promise<{ browser: Browser; otherSessionId: string }> {
    const { id, browser } = await this.newUser({ joins: 'member' });
    await this.sessionFor(id, this.organizationId);
    const { data } = await browser.api.GET('/v1/user/sessions');
    return { browser, otherSessionId: data?.find((session) => !session.current)?.id ?? '' };
  }

  /** A card saved on the organization's customer through Checkout, not its default. */
  async extraCard(): Promise<string> {
    const before = new Set((await this.owner.api.GET('/v1/billing/payment-methods')).data?.map((card) => card.id));
    await checkoutWithCard(this.app, this.owner, 'payment_method_setup', CARDS.mastercard);
    const after = (await this.owner.api.GET('/v1/billing/payment-methods')).data ?? [];
    return after.find((card) => !before.has(card.id))?.id ?? '';
  }

  async defaultCard(): Promise<string> {
    return (await this.owner.api.GET('/v1/billing/payment-methods')).data?.find((card) => card.is_default)?.id ?? '';
  }

  /**
   * A sign-in at the SSO provider, up to its redirect back to the callback: the callback's query
   * (code and state) and a browser holding the attempt's `sso_state` cookie.
   */
  async ssoCallback(): Promise<{ query: Record<string, string>; browser: Browser }> {
    this.idp.signInAs({ sub: randomToken(8), email: uniqueEmail('sso'), email_verified: true, name: 'Fuzz' });
    const redirects = new RedirectBrowser({ [APP_ORIGIN]: this.app.url });
    const navigation = await redirects.navigate(`${APP_ORIGIN}/v1/sso/login/${SSO_PROVIDER}`, { stopBefore: (url) => url.href.startsWith(SSO_CALLBACK) });
    const callback = new URL(navigation.location ?? SSO_CALLBACK);
    const browser = new Browser(this.app.url);
    browser.cookies.set('sso_state', redirects.cookie(callback.href, 'sso_state') ?? '');
    return { query: Object.fromEntries(callback.searchParams), browser };
  }

  /** `payload` signed as the processor signs a webhook (`STRIPE_WEBHOOK_SECRET`) or a thin event (`STRIPE_EVENT_DESTINATION_SECRET`). */
  signed(payload: string, secret: 'STRIPE_WEBHOOK_SECRET' | 'STRIPE_EVENT_DESTINATION_SECRET'): string {
    return new Stripe('sk_test_signing_only').webhooks.generateTestHeaderString({ payload, secret: this.app.env[secret] ?? '' });
  }
}
