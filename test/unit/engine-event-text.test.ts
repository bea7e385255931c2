import { describe, expect, it } from 'vitest';
import { ENGINE_MESSAGE_LIMIT, tenantSafe } from '../../src/deployments/engine-log.ts';
import { engineModelUid } from '../../src/deployments/provisioning.ts';

const own = engineModelUid('0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21');
const other = engineModelUid('0193a7e2-4c1d-7b8e-9f20-3a4b5c6d7e8f');

describe('an engine event’s text as the deployment’s owner reads it', () => {
  it('keeps the deployment’s own uids, its replicas’ included, and the engine’s words', () => {
    const text = `Model ${own}-r1-rep0 is in stopping state; ${own} relaunched`;
    expect(tenantSafe(text, new Set([own, `${own}-r1`]))).toBe(text);
  });

  it('leaves out the uids of other models, and the list of every model the engine serves', () => {
    const text = `Model not found in the model list, uid: ${own}. Available model uids: ['${other}', 'qwen-hosted']`;
    expect(tenantSafe(text, new Set([own]))).toBe(`Model not found in the model list, uid: ${own}. Available model uids: [not shown]`);
    expect(tenantSafe(`Replica ${other}-rep0 died`, new Set([own]))).toBe('Replica [another model] died');
  });

  it(`cuts the text at ${ENGINE_MESSAGE_LIMIT} characters`, () => {
    expect(tenantSafe('x'.repeat(ENGINE_MESSAGE_LIMIT + 50), new Set([own]))).toHaveLength(ENGINE_MESSAGE_LIMIT);
  });
});
