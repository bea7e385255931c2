import { describe, expect, it } from 'vitest';
import { loadDevConfig } from '../../dev/config.ts';
import { loadConfig } from '../../src/config.ts';

/** The stand-ins' settings as `make run` (dev/main.ts) reads them: beside the service's, from one environment. */
const devConfig = (env: Record<string, string>) => loadDevConfig(loadConfig(env), env);

const development = { NODE_ENV: 'development' };
const production = { NODE_ENV: 'production', APP_SECRET: 'x'.repeat(32), SMTP_URL: 'smtp://mail.example.com:587' };
const stripe = { STRIPE_SECRET_KEY: 'sk_test_abc123', STRIPE_PUBLISHABLE_KEY: 'pk_test_abc123', STRIPE_WEBHOOK_SECRET: 'whsec_abc123' };

describe('the local stand-ins\' settings (make run)', () => {
  it('has the defaults of make run, which sets NODE_ENV=development', () => {
    expect(devConfig(development)).toEqual({
      maildev: { smtpPort: 1025, webPort: 1080 },
      stripeEmulator: { enabled: true, port: 12111 },
      clusterSimulator: { enabled: true, port: 9997, hostedPort: 9996, modelLoadMs: 3000 },
      localWebApp: true,
    });
  });

  it('starts no stand-in but MailDev outside development unless asked', () => {
    for (const env of [{ NODE_ENV: 'test' }, production]) {
      expect(devConfig(env)).toMatchObject({ stripeEmulator: { enabled: false }, clusterSimulator: { enabled: false }, localWebApp: false });
    }
    expect(devConfig({ NODE_ENV: 'test', STRIPE_EMULATOR: 'true', CLUSTER_SIMULATOR: 'on' })).toMatchObject({ stripeEmulator: { enabled: true }, clusterSimulator: { enabled: true } });
  });

  it('starts the Stripe emulator in development only when no Stripe key is set', () => {
    expect(devConfig({ ...development, ...stripe }).stripeEmulator.enabled).toBe(false);
    expect(() => devConfig({ ...development, ...stripe, STRIPE_EMULATOR: 'true' })).toThrow(/STRIPE_EMULATOR: the Stripe emulator stands in only when STRIPE_SECRET_KEY is unset/);
  });

  it('serves the local stand-in for the web app by default only in development without WEB_APP_URL, never in production (LOCAL_WEB_APP)', () => {
    expect(devConfig({ ...development, WEB_APP_URL: 'https://app.example.com' }).localWebApp).toBe(false);
    expect(devConfig({ ...development, LOCAL_WEB_APP: 'false' }).localWebApp).toBe(false);
    expect(devConfig({ NODE_ENV: 'test', LOCAL_WEB_APP: 'true' }).localWebApp).toBe(true);
    expect(devConfig({ ...development, WEB_APP_URL: 'http://localhost:8080/', LOCAL_WEB_APP: 'true' }).localWebApp).toBe(true);
    expect(() => devConfig({ ...production, LOCAL_WEB_APP: 'true' })).toThrow(/LOCAL_WEB_APP: the local stand-in for the web app runs only in development or test/);
    expect(() => devConfig({ ...development, WEB_APP_URL: 'https://app.example.com', LOCAL_WEB_APP: 'true' })).toThrow(/LOCAL_WEB_APP: the links of emails go to WEB_APP_URL/);
  });

  it('names each bad setting, and takes an empty one as unset', () => {
    expect(() => devConfig({ ...development, STRIPE_EMULATOR_PORT: 'eighty', CLUSTER_SIMULATOR: 'maybe' })).toThrow(/STRIPE_EMULATOR_PORT: [^\n]*\n {2}CLUSTER_SIMULATOR: /);
    expect(devConfig({ ...development, MAILDEV_WEB_PORT: '', CLUSTER_SIMULATOR_MODEL_LOAD_MS: '50' })).toMatchObject({ maildev: { webPort: 1080 }, clusterSimulator: { modelLoadMs: 50 } });
  });
});
