import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { OidcClient, type AuthorizationChecks, type AuthorizationResponse, type OidcClaims } from '../adapters/oidc.ts';
import type { Config } from '../config.ts';
import { constantTimeEqual, type Keyring } from '../crypto.ts';
import { AppError } from '../errors.ts';
import { isUniqueViolation } from '../db/errors.ts';
import { normalizeEmail } from '../validation.ts';
import {
  findIdentity,
  findUserByEmail,
  insertIdentity,
  insertUser,
  markEmailVerified,
  organizationOfNewSession,
  revokeWhatUnprovenHolderMade,
  updateIdentityEmail,
  updateUser,
  userHasIdentityAt,
} from './accounts.repository.ts';
import { displayName } from './identity-rules.ts';
import type { SessionPrincipal } from '../principal.ts';
import type { NewSession, SessionStore } from './sessions.ts';

type SsoProviderList = components['schemas']['SsoProviderList'];

/** How long a sign-in attempt (the `sso_state` cookie) stays valid. */
export const SSO_STATE_MAX_AGE_SECONDS = 600;
const STATE_PURPOSE = 'sso-state';

/** What the `sso_state` cookie carries, sealed with the server key: one attempt, bound to one browser. */
interface SealedState extends AuthorizationChecks {
  returnTo: string;
  invitationToken?: string;
  /** Epoch milliseconds. */
  issuedAt: number;
}

export interface BeginInput {
  /** The provider's name (the `{provider}` path segment). */
  provider: string;
  /** Path on the web app to land on; default `/`. */
  returnTo?: string | undefined;
  /** An invitation to act on once the user is signed in (the invitations flow). */
  invitationToken?: string | undefined;
}

export interface BeginResult {
  /** Where to send the browser: the provider's authorization URL. */
  authorizationUrl: string;
  /** The value of the `sso_state` cookie. */
  sealedState: string;
}

export interface CompleteInput extends AuthorizationResponse {
  /** The provider's name (the `{provider}` path segment). */
  provider: string;
  error?: string | undefined;
  /** The `sso_state` cookie the browser sent, if any. */
  sealedState: string | undefined;
  /** The session cookie the browser sent, if any: a signed-in user may link the identity to their own account. */
  sessionToken?: string | undefined;
}

export interface CompletedSignIn extends NewSession {
  /** The web app path to land on, as given at `begin`. */
  returnTo: string;
  invitationToken: string | undefined;
  /** How the user was found: by the provider's subject, by a verified email (now linked), or new. */
  outcome: 'existing' | 'linked' | 'created';
}

/**
 * Single sign-on with the one OpenID Connect provider of the server (`OIDC_*`). `begin` starts an
 * attempt and seals its state for the browser's `sso_state` cookie; `complete` verifies the
 * provider's answer against that cookie, finds, links or creates the user and starts a session.
 */
export class SsoService {
  readonly #db: Knex;
  readonly #sessions: SessionStore;
  readonly #keyring: Keyring;
  readonly #provider: { name: string; displayName: string };
  readonly #publicUrl: string;
  readonly #client: OidcClient | undefined;

  constructor(deps: { db: Knex; sessions: SessionStore; keyring: Keyring; config: Pick<Config, 'oidc' | 'publicUrl'> }) {
    const { oidc, publicUrl } = deps.config;
    this.#db = deps.db;
    this.#sessions = deps.sessions;
    this.#keyring = deps.keyring;
    this.#provider = { name: oidc.providerName, displayName: oidc.displayName };
    this.#publicUrl = publicUrl;
    this.#client =
      oidc.issuer && oidc.clientId && oidc.clientSecret
        ? new OidcClient({
            issuer: oidc.issuer,
            clientId: oidc.clientId,
            clientSecret: oidc.clientSecret,
            redirectUri: `${publicUrl}/v1/sso/callback/${oidc.providerName}`,
          })
        : undefined;
  }

  /** The provider name sessions started here carry as `auth_method`. */
  get providerName(): string {
    return this.#provider.name;
  }

  listProviders(): SsoProviderList {
    const configured = this.#client !== undefined;
    return {
      providers: [
        {
          name: this.#provider.name,
          display_name: this.#provider.displayName,
          configured,
          login_url: configured ? `${this.#publicUrl}/v1/sso/login/${this.#provider.name}` : null,
        },
      ],
    };
  }

  /** Starts an attempt: fresh state, nonce and PKCE verifier, sealed with `returnTo` (and the invitation, if any). */
  async begin(input: BeginInput): Promise<BeginResult> {
    const oidc = this.#clientFor(input.provider);
    const returnTo = input.returnTo ?? '/';
    assertReturnTo(returnTo);
    const checks = OidcClient.newChecks();
    const state: SealedState = { ...checks, returnTo, issuedAt: Date.now() };
    if (input.invitationToken !== undefined) state.invitationToken = input.invitationToken;
    const authorizationUrl = await oidc.authorizationUrl(checks);
    return { authorizationUrl, sealedState: this.#keyring.encrypt(STATE_PURPOSE, JSON.stringify(state)) };
  }

  /**
   * Verifies the provider's answer (error, state against the cookie, then the code exchange and the
   * ID token) and signs the user in: found by subject, else linked to the account with that email
   * (see `#signIn`), else created without an organization. One transaction for every write.
   */
  async complete(input: CompleteInput): Promise<CompletedSignIn> {
    const oidc = this.#clientFor(input.provider);
    if (input.error) {
      throw new AppError('SSO_FAILED', `The identity provider did not sign you in: ${input.error}.`);
    }
    if (!input.code || !input.state) {
      throw new AppError('SSO_FAILED', 'The identity provider sent no `code` or no `state`.');
    }
    const attempt = this.#unseal(input.sealedState);
    if (!constantTimeEqual(input.state, attempt.state)) {
      throw new AppError('SSO_FAILED', 'The `state` does not match this browser’s sign-in attempt. Start the sign-in again.');
    }
    const claims = await oidc.exchange({ code: input.code, state: input.state, iss: input.iss }, attempt);
    if (!claims.email || !claims.email_verified) {
      throw new AppError('SSO_FAILED', 'The identity provider did not assert a verified email address.');
    }
    const verified = { ...claims, email: claims.email };
    const signedIn = input.sessionToken ? ((await this.#sessions.validate(input.sessionToken))?.principal ?? null) : null;
    const session = await this.#signIn(verified, signedIn).catch((error: unknown) => {
      // Two first sign-ins at once: the loser finds what the winner created or linked.
      if (
        isUniqueViolation(error, 'user_identities_provider_subject_unique') ||
        isUniqueViolation(error, 'user_identities_user_provider_unique') ||
        isUniqueViolation(error, 'users_email_unique')
      ) {
        return this.#signIn(verified, signedIn);
      }
      throw error;
    });
    return { ...session, returnTo: attempt.returnTo, invitationToken: attempt.invitationToken };
  }

  /**
   * A known subject signs in to its user. An unknown subject whose email has an account links to it
   * only when that account proved its email, or when this browser is signed in to that very account
   * (the user shows they hold it); never when the account already has a subject at this provider.
   * Linking ends every other session of the account and marks its email verified; linking into an
   * account nobody had verified also clears its password and takes back what it made (keys,
   * invitations, webhook endpoints, reset tokens). Otherwise a new
   * user is created, verified by the provider's assertion.
   */
  async #signIn(claims: OidcClaims & { email: string }, signedIn: SessionPrincipal | null): Promise<NewSession & { outcome: CompletedSignIn['outcome'] }> {
    const provider = this.#provider.name;
    const email = normalizeEmail(claims.email);
    return this.#db.transaction(async (trx) => {
      let outcome: CompletedSignIn['outcome'] = 'existing';
      const identity = await findIdentity(trx, provider, claims.sub);
      let userId: number | undefined = identity?.user_id;
      if (identity && identity.email !== email) await updateIdentityEmail(trx, identity.id, email);
      if (userId === undefined) {
        const user = await findUserByEmail(trx, email, { forUpdate: true });
        if (user) {
          userId = user.id;
          await this.#assertMayLink(trx, userId, user.email_verified_at !== null, signedIn?.user.id === userId);
          await this.#sessions.invalidateAllOfUser(trx, userId);
          if (user.email_verified_at === null) {
            // The provider proves the address, not the password someone set before: it goes (a
            // reset sets a new one), with whatever the account made while nobody had proven it.
            await updateUser(trx, userId, { password_hash: null });
            await revokeWhatUnprovenHolderMade(trx, userId);
          }
          await markEmailVerified(trx, userId);
          outcome = 'linked';
        } else {
          userId = await insertUser(trx, {
            email,
            password_hash: null,
            name: displayName({ name: claims.name, first_name: claims.given_name, last_name: claims.family_name }, email),
            first_name: claims.given_name ?? null,
            last_name: claims.family_name ?? null,
            country: null,
            contact_number: null,
            emailVerified: true,
          });
          outcome = 'created';
        }
        await insertIdentity(trx, { user_id: userId, provider, subject: claims.sub, email });
      }
      const organizationId = await organizationOfNewSession(trx, userId);
      const session = await this.#sessions.create(trx, { userId, organizationId, authMethod: provider });
      return { ...session, outcome };
    });
  }

  /** One subject per provider per user; an unproven email links only from inside its own account. */
  async #assertMayLink(trx: Knex.Transaction, userId: number, emailVerified: boolean, signedInAsUser: boolean): Promise<void> {
    const name = this.#provider.displayName;
    if (await userHasIdentityAt(trx, userId, this.#provider.name)) {
      throw new AppError('SSO_ACCOUNT_ALREADY_LINKED', `The account with this email is already linked to another ${name} identity; sign in with that one.`);
    }
    if (!emailVerified && !signedInAsUser) {
      throw new AppError(
        'SSO_LINK_REQUIRES_SIGN_IN',
        `An account with this email exists, but its address is not verified. Sign in with your password first, then sign in with ${name} to link it.`,
      );
    }
  }

  /** The client of `provider`: 404 `NOT_FOUND` for another name, 404 `SSO_NOT_CONFIGURED` without settings. */
  #clientFor(provider: string): OidcClient {
    if (provider !== this.#provider.name) throw new AppError('NOT_FOUND', 'No SSO provider has this name; see GET /v1/sso/providers.');
    if (!this.#client) {
      throw new AppError('SSO_NOT_CONFIGURED', `Sign-in with ${this.#provider.displayName} is not configured on this server.`);
    }
    return this.#client;
  }

  #unseal(sealed: string | undefined): SealedState {
    const missing = new AppError('SSO_FAILED', 'This browser has no sign-in attempt in progress (the sso_state cookie is missing or expired). Start the sign-in again.');
    if (!sealed) throw missing;
    let state: SealedState;
    try {
      state = JSON.parse(this.#keyring.decrypt(STATE_PURPOSE, sealed)) as SealedState;
    } catch {
      throw missing;
    }
    const age = Date.now() - state.issuedAt;
    if (!(age >= 0 && age <= SSO_STATE_MAX_AGE_SECONDS * 1000)) throw missing;
    return state;
  }
}

/** A path on the web app: one leading `/`, never `//` or `/\`, no control characters. */
function assertReturnTo(returnTo: string): void {
  // eslint-disable-next-line no-control-regex
  if (!/^\/(?![/\\])/.test(returnTo) || /[\u0000-\u001f\u007f]/.test(returnTo) || returnTo.length > 2048) {
    throw new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', {
      errors: [{ location: 'query/return_to', message: 'must be a path on the web app starting with a single `/`' }],
    });
  }
}
