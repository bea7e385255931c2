import type { JobDefinition } from './queue.ts';

/** Every background job kind of the service. Areas add theirs here as they are built. */
export function jobDefinitions(): JobDefinition[] {
  return [];
}
