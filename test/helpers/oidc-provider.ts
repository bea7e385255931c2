import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

type Payload = Record<string, unknown> & { grantId?: string; uid?: string; userCode?: string };

/** oidc-provider's storage, in memory, for one provider (as its default adapter, without its warning). */
function memoryAdapter() {
  const stores = new Map<string, Map<string, Payload>>();
  return class MemoryAdapter {
    readonly #store: Map<string, Payload>;

    constructor(model: string) {
      const store = stores.get(model) ?? new Map<string, Payload>();
      stores.set(model, store);
      this.#store = store;
    }

    async upsert(id: string, payload: Payload): Promise<void> {
      this.#store.set(id, payload);
    }

    async find(id: string): Promise<Payload | undefined> {
      return this.#store.get(id);
    }

    async findByUid(uid: string): Promise<Payload | undefined> {
      return [...this.#store.values()].find((payload) => payload.uid === uid);
    }

    async findByUserCode(userCode: string): Promise<Payload | undefined> {
      return [...this.#store.values()].find((payload) => payload.userCode === userCode);
    }

    async consume(id: string): Promise<void> {
      const payload = this.#store.get(id);
      if (payload) payload.consumed = Math.floor(Date.now() / 1000);
    }

    async destroy(id: string): Promise<void> {
      this.#store.delete(id);
    }

    async revokeByGrantId(grantId: string): Promise<void> {
      for (const [id, payload] of this.#store) if (payload.grantId === grantId) this.#store.delete(id);
    }
  };
}

/** A person at the identity provider. */
export interface IdpAccount {
  sub: string;
  email: string;
  email_verified: boolean;
  name?: string;
}

/** What the provider's login page does next: sign in an account, or refuse (the user declined). */
type NextInteraction = { account: IdpAccount } | { error: 'access_denied' };

/**
 * A real OpenID Connect provider (`oidc-provider`) on loopback, standing in for Google & co. It
 * has one confidential client that must use PKCE, and no login page: its interaction route, served
 * by a tiny handler of ours, finishes every interaction at once, as the test chose with `signInAs`
 * or `denyNext`, granting openid, email and profile.
 */
export class TestIdentityProvider {
  readonly clientId = 'model-deployment-service';
  readonly clientSecret = randomBytes(24).toString('base64url');
  readonly #server: Server;
  readonly #redirectUri: string;
  #provider: Provider | undefined;
  #callback: ReturnType<Provider['callback']> | undefined;
  #next: NextInteraction | undefined;
  readonly #accounts = new Map<string, IdpAccount>();

  constructor(redirectUri: string) {
    this.#redirectUri = redirectUri;
    this.#server = createServer((req, res) => this.#handle(req, res));
  }

  get issuer(): string {
    if (!this.#provider) throw new Error('the identity provider is not started');
    return this.#provider.issuer;
  }

  /** The settings that point the service at this provider. */
  get env(): Record<string, string> {
    return { OIDC_ISSUER: this.issuer, OIDC_CLIENT_ID: this.clientId, OIDC_CLIENT_SECRET: this.clientSecret };
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const { port } = this.#server.address() as AddressInfo;
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    this.#provider = new Provider(`http://127.0.0.1:${port}`, {
      clients: [
        {
          client_id: this.clientId,
          client_secret: this.clientSecret,
          redirect_uris: [this.#redirectUri],
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'client_secret_basic',
        },
      ],
      jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256', kid: randomUUID() }] },
      cookies: { keys: [randomBytes(32).toString('base64url')] },
      adapter: memoryAdapter(),
      ttl: { AccessToken: 600, AuthorizationCode: 60, Grant: 600, IdToken: 600, Interaction: 600, Session: 600 },
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
      // Put the scope's claims into the ID token (as Google does), not only into userinfo.
      conformIdTokenClaims: false,
      pkce: { required: () => true },
      features: { devInteractions: { enabled: false } },
      interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
      findAccount: (_ctx, sub) => {
        const account = this.#accounts.get(sub);
        if (!account) return undefined;
        return { accountId: sub, claims: () => ({ ...account }) };
      },
    });
    this.#callback = this.#provider.callback();
    return this;
  }

  /** The next sign-in at the provider is this person (claims as given). */
  signInAs(account: IdpAccount): void {
    this.#accounts.set(account.sub, account);
    this.#next = { account };
  }

  /** The next sign-in at the provider is declined by the user. */
  denyNext(): void {
    this.#next = { error: 'access_denied' };
  }

  async stop(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.#server.close((error) => (error ? reject(error) : resolve())));
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const provider = this.#provider;
    const callback = this.#callback;
    if (!provider || !callback) {
      res.writeHead(503).end();
      return;
    }
    if (req.method === 'GET' && req.url?.startsWith('/interaction/')) {
      this.#interact(provider, req, res).catch((error: unknown) => {
        res.writeHead(500, { 'content-type': 'text/plain' }).end(String(error));
      });
      return;
    }
    callback(req, res);
  }

  /** The login and consent pages, answered at once with the test's choice. */
  async #interact(provider: Provider, req: IncomingMessage, res: ServerResponse): Promise<void> {
    await provider.interactionDetails(req, res);
    const next = this.#next;
    this.#next = undefined;
    if (!next) throw new Error('the test did not choose who signs in at the identity provider (signInAs or denyNext)');
    if ('error' in next) {
      await provider.interactionFinished(req, res, { error: next.error, error_description: 'The user declined.' }, { mergeWithLastSubmission: false });
      return;
    }
    const grant = new provider.Grant({ accountId: next.account.sub, clientId: this.clientId });
    grant.addOIDCScope('openid email profile');
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { login: { accountId: next.account.sub }, consent: { grantId } }, { mergeWithLastSubmission: false });
  }
}
