import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';

/** The purpose signing secrets are sealed under at rest (Keyring). */
export const SECRET_SEAL = 'webhook-signing-secret';

/** A new signing secret: `whsec_` and the base64 of 32 random bytes, as Standard Webhooks libraries take it. */
export function newSigningSecret(): string {
  return `${PREFIX}${randomBytes(32).toString('base64')}`;
}

/**
 * `v1,<signature>` of one secret, as the Standard Webhooks specification signs: the base64
 * HMAC-SHA256 of `<webhook-id>.<webhook-timestamp>.<body>`, keyed with the secret's base64-decoded
 * bytes (after `whsec_`).
 */
export function signPayload(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

/** The three headers of a delivery attempt; one signature per secret, separated by spaces. */
export function webhookHeaders(secrets: readonly string[], id: string, timestamp: number, body: string): Record<string, string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': secrets.map((secret) => signPayload(secret, id, timestamp, body)).join(' '),
  };
}
