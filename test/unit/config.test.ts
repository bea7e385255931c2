import { describe, expect, it } from 'vitest';
import { DEV_SETTINGS } from '../../dev/config.ts';
import { ConfigError, loadConfig } from '../../src/config.ts';

const development = { NODE_ENV: 'development' };

describe('configuration', () => {
  it('has working defaults for make run (which sets NODE_ENV=development)', () => {
    const config = loadConfig({ NODE_ENV: 'development' });
    expect(config).toMatchObject({
      env: 'development',
      role: 'all',
      port: 8080,
      publicUrl: 'http://localhost:8080',
      databaseUrl: undefined,
      session: { cookieName: 'session', csrfCookieName: 'csrf_token', secure: false, sameSite: 'lax' },
      allowedOrigins: ['http://localhost:8080'],
      responseValidation: true,
    });
  });

  const production = { NODE_ENV: 'production', APP_SECRET: 'x'.repeat(32), SMTP_URL: 'smtp://mail.example.com:587' };

  it('defaults to secure __Host- cookies and no response validation in production', () => {
    expect(loadConfig(production)).toMatchObject({
      session: { secure: true, cookieName: '__Host-session', csrfCookieName: '__Host-csrf_token' },
      responseValidation: false,
    });
  });

  it('runs as production when NODE_ENV is unset, so it refuses to start without APP_SECRET', () => {
    expect(() => loadConfig({})).toThrow(ConfigError);
    expect(() => loadConfig({})).toThrow(/APP_SECRET: required .* unless NODE_ENV is development or test/);
    const { NODE_ENV: _, ...unset } = production;
    expect(loadConfig(unset)).toMatchObject({ env: 'production', session: { secure: true } });
  });

  it('uses the public development secret only when NODE_ENV says development or test', () => {
    expect(loadConfig({ NODE_ENV: 'development' }).appSecret).toBe(loadConfig({ NODE_ENV: 'test' }).appSecret);
    expect(() => loadConfig({ NODE_ENV: 'production', SMTP_URL: production.SMTP_URL })).toThrow(/APP_SECRET/);
  });

  it('refuses cookies without Secure in production', () => {
    expect(() => loadConfig({ ...production, SESSION_COOKIE_SECURE: 'false' })).toThrow(/SESSION_COOKIE_SECURE: must be true in production/);
  });

  it('prefixes both cookie names with __Host- whenever cookies are Secure, and only then', () => {
    expect(loadConfig({ NODE_ENV: 'development', SESSION_COOKIE_SECURE: 'true', SESSION_COOKIE_NAME: 'sid' }).session).toMatchObject({
      cookieName: '__Host-sid',
      csrfCookieName: '__Host-csrf_token',
    });
    expect(loadConfig({ ...production, SESSION_COOKIE_NAME: '__Host-sid' }).session.cookieName).toBe('__Host-sid');
    expect(() => loadConfig({ NODE_ENV: 'development', SESSION_COOKIE_NAME: '__Host-sid' })).toThrow(/SESSION_COOKIE_NAME/);
  });

  it('requires a real secret and a real SMTP server in production', () => {
    expect(() => loadConfig({ ...production, APP_SECRET: '' })).toThrow(/APP_SECRET/);
    expect(() => loadConfig({ ...production, APP_SECRET: 'short' })).toThrow(/APP_SECRET/);
    expect(() => loadConfig({ ...production, SMTP_URL: '' })).toThrow(/SMTP_URL/);
  });

  it('takes the OIDC settings all together or not at all', () => {
    expect(() => loadConfig({ ...development, OIDC_ISSUER: 'https://accounts.example.com' })).toThrow(/OIDC_CLIENT_ID/);
    expect(loadConfig({ ...development, OIDC_ISSUER: 'https://accounts.example.com', OIDC_CLIENT_ID: 'id', OIDC_CLIENT_SECRET: 'secret' }).oidc).toMatchObject({
      providerName: 'google',
      displayName: 'Google',
      clientId: 'id',
    });
  });

  it.each([
    [{ PORT: 'eighty' }, /PORT/],
    [{ ROLE: 'scheduler' }, /ROLE/],
    [{ DATABASE_URL: 'not a url' }, /DATABASE_URL/],
    [{ SESSION_COOKIE_NAME: 'bad name;' }, /SESSION_COOKIE_NAME/],
    [{ SESSION_COOKIE_SECURE: 'maybe' }, /SESSION_COOKIE_SECURE/],
    [{ SESSION_COOKIE_SAMESITE: 'none' }, /SESSION_COOKIE_SAMESITE.*SESSION_COOKIE_SECURE/],
    [{ ALLOWED_ORIGINS: 'https://app.example.com, nonsense' }, /ALLOWED_ORIGINS/],
  ])('fails fast naming the variable for %o', (env, message) => {
    expect(() => loadConfig({ ...development, ...env })).toThrow(ConfigError);
    expect(() => loadConfig({ ...development, ...env })).toThrow(message);
  });

  it('reads origins as a comma-separated list of origins', () => {
    expect(loadConfig({ ...development, ALLOWED_ORIGINS: 'https://app.example.com/path, http://localhost:3000' }).allowedOrigins).toEqual([
      'https://app.example.com',
      'http://localhost:3000',
    ]);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ ...development, PORT: '', DATABASE_URL: '' })).toMatchObject({ port: 8080, databaseUrl: undefined });
  });

  it('gives a running model as long to recover as to start (an engine recovery reloads the model), and refuses less in production', () => {
    expect(loadConfig(production).provisioning).toMatchObject({ startTimeoutSeconds: 1800, recoveryGraceSeconds: 1800 });
    expect(loadConfig({ ...production, DEPLOYMENT_START_TIMEOUT_SECONDS: '3600' }).provisioning.recoveryGraceSeconds).toBe(3600);
    expect(loadConfig({ ...production, DEPLOYMENT_RECOVERY_GRACE_SECONDS: '2400' }).provisioning.recoveryGraceSeconds).toBe(2400);
    expect(() => loadConfig({ ...production, DEPLOYMENT_RECOVERY_GRACE_SECONDS: '600' })).toThrow(
      new ConfigError(
        'Invalid configuration:\n  DEPLOYMENT_RECOVERY_GRACE_SECONDS: at least DEPLOYMENT_START_TIMEOUT_SECONDS in production (a recovery reloads the model); unset, it is the start timeout',
      ),
    );
    // Tests and development may shorten it to watch a recovery fail.
    expect(loadConfig({ ...development, DEPLOYMENT_RECOVERY_GRACE_SECONDS: '3' }).provisioning.recoveryGraceSeconds).toBe(3);
  });

  it('reads the inference relay timeouts in seconds', () => {
    expect(loadConfig(development).inference).toEqual({ connectTimeoutMs: 5_000, firstByteTimeoutMs: 600_000, idleTimeoutMs: 60_000 });
    expect(loadConfig({ ...development, INFERENCE_IDLE_TIMEOUT_SECONDS: '0.5' }).inference.idleTimeoutMs).toBe(500);
    expect(() => loadConfig({ ...development, INFERENCE_IDLE_TIMEOUT_SECONDS: '0' })).toThrow(/INFERENCE_IDLE_TIMEOUT_SECONDS/);
  });

  it('configures no payment processor without a Stripe key, and wants all three Stripe settings together', () => {
    expect(loadConfig(development).stripe).toEqual({
      secretKey: undefined,
      publishableKey: undefined,
      webhookSecret: undefined,
      eventDestinationSecret: undefined,
      apiUrl: undefined,
    });
    const stripe = { STRIPE_SECRET_KEY: 'sk_test_abc123', STRIPE_PUBLISHABLE_KEY: 'pk_test_abc123', STRIPE_WEBHOOK_SECRET: 'whsec_abc123' };
    expect(loadConfig({ ...development, ...stripe }).stripe).toMatchObject({ secretKey: 'sk_test_abc123' });
    expect(() => loadConfig({ ...development, STRIPE_SECRET_KEY: 'sk_test_abc123' })).toThrow(/STRIPE_PUBLISHABLE_KEY, STRIPE_WEBHOOK_SECRET: required with STRIPE_SECRET_KEY/);
    expect(() => loadConfig({ ...development, ...stripe, STRIPE_SECRET_KEY: 'pk_test_abc123' })).toThrow(/STRIPE_SECRET_KEY: must be a Stripe secret key/);
  });

  it('enforces billing by default exactly when a real processor is configured (BILLING_ENFORCEMENT)', () => {
    const stripe = { STRIPE_SECRET_KEY: 'sk_test_abc123', STRIPE_PUBLISHABLE_KEY: 'pk_test_abc123', STRIPE_WEBHOOK_SECRET: 'whsec_abc123' };
    expect(loadConfig({ NODE_ENV: 'development' }).billingEnforcement).toBe(false);
    expect(loadConfig({ NODE_ENV: 'development', ...stripe }).billingEnforcement).toBe(true);
    expect(loadConfig({ NODE_ENV: 'development', BILLING_ENFORCEMENT: 'on' }).billingEnforcement).toBe(true);
    expect(loadConfig({ NODE_ENV: 'development', ...stripe, BILLING_ENFORCEMENT: 'false' }).billingEnforcement).toBe(false);
  });

  it('reads none of the local stand-ins\' settings: they are make run\'s (dev/config.ts), and no value of theirs stops the service', () => {
    // Values each stand-in setting refuses, or refuses in production.
    const standIns = Object.fromEntries(DEV_SETTINGS.map((name) => [name, 'not-a-value']));
    expect(loadConfig({ ...production, ...standIns, LOCAL_WEB_APP: 'true' })).toEqual(loadConfig(production));
  });
});
