import { describe, expect, it } from 'vitest';
import { parseSize, resolveLaunch, type ModelSpec } from '../../src/deployments/launch-spec.ts';

const QWEN: ModelSpec[] = [
  { modelFormat: 'gptq', modelSizeInBillions: 7, quantizations: ['Int4', 'Int8'], modelEngine: 'vLLM' },
  { modelFormat: 'pytorch', modelSizeInBillions: 14, quantizations: ['none'], modelEngine: 'Transformers' },
  { modelFormat: 'pytorch', modelSizeInBillions: 0.5, quantizations: ['none', '8-bit'], modelEngine: 'Transformers' },
  { modelFormat: 'pytorch', modelSizeInBillions: 7, quantizations: ['none', '4-bit'], modelEngine: 'vLLM' },
];

describe('resolving a launch combination', () => {
  it('fills what the request leaves out: pytorch, its smallest size, its first quantization', () => {
    expect(resolveLaunch(QWEN, {})).toEqual({
      ok: true,
      launch: { modelFormat: 'pytorch', modelSizeInBillions: 0.5, quantization: 'none', modelEngine: 'Transformers' },
    });
  });

  it('takes the first format offered when pytorch is not', () => {
    const specs = QWEN.filter((spec) => spec.modelFormat !== 'pytorch');
    expect(resolveLaunch(specs, {})).toMatchObject({ ok: true, launch: { modelFormat: 'gptq', modelSizeInBillions: 7, quantization: 'Int4' } });
  });

  it('keeps what the request names, with the engine of that combination', () => {
    expect(resolveLaunch(QWEN, { modelFormat: 'pytorch', modelSizeInBillions: 7, quantization: '4-bit' })).toEqual({
      ok: true,
      launch: { modelFormat: 'pytorch', modelSizeInBillions: 7, quantization: '4-bit', modelEngine: 'vLLM' },
    });
  });

  it('reads a size given as text', () => {
    expect(resolveLaunch(QWEN, { modelSizeInBillions: '0.5' })).toMatchObject({ ok: true, launch: { modelSizeInBillions: 0.5 } });
    expect(resolveLaunch(QWEN, { modelSizeInBillions: ' 7.0 ' })).toMatchObject({ ok: true, launch: { modelSizeInBillions: 7 } });
  });

  it('refuses a model without launch combinations', () => {
    expect(resolveLaunch([], {})).toEqual({ ok: false, reason: 'it has no launch combinations' });
  });

  it('refuses a size that is not a positive number, naming it', () => {
    expect(resolveLaunch(QWEN, { modelSizeInBillions: 'seven' })).toEqual({ ok: false, reason: 'model_size_in_billions "seven" is not a positive number' });
    expect(resolveLaunch(QWEN, { modelSizeInBillions: 0 })).toMatchObject({ ok: false });
  });

  it('refuses a format not offered, listing those that are', () => {
    expect(resolveLaunch(QWEN, { modelFormat: 'ggufv2' })).toEqual({ ok: false, reason: 'model_format "ggufv2" is not offered; choose one of gptq, pytorch' });
  });

  it('refuses a size not offered in the format, listing those that are, smallest first', () => {
    expect(resolveLaunch(QWEN, { modelSizeInBillions: 72 })).toEqual({ ok: false, reason: 'size 72B is not offered in pytorch; choose one of 0.5, 7, 14' });
  });

  it('refuses a quantization not offered for the combination, listing those that are', () => {
    expect(resolveLaunch(QWEN, { modelSizeInBillions: 7, quantization: 'Int4' })).toEqual({
      ok: false,
      reason: 'quantization "Int4" is not offered for pytorch 7B; choose one of none, 4-bit',
    });
  });
});

describe('reading a model size', () => {
  it.each([
    [7, 7],
    ['7', 7],
    ['7.0', 7],
    ['0.5', 0.5],
    [undefined, undefined],
  ])('reads %j as %j', (input, expected) => {
    expect(parseSize(input)).toBe(expected);
  });

  it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY, '', '7B', '1e3', '-7', '.5'])('refuses %j', (input) => {
    expect(parseSize(input)).toBeNull();
  });
});
