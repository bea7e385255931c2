import type { components } from '../../generated/api.d.ts';

export type Problem = components['schemas']['Problem'];
export type Deployment = components['schemas']['Deployment'];

/** The JSON body of a response, typed as the caller expects it. */
export async function jsonOf<T = Record<string, unknown>>(response: Response): Promise<T> {
  return (await response.json()) as T;
}
