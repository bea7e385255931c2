import { AppError } from '../errors.ts';
import type { Handlers, OperationId } from './types.ts';

/** The answer of every operation that is specified but not built yet: 501 `NOT_IMPLEMENTED`. */
function notImplemented(): never {
  throw new AppError('NOT_IMPLEMENTED', 'This operation is specified but not built yet.');
}

/** Maps each named operation to the 501 answer, so the handler map stays complete while areas are built. */
export function notBuilt<const K extends OperationId>(operationIds: readonly K[]): Pick<Handlers, K> {
  return Object.fromEntries(operationIds.map((id) => [id, notImplemented])) as unknown as Pick<Handlers, K>;
}
