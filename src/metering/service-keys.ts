/**
 * Service keys and prices as pure rules: what a `service_key` may look like and what a price may be.
 * A key is the interface's descriptor `provider:region:resource_kind:instance_type:gpu_type:gpu_count`.
 * Two kinds exist: `gpu_instance` (GPU seconds of `gpu_count` GPUs of an instance type, in a
 * cluster's provider and region, GPU type in lower case: `aws:us-east-1:gpu_instance:g5.xlarge:a10g:1`)
 * and `hosted_model` (tokens of a hosted model, named in the instance segment, the GPU segments empty:
 * `platform::hosted_model:qwen2.5-instruct::`). The `prices` table checks the same shape.
 */

export type ResourceKind = 'gpu_instance' | 'hosted_model';

export interface ServiceDimensions {
  provider: string;
  region: string;
  resource_kind: ResourceKind;
  instance_type: string;
  gpu_type: string;
  gpu_count: string;
}

const SEGMENTS = ['provider', 'region', 'resource_kind', 'instance_type', 'gpu_type', 'gpu_count'] as const;
/** A segment: no colon (the separator), no space or control character. */
const SEGMENT = /^[A-Za-z0-9._\-/+]*$/;
const GPU_COUNT = /^[1-9][0-9]{0,2}$/;

export class InvalidPriceError extends Error {}

/** The dimensions of a well-formed service key; throws `InvalidPriceError` saying what is wrong. */
export function parseServiceKey(key: string): ServiceDimensions {
  const parts = key.split(':');
  if (parts.length !== SEGMENTS.length) {
    throw new InvalidPriceError(`a service key has ${SEGMENTS.length} segments separated by colons (${SEGMENTS.join(':')}); "${key}" has ${parts.length}`);
  }
  const bad = parts.findIndex((part) => !SEGMENT.test(part));
  if (bad >= 0) throw new InvalidPriceError(`the ${SEGMENTS[bad]} segment "${parts[bad]}" may hold only letters, digits and . _ - / +`);
  const [provider, region, kind, instance_type, gpu_type, gpu_count] = parts as [string, string, string, string, string, string];
  if (!provider) throw new InvalidPriceError('the provider segment is empty');
  if (kind === 'gpu_instance') {
    for (const [name, value] of [['region', region], ['instance_type', instance_type], ['gpu_type', gpu_type]] as const) {
      if (!value) throw new InvalidPriceError(`a gpu_instance key needs its ${name}`);
    }
    if (gpu_type !== gpu_type.toLowerCase()) throw new InvalidPriceError(`the gpu_type segment is lower case ("${gpu_type.toLowerCase()}")`);
    if (!GPU_COUNT.test(gpu_count)) throw new InvalidPriceError(`the gpu_count segment of a gpu_instance key is a whole number of GPUs, not "${gpu_count}"`);
  } else if (kind === 'hosted_model') {
    if (!instance_type) throw new InvalidPriceError('a hosted_model key names the model in its instance_type segment');
    if (gpu_type || gpu_count) throw new InvalidPriceError('the gpu_type and gpu_count segments of a hosted_model key are empty');
  } else {
    throw new InvalidPriceError(`the resource_kind segment is gpu_instance or hosted_model, not "${kind}"`);
  }
  return { provider, region, resource_kind: kind, instance_type, gpu_type, gpu_count };
}

/** Whole units and up to 12 decimals: what `prices.unit_amount_decimal` (numeric(20, 12)) holds exactly. */
const UNIT_AMOUNT = /^(0|[1-9][0-9]{0,7})(\.[0-9]{1,12})?$/;

/** A unit price as given (a decimal string, never through a float); throws `InvalidPriceError` otherwise. */
export function parseUnitAmount(amount: string): string {
  if (!UNIT_AMOUNT.test(amount)) {
    throw new InvalidPriceError(`the unit amount is a decimal number of dollars, at least 0, with at most 8 digits before the point and 12 after it, e.g. 0.000279; not "${amount}"`);
  }
  return amount;
}
