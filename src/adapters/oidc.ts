import * as client from 'openid-client';
import { isHttpsOrLoopback } from '../config.ts';
import { AppError } from '../errors.ts';

export interface OidcSettings {
  /** The provider's issuer identifier; its discovery document is read from it. */
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** This service's callback URL, as registered at the provider. */
  redirectUri: string;
}

/** The values that bind one sign-in attempt: sent to the provider, and checked on the way back. */
export interface AuthorizationChecks {
  state: string;
  nonce: string;
  /** PKCE verifier; only its S256 challenge goes to the provider. */
  codeVerifier: string;
}

/** The ID token claims the service uses. */
export interface OidcClaims {
  sub: string;
  email: string | undefined;
  email_verified: boolean;
  name: string | undefined;
  given_name: string | undefined;
  family_name: string | undefined;
}

/** The authorization response the provider sent the browser back with. */
export interface AuthorizationResponse {
  code?: string | undefined;
  state?: string | undefined;
  iss?: string | undefined;
}

const SCOPE = 'openid email profile';
const TIMEOUT_SECONDS = 10;

/**
 * An OpenID Connect relying party over `openid-client`: discovery of the issuer (lazy, cached by
 * the process, retried after a failure), the authorization URL (code flow, PKCE S256, state,
 * nonce), and the code exchange with every check of the response and the ID token (state, issuer,
 * PKCE, signature, audience, expiry, nonce). HTTPS only, except for an issuer on a loopback host
 * (tests and local development).
 */
export class OidcClient {
  readonly #settings: OidcSettings;
  readonly #insecureAllowed: boolean;
  #configuration: Promise<client.Configuration> | undefined;

  constructor(settings: OidcSettings) {
    if (!isHttpsOrLoopback(settings.issuer)) throw new Error('An OIDC issuer must be an https URL (http only on a loopback host).');
    this.#insecureAllowed = new URL(settings.issuer).protocol === 'http:';
    this.#settings = settings;
  }

  /** Fresh random values for one attempt. */
  static newChecks(): AuthorizationChecks {
    return { state: client.randomState(), nonce: client.randomNonce(), codeVerifier: client.randomPKCECodeVerifier() };
  }

  /** The provider's authorization URL for this attempt. */
  async authorizationUrl(checks: AuthorizationChecks): Promise<string> {
    const configuration = await this.#discover();
    const url = client.buildAuthorizationUrl(configuration, {
      redirect_uri: this.#settings.redirectUri,
      response_type: 'code',
      scope: SCOPE,
      state: checks.state,
      nonce: checks.nonce,
      code_challenge: await client.calculatePKCECodeChallenge(checks.codeVerifier),
      code_challenge_method: 'S256',
    });
    return url.href;
  }

  /**
   * Checks the authorization response against this attempt, exchanges the code and verifies the
   * ID token. Throws `SSO_FAILED` (with a reason that carries no token, code or claim) when any
   * check fails.
   */
  async exchange(response: AuthorizationResponse, checks: AuthorizationChecks): Promise<OidcClaims> {
    const configuration = await this.#discover();
    const currentUrl = new URL(this.#settings.redirectUri);
    for (const [name, value] of Object.entries(response)) {
      if (value !== undefined) currentUrl.searchParams.set(name, value);
    }
    let claims: client.IDToken | undefined;
    try {
      const tokens = await client.authorizationCodeGrant(configuration, currentUrl, {
        expectedState: checks.state,
        expectedNonce: checks.nonce,
        pkceCodeVerifier: checks.codeVerifier,
        idTokenExpected: true,
      });
      claims = tokens.claims();
    } catch (error) {
      throw new AppError('SSO_FAILED', `Sign-in could not be completed: ${reasonOf(error)}.`);
    }
    if (!claims) throw new AppError('SSO_FAILED', 'Sign-in could not be completed: the provider sent no ID token.');
    return {
      sub: claims.sub,
      email: stringClaim(claims.email),
      // Some providers send the flag as a string.
      email_verified: claims.email_verified === true || claims.email_verified === 'true',
      name: stringClaim(claims.name),
      given_name: stringClaim(claims.given_name),
      family_name: stringClaim(claims.family_name),
    };
  }

  #discover(): Promise<client.Configuration> {
    this.#configuration ??= client
      .discovery(new URL(this.#settings.issuer), this.#settings.clientId, undefined, client.ClientSecretBasic(this.#settings.clientSecret), {
        timeout: TIMEOUT_SECONDS,
        execute: this.#insecureAllowed ? [client.allowInsecureRequests] : [],
      })
      .catch((error: unknown) => {
        this.#configuration = undefined;
        throw new AppError('SERVICE_UNAVAILABLE', 'The identity provider cannot be reached; try again shortly.', { cause: error });
      });
    return this.#configuration;
  }
}

function stringClaim(value: unknown): string | undefined {
  return typeof value === 'string' && value.trim() ? value.trim() : undefined;
}

/** A reason safe to show and log: library wording and the provider's error code, never values. */
function reasonOf(error: unknown): string {
  if (error instanceof client.ResponseBodyError || error instanceof client.AuthorizationResponseError) {
    return `the provider answered ${error.error}`;
  }
  if (error instanceof client.ClientError) {
    return error.cause instanceof Error ? error.cause.message : error.message;
  }
  if (error instanceof TypeError) return 'the provider could not be reached';
  return 'the response could not be verified';
}
