import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { startStripeEmulator, type StripeEmulator } from './stripe/stripe-emulator.ts';

/** Where the service receives the processor's events (the interface's webhook route). */
export const WEBHOOK_PATH = '/v1/billing/webhook';

/**
 * Starts the Stripe emulator (a local stand-in for Stripe) for `make run`, with a webhook endpoint
 * to the service's webhook route, as an operator would create in Stripe's Dashboard.
 */
export function startLocalStripe(config: Config, log: Logger): Promise<StripeEmulator> {
  return startStripeEmulator({
    port: config.stripe.emulator.port,
    webhooks: [{ url: `${config.publicUrl}${WEBHOOK_PATH}`, secret: config.stripe.webhookSecret }],
    log,
  });
}

/** The configuration with the emulator as the payment processor: the same settings Stripe takes. */
export function withLocalStripe(config: Config, emulator: StripeEmulator): Config {
  return {
    ...config,
    stripe: {
      ...config.stripe,
      secretKey: emulator.secretKey,
      publishableKey: emulator.publishableKey,
      webhookSecret: emulator.webhookSecrets[0],
      apiUrl: emulator.url,
    },
  };
}
