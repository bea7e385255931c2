import { describe, expect, it } from 'vitest';
import { isLoopbackHost, loadConfig } from '../../src/config.ts';

const oidc = (issuer: string) => ({ NODE_ENV: 'development', OIDC_ISSUER: issuer, OIDC_CLIENT_ID: 'client', OIDC_CLIENT_SECRET: 'secret' });

describe('OIDC settings', () => {
  it.each(['https://accounts.google.com', 'http://127.0.0.1:4000', 'http://127.8.9.10', 'http://localhost:4000/realms/dev', 'http://[::1]:4000'])(
    'accept the issuer %s',
    (issuer) => {
      expect(loadConfig(oidc(issuer)).oidc).toMatchObject({ issuer, clientId: 'client', providerName: 'google', displayName: 'Google' });
    },
  );

  it.each(['http://accounts.google.com', 'http://127.0.0.1.nip.io', 'http://10.0.0.1', 'ftp://127.0.0.1'])('refuse the issuer %s: https only, except on loopback', (issuer) => {
    expect(() => loadConfig(oidc(issuer))).toThrow(/OIDC_ISSUER: must be an https URL/);
  });

  it('tells loopback hosts from the rest', () => {
    expect(['localhost', '127.0.0.1', '127.255.0.1', '[::1]', '::1'].map(isLoopbackHost)).toEqual([true, true, true, true, true]);
    expect(['localhost.example.com', '128.0.0.1', '0.0.0.0', '[::2]', 'example.com'].map(isLoopbackHost)).toEqual([false, false, false, false, false]);
  });
});
