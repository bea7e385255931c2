import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

describe('configuration', () => {
  it('has working defaults for make run', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      env: 'development',
      role: 'all',
      port: 8080,
      publicUrl: 'http://localhost:8080',
      databaseUrl: undefined,
      session: { cookieName: 'session', secure: false, sameSite: 'lax' },
      allowedOrigins: ['http://localhost:8080'],
      responseValidation: true,
    });
  });

  const production = { NODE_ENV: 'production', APP_SECRET: 'x'.repeat(32), SMTP_URL: 'smtp://mail.example.com:587' };

  it('defaults to secure cookies and no response validation in production', () => {
    expect(loadConfig(production)).toMatchObject({ session: { secure: true }, responseValidation: false });
  });

  it('requires a real secret and a real SMTP server in production', () => {
    expect(() => loadConfig({ ...production, APP_SECRET: '' })).toThrow(/APP_SECRET/);
    expect(() => loadConfig({ ...production, APP_SECRET: 'short' })).toThrow(/APP_SECRET/);
    expect(() => loadConfig({ ...production, SMTP_URL: '' })).toThrow(/SMTP_URL/);
  });

  it('takes the OIDC settings all together or not at all', () => {
    expect(() => loadConfig({ OIDC_ISSUER: 'https://accounts.example.com' })).toThrow(/OIDC_CLIENT_ID/);
    expect(loadConfig({ OIDC_ISSUER: 'https://accounts.example.com', OIDC_CLIENT_ID: 'id', OIDC_CLIENT_SECRET: 'secret' }).oidc).toMatchObject({
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
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });

  it('reads origins as a comma-separated list of origins', () => {
    expect(loadConfig({ ALLOWED_ORIGINS: 'https://app.example.com/path, http://localhost:3000' }).allowedOrigins).toEqual([
      'https://app.example.com',
      'http://localhost:3000',
    ]);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '', DATABASE_URL: '' })).toMatchObject({ port: 8080, databaseUrl: undefined });
  });

  it('reads the inference relay timeouts in seconds', () => {
    expect(loadConfig({}).inference).toEqual({ connectTimeoutMs: 5_000, firstByteTimeoutMs: 600_000, idleTimeoutMs: 60_000 });
    expect(loadConfig({ INFERENCE_IDLE_TIMEOUT_SECONDS: '0.5' }).inference.idleTimeoutMs).toBe(500);
    expect(() => loadConfig({ INFERENCE_IDLE_TIMEOUT_SECONDS: '0' })).toThrow(/INFERENCE_IDLE_TIMEOUT_SECONDS/);
  });
});
