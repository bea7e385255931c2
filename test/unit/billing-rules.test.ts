import { describe, expect, it } from 'vitest';
import { InvalidPriceError, parseServiceKey, parseUnitAmount } from '../../src/metering/service-keys.ts';
import { currentPeriod } from '../../src/metering/usage-summary.ts';

describe('service keys', () => {
  it('reads the dimensions of a GPU instance key and of a hosted model key', () => {
    expect(parseServiceKey('aws:us-east-1:gpu_instance:g5.xlarge:a10g:1')).toEqual({
      provider: 'aws', region: 'us-east-1', resource_kind: 'gpu_instance', instance_type: 'g5.xlarge', gpu_type: 'a10g', gpu_count: '1',
    });
    expect(parseServiceKey('platform::hosted_model:qwen2.5-instruct::')).toEqual({
      provider: 'platform', region: '', resource_kind: 'hosted_model', instance_type: 'qwen2.5-instruct', gpu_type: '', gpu_count: '',
    });
  });

  it.each([
    ['aws:us-east-1:gpu_instance:g5.xlarge:a10g', /6 segments .* has 5/],
    ['aws:us-east-1:gpu_instance:g5.xlarge:a10g:1:x', /has 7/],
    ['aws:us-east-1:gpu_instance:g5.xlarge:A10G:1', /lower case \("a10g"\)/],
    ['aws:us-east-1:gpu_instance:g5.xlarge:a10g:0', /whole number of GPUs, not "0"/],
    ['aws:us-east-1:gpu_instance:g5.xlarge:a10g:one', /whole number of GPUs/],
    ['aws::gpu_instance:g5.xlarge:a10g:1', /needs its region/],
    [':us-east-1:gpu_instance:g5.xlarge:a10g:1', /provider segment is empty/],
    ['aws:us east 1:gpu_instance:g5.xlarge:a10g:1', /region segment "us east 1" may hold only/],
    ['aws:us-east-1:cpu_instance:m5.large::', /gpu_instance or hosted_model, not "cpu_instance"/],
    ['platform::hosted_model:::', /names the model/],
    ['platform::hosted_model:qwen3:h100:1', /are empty/],
  ])('refuses %s, saying why', (key, reason) => {
    expect(() => parseServiceKey(key)).toThrow(InvalidPriceError);
    expect(() => parseServiceKey(key)).toThrow(reason);
  });
});

describe('unit amounts', () => {
  it.each(['0', '0.000279', '12.5', '0.000000000001', '99999999.999999999999'])('accepts %s as given', (amount) => {
    expect(parseUnitAmount(amount)).toBe(amount);
  });

  it.each(['', '-1', '1e-7', '.5', '01', '0.0000000000001', '100000000', '1,5', ' 1', 'NaN'])('refuses %j', (amount) => {
    expect(() => parseUnitAmount(amount)).toThrow(InvalidPriceError);
  });
});

describe('the current billing period', () => {
  const none = { current_period_start: null, current_period_end: null };

  it('is the calendar month (UTC) without a subscription period', () => {
    expect(currentPeriod(none, new Date('2026-11-30T23:59:59Z'))).toEqual({ start: new Date('2026-11-01T00:00:00Z'), end: new Date('2026-12-01T00:00:00Z') });
    expect(currentPeriod(none, new Date('2026-12-31T12:00:00Z'))).toEqual({ start: new Date('2026-12-01T00:00:00Z'), end: new Date('2027-01-01T00:00:00Z') });
  });

  it('is the subscription period when it contains now, else the calendar month', () => {
    const subscription = { current_period_start: new Date('2026-11-15T08:00:00Z'), current_period_end: new Date('2026-12-15T08:00:00Z') };
    expect(currentPeriod(subscription, new Date('2026-12-01T00:00:00Z'))).toEqual({ start: subscription.current_period_start, end: subscription.current_period_end });
    // A period the processor has not renewed yet (its end passed): the calendar month until it is.
    expect(currentPeriod(subscription, new Date('2026-12-15T08:00:00Z'))).toEqual({ start: new Date('2026-12-01T00:00:00Z'), end: new Date('2027-01-01T00:00:00Z') });
  });
});
