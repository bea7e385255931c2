import type { components } from '../../generated/api.d.ts';

export type Problem = components['schemas']['Problem'];

/** The JSON body of a response, typed as the caller expects it (for raw requests; the typed client parses its own). */
export async function jsonOf<T = Record<string, unknown>>(response: Response): Promise<T> {
  return (await response.json()) as T;
}

/**
 * A value the typed client would refuse at compile time, sent on purpose to see the service refuse
 * it (a wrong type, an unknown field, a value out of the documented set).
 */
export function unchecked(value: unknown): never {
  return value as never;
}

/** The status of a typed client's answer. */
export async function statusOf(call: Promise<{ response: Response }>): Promise<number> {
  return (await call).response.status;
}
