import { describe, expect, it } from 'vitest';
import { passesAllowlist } from '../../src/inference/engine-errors.ts';

describe('the allowlist of engine validation messages', () => {
  it.each([
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (1000 in the messages, 4000 in the completion).",
    'temperature: Input should be less than or equal to 2',
    '`top_logprobs` must be set together with `logprobs`.',
  ])('passes %j', (text) => {
    expect(passesAllowlist(text)).toBe(true);
  });

  it.each([
    "Model not found in the model list, uid: x. Available model uids: ['dep-28debacec0894fdb87505ccb79a1325f']",
    'Model not found in the model list, uid: x',
    'Traceback (most recent call last):\n  File "/opt/x.py", line 3',
    'ValueError: bad things',
    'Could not reach worker 10.0.3.7',
    'Could not reach gpu-node-3:30001',
    'Failed to open /home/xinference/models/qwen/config.json',
    'See https://docs.example.com',
    'deployment 0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21 is gone',
    'x'.repeat(301),
    '',
  ])('refuses %j', (text) => {
    expect(passesAllowlist(text)).toBe(false);
  });
});
