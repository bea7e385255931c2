import type { Logger } from 'pino';
import type { Config } from '../src/config.ts';
import { startStripeEmulator, type StripeEmulator } from './stripe/stripe-emulator.ts';

/** Where the service receives the processor's events (the interface's webhook route). */
export const WEBHOOK_PATH = '/v1/billing/webhook';
/** Where it receives thin events of an event destination (meter error reports). */
export const EVENT_NOTIFICATIONS_PATH = '/v1/billing/event-notifications';
/** The thin events the service handles: what its event destination enables. */
export const THIN_EVENT_TYPES = ['v1.billing.meter.error_report_triggered'];

/**
 * Starts the Stripe emulator (a local stand-in for Stripe) for `make run`, with a webhook endpoint
 * to the service's webhook route and an event destination of thin events to its notification route,
 * as an operator would create in Stripe's Dashboard.
 */
export function startLocalStripe(config: Config, port: number, log: Logger): Promise<StripeEmulator> {
  return startStripeEmulator({
    port,
    webhooks: [{ url: `${config.publicUrl}${WEBHOOK_PATH}`, secret: config.stripe.webhookSecret }],
    eventDestinations: [{ url: `${config.publicUrl}${EVENT_NOTIFICATIONS_PATH}`, secret: config.stripe.eventDestinationSecret, enabledEvents: THIN_EVENT_TYPES }],
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
      eventDestinationSecret: emulator.eventDestinationSecrets[0],
      apiUrl: emulator.url,
    },
  };
}
