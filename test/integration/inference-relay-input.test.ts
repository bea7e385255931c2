import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser } from '../factories/accounts.ts';
import { deployment, type Deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { contractFetch } from '../helpers/contract.ts';
import { EngineStub } from '../helpers/engine-stub.ts';

/**
 * What the relay accepts and forwards (issue #32, items 12, 19 and 20; the data-plane review of
 * 24d823e, N1, N8, N9 and N11), each attack reproduced over HTTP with an engine stub in front of
 * the cluster simulator that records what reached the engine.
 */

let app: TestApp;
let stub: EngineStub;
let whisper: Deployment;
let key: string;

const TRANSCRIPTIONS = 'POST /v1/audio/transcriptions';
const MB = 1_000_000;

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING }, { workers: true, cluster: { modelLoadMs: 100, tokenLatencyMs: 1 } });
  stub = await EngineStub.inFrontOf(app);
  const acme = await registeredUser(app);
  whisper = await deployment(app, acme, 'running', { model_name: 'whisper-large-v3' });
  key = (await apiKey(acme, [whisper.id])).key;
}, 120_000);

afterAll(async () => {
  await app?.close();
  await stub?.stop();
});

describe('the transcription limit counts the whole body (item 19, N8)', () => {
  const form = (preamble: string, epilogue: string) =>
    Buffer.concat([
      Buffer.from(preamble),
      Buffer.from(`--B\r\nContent-Disposition: form-data; name="model"\r\n\r\n${whisper.id}\r\n`),
      Buffer.from('--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'),
      Buffer.alloc(3000, 1),
      Buffer.from('\r\n--B--\r\n'),
      Buffer.from(epilogue),
    ]);
  const upload = (body: Buffer) =>
    contractFetch(app.url)(`${app.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'multipart/form-data; boundary=B' },
      body,
    }).catch((error: unknown) => error as Error);

  it('refuses a 28 MB preamble around a 3 KB file with 413 and never sends the engine a complete form', async () => {
    const before = stub.requestsTo(TRANSCRIPTIONS).length;
    const response = await upload(form('x'.repeat(28 * MB), ''));
    if (response instanceof Response) expect(response.status).toBe(413);
    else expect(String(response)).toMatch(/fetch failed|socket|reset/i);
    expect(stub.requestsTo(TRANSCRIPTIONS)).toHaveLength(before);
  });

  it('refuses a 28 MB epilogue after the closing boundary with 413', async () => {
    const response = await upload(form('', 'x'.repeat(28 * MB)));
    if (response instanceof Response) expect(response.status).toBe(413);
    else expect(String(response)).toMatch(/fetch failed|socket|reset/i);
    const sent = stub.requestsTo(TRANSCRIPTIONS).at(-1);
    // The engine may have had the file streamed to it, never the form's closing boundary.
    expect(sent?.body.toString('latin1') ?? '').not.toMatch(/--\r\n$/);
  });

  it('still transcribes a small form with a short preamble', async () => {
    const response = await upload(form('a preamble\r\n', ''));
    expect(response).toBeInstanceOf(Response);
    expect((response as Response).status).toBe(200);
  });
});
