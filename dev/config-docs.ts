import type { SettingDoc } from '../src/config-docs.ts';

/** What each setting of dev/config.ts means, for the second table of docs/configuration.md (scripts/config-table.ts). */
export const DEV_SETTING_DOCS: Record<string, SettingDoc> = {
  MAILDEV_SMTP_PORT: { meaning: 'SMTP port of MailDev (local stand-in) when `SMTP_URL` is unset' },
  MAILDEV_WEB_PORT: { meaning: 'Port of MailDev\'s web inbox when `SMTP_URL` is unset' },
  LOCAL_WEB_APP: { meaning: 'Serve the local stand-in for the web app\'s landing pages (`/verify-email`, `/reset-password`, `/invitations/{token}`, `/settings/billing`; `dev/web-app/`); refused with `NODE_ENV=production` and beside a `WEB_APP_URL` of another origin', default: 'on in development without `WEB_APP_URL`, off otherwise' },
  STRIPE_EMULATOR: { meaning: 'Start the Stripe emulator (local stand-in)', default: 'on in development without `STRIPE_SECRET_KEY`' },
  STRIPE_EMULATOR_PORT: { meaning: 'Port of the Stripe emulator' },
  CLUSTER_SIMULATOR: { meaning: 'Start the GPU cluster simulators and register them as the clusters `local-simulator` and `local-hosted` (hosted)', default: 'on in development' },
  CLUSTER_SIMULATOR_PORT: { meaning: 'Port of the GPU cluster simulator registered as `local-simulator`' },
  CLUSTER_SIMULATOR_HOSTED_PORT: { meaning: 'The port of the hosted models\' simulator (registered as `local-hosted`), started with the other' },
  CLUSTER_SIMULATOR_MODEL_LOAD_MS: { meaning: 'How long a model takes to load on the GPU cluster simulators' },
};
