import type { components } from '../../generated/api.d.ts';

export type Problem = components['schemas']['Problem'];

/** The JSON body of a response, typed as the caller expects it. */
export async function jsonOf<T = Record<string, unknown>>(response: Response): Promise<T> {
  return (await response.json()) as T;
}
