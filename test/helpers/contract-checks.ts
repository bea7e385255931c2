/**
 * The checks of streamed answers still under way (contract.ts starts them) and the violations they
 * found; kept apart from contract.ts so the per-file hook loads no schema.
 */
export const pendingChecks = new Set<Promise<void>>();
export const foundViolations: Error[] = [];

/** Waits for the stream checks under way and throws the first violation any of them found. */
export async function settleContractChecks(): Promise<void> {
  while (pendingChecks.size) await Promise.all([...pendingChecks]);
  const found = foundViolations.splice(0);
  if (found.length) throw found[0];
}
