import { describe, expect, it } from 'vitest';
import { desiredWithin, initialReplicas, settingsOnCreate, settingsOnUpdate, settingsScaleMessage } from '../../src/deployments/scaling-settings.ts';

const stored = { min_replicas: 2, max_replicas: 4, target_concurrency: 4, scale_to_zero_after_seconds: 900 };

describe('scaling settings', () => {
  it('default to one fixed replica, and max_replicas to max(min_replicas, 1)', () => {
    expect(settingsOnCreate({ model_name: 'm' })).toEqual({ min_replicas: 1, max_replicas: 1, target_concurrency: 4, scale_to_zero_after_seconds: 900 });
    expect(settingsOnCreate({ model_name: 'm', min_replicas: 3 }).max_replicas).toBe(3);
    expect(settingsOnCreate({ model_name: 'm', min_replicas: 0 }).max_replicas).toBe(1);
    expect(initialReplicas({ min_replicas: 0 })).toBe(1);
  });

  it('refuse max_replicas below min_replicas at the field sent', () => {
    expect(() => settingsOnCreate({ model_name: 'm', min_replicas: 3, max_replicas: 2 })).toThrow(expect.objectContaining({ errors: [expect.objectContaining({ location: 'body/max_replicas' })] }));
    expect(() => settingsOnUpdate(stored, { min_replicas: 5 })).toThrow(expect.objectContaining({ errors: [expect.objectContaining({ location: 'body/min_replicas' })] }));
    expect(() => settingsOnUpdate(stored, {})).toThrow(expect.objectContaining({ code: 'VALIDATION_FAILED' }));
    expect(settingsOnUpdate(stored, { max_replicas: 2 })).toEqual({ ...stored, max_replicas: 2 });
  });

  it('move the desired replicas into the bounds, waking a deployment at zero given a minimum', () => {
    expect(desiredWithin(1, { min_replicas: 3, max_replicas: 4 })).toBe(3);
    expect(desiredWithin(5, { min_replicas: 1, max_replicas: 2 })).toBe(2);
    expect(desiredWithin(0, { min_replicas: 1, max_replicas: 2 })).toBe(1);
    expect(desiredWithin(0, { min_replicas: 0, max_replicas: 2 })).toBe(0);
    expect(settingsScaleMessage(3, 1, { min_replicas: 0, max_replicas: 1 })).toBe('Scaled from 3 to 1 replica: max_replicas is now 1.');
  });
});
