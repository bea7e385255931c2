import type { components } from '../../generated/api.d.ts';
import type { DeploymentRow } from '../db/models/deployments.ts';
import { AppError, type ValidationIssue } from '../errors.ts';
import type { ScalingColumns } from './deployments.repository.ts';

/**
 * A deployment's scaling settings as pure rules (docs/decisions/2026-11-29-elastic-deployments.md,
 * part 2): the defaults of create, the bounds a change is checked against, the fields fixed at
 * creation, and where the desired replicas go when the bounds move. The schema checks each field's
 * own range; these check what spans fields and the stored values.
 */

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type UpdateDeploymentRequest = components['schemas']['UpdateDeploymentRequest'];

/** What a deployment stored before elastic deployments, and what create stores without settings: one fixed replica. */
const DEFAULTS: ScalingColumns = { min_replicas: 1, max_replicas: 1, target_concurrency: 4, scale_to_zero_after_seconds: 900 };

/** The replicas a deployment starts with: `min_replicas`, and at least one (it is placed before it can idle). */
export const initialReplicas = (settings: Pick<ScalingColumns, 'min_replicas'>) => Math.max(settings.min_replicas, 1);

/**
 * The settings create stores: each field sent, else its default; `max_replicas` defaults to
 * `max(min_replicas, 1)`. 422 `VALIDATION_FAILED` at `body/max_replicas` when it is below `min_replicas`.
 */
export function settingsOnCreate(input: CreateDeploymentRequest): ScalingColumns {
  const min = input.min_replicas ?? DEFAULTS.min_replicas;
  const settings = {
    min_replicas: min,
    max_replicas: input.max_replicas ?? Math.max(min, 1),
    target_concurrency: input.target_concurrency ?? DEFAULTS.target_concurrency,
    scale_to_zero_after_seconds: input.scale_to_zero_after_seconds ?? DEFAULTS.scale_to_zero_after_seconds,
  };
  checkBounds(settings, 'max_replicas');
  return settings;
}

/** The scaling fields an update may change. */
const SCALING_FIELDS = ['min_replicas', 'max_replicas', 'target_concurrency', 'scale_to_zero_after_seconds'] as const;

/**
 * The settings an update leaves: the stored ones with the fields sent. 422 `VALIDATION_FAILED` for
 * an empty body, and when `max_replicas` ends below `min_replicas` (pointing at the field sent:
 * `max_replicas` when both were).
 */
export function settingsOnUpdate(stored: ScalingColumns, input: UpdateDeploymentRequest): ScalingColumns {
  if (Object.keys(input).length === 0) {
    throw new AppError('VALIDATION_FAILED', 'Send at least one setting to change.', {
      errors: [{ location: 'body', message: `names no field: send one or more of ${SCALING_FIELDS.join(', ')}` }],
    });
  }
  const settings = { ...pick(stored), ...Object.fromEntries(SCALING_FIELDS.flatMap((field) => (input[field] === undefined ? [] : [[field, input[field]]]))) };
  checkBounds(settings, input.max_replicas === undefined && input.min_replicas !== undefined ? 'min_replicas' : 'max_replicas');
  return settings;
}

function pick(stored: ScalingColumns): ScalingColumns {
  const { min_replicas, max_replicas, target_concurrency, scale_to_zero_after_seconds } = stored;
  return { min_replicas, max_replicas, target_concurrency, scale_to_zero_after_seconds };
}

function checkBounds(settings: ScalingColumns, at: 'min_replicas' | 'max_replicas'): void {
  if (settings.max_replicas >= settings.min_replicas) return;
  const message = `max_replicas (${settings.max_replicas}) must be at least min_replicas (${settings.min_replicas})`;
  throw new AppError('VALIDATION_FAILED', `The scaling settings do not hold together: ${message}.`, { errors: [{ location: `body/${at}`, message }] });
}

/** The fields fixed at creation an update may only repeat. */
const FIXED_FIELDS = ['model_name', 'model_format', 'model_size_in_billions', 'quantization', 'instance_type'] as const;

/**
 * 422 `VALIDATION_FAILED` naming each field fixed at creation sent with another value than the
 * deployment's (the same value is accepted and ignored). No code of its own: a new value of the
 * released `ErrorCode` enum would break generated clients.
 */
export function checkFixedFields(deployment: DeploymentRow, input: UpdateDeploymentRequest): void {
  const changed: ValidationIssue[] = FIXED_FIELDS.flatMap((field) => {
    const sent = input[field];
    if (sent === undefined) return [];
    const stored = deployment[field];
    const same = field === 'model_size_in_billions' ? Number(sent) === Number(stored) : sent === stored;
    return same ? [] : [{ location: `body/${field}`, message: `is fixed at creation (the deployment's is ${JSON.stringify(field === 'model_size_in_billions' ? Number(stored) : stored)}); create a new deployment to change it` }];
  });
  if (!changed.length) return;
  const fields = changed.map((issue) => issue.location.slice('body/'.length)).join(', ');
  throw new AppError('VALIDATION_FAILED', `A deployment's ${fields} cannot change after creation; create a new deployment instead.`, { errors: changed });
}

/**
 * The desired replicas once the bounds are `settings`: the current count moved into
 * [min_replicas, max_replicas]. A deployment at zero given a `min_replicas` of 1 or more goes to it.
 */
export function desiredWithin(current: number, settings: Pick<ScalingColumns, 'min_replicas' | 'max_replicas'>): number {
  return Math.min(Math.max(current, settings.min_replicas), settings.max_replicas);
}

/** The sentence of a `deployment.scaled` event with reason `settings`: from how many to how many, and which bound moved it. */
export function settingsScaleMessage(from: number, to: number, settings: Pick<ScalingColumns, 'min_replicas' | 'max_replicas'>): string {
  const bound = to > from ? `min_replicas is now ${settings.min_replicas}` : `max_replicas is now ${settings.max_replicas}`;
  return `Scaled from ${from} to ${to} ${to === 1 ? 'replica' : 'replicas'}: ${bound}.`;
}
