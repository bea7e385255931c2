import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../factories/api-keys.ts';
import { registeredUser, type SignedInUser } from '../factories/accounts.ts';
import { deployment } from '../factories/deployments.ts';
import { FAST_PROVISIONING, startTestApp, type TestApp } from '../helpers/app.ts';
import { EngineStub } from '../helpers/engine-stub.ts';
import { inferenceClient } from '../helpers/inference-client.ts';
import { waitUntil } from '../helpers/net.ts';
import { operatorCli } from '../helpers/operator-cli.ts';

/**
 * Budgets that hold under concurrency, and usage that is metered whenever the engine worked. Each
 * request reserves the most it can cost before it is forwarded (its prompt's estimate plus `max_tokens`, at
 * most the model's context length) and settles when it ends; a client that leaves before the answer
 * is metered by the prompt the engine read, and a stream it leaves by the text it was delivered,
 * both counted with a tokenizer. The dedicated deployment's engine is a stub in front of the
 * simulator whose answers the tests script; the hosted model is the simulator's.
 */
let app: TestApp;
let stub: EngineStub;
let owner: SignedInUser;
let deploymentId: string;
const HOSTED = 'llama-3.1-instruct';
const CHAT = 'POST /v1/chat/completions';

beforeAll(async () => {
  app = await startTestApp({ ...FAST_PROVISIONING, MAX_ACTIVE_RESOURCES: '50' }, { workers: true, cluster: { modelLoadMs: 20, tokenLatencyMs: 1 } });
  stub = await EngineStub.inFrontOf(app);
  owner = await registeredUser(app);
  deploymentId = (await deployment(app, owner, 'running', { model_name: 'qwen2.5-instruct' })).id;
  await operatorCli(app, 'hosted', 'launch', HOSTED);
  await operatorCli(app, 'prices', 'set', `platform::hosted_model:${HOSTED}::`, '0.001');
}, 120_000);

afterAll(async () => {
  await app?.close();
  await stub?.stop();
});

/** The review's engine: each chat answers after `delayMs` with 10 prompt and 1,000 completion tokens. */
function answersAfter(delayMs: number) {
  return (req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.once('end', () => {
      setTimeout(() => {
        const usage = { prompt_tokens: 10, completion_tokens: 1000, total_tokens: 1010 };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }], usage }));
      }, delayMs);
    });
  };
}

/** A chat completion with the key: its status and error code. */
async function chat(key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<{ status: number; code: string | undefined; headers: Headers }> {
  const response = await fetch(`${app.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: deploymentId, messages: [{ role: 'user', content: 'hi' }], ...body }),
    signal,
  });
  const answer = (await response.json()) as { error?: { code: string } };
  return { status: response.status, code: answer.error?.code, headers: response.headers };
}

async function usageOf(keyId: number): Promise<Array<Record<string, unknown>>> {
  await app.container.usage.flush();
  return app.db('usage_records').where({ api_key_id: keyId }).orderBy('id');
}

const tokensOf = (rows: Array<Record<string, unknown>>) => rows.reduce((sum, row) => sum + Number(row.total_tokens), 0);

describe('budgets reserve each request’s most before it is forwarded', () => {
  it('admits one of 20 concurrent calls with max_tokens 2,000,000,000 under a 100-token monthly budget', async () => {
    stub.behave(CHAT, answersAfter(300));
    const { key, id } = await apiKey(owner, [deploymentId], { limits: { monthly_token_budget: 100 } });
    const answers = await Promise.all(Array.from({ length: 20 }, () => chat(key, { max_tokens: 2_000_000_000 })));
    stub.behave(CHAT, undefined);
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(answers.filter((a) => a.status === 429).map((a) => a.code)).toEqual(Array(19).fill('insufficient_quota'));
    // The review measured 20 × 1,010 tokens; now the overshoot is one request's.
    expect(tokensOf(await usageOf(id))).toBe(1010);
  });

  it('admits one of 20 concurrent calls of max_tokens 200 under tokens_per_minute 50', async () => {
    stub.behave(CHAT, answersAfter(300));
    const { key, id } = await apiKey(owner, [deploymentId], { limits: { requests_per_minute: 600, tokens_per_minute: 50 } });
    const answers = await Promise.all(Array.from({ length: 20 }, () => chat(key, { max_tokens: 200 })));
    stub.behave(CHAT, undefined);
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(new Set(answers.filter((a) => a.status === 429).map((a) => a.code))).toEqual(new Set(['rate_limit_exceeded']));
    expect((await usageOf(id)).length).toBe(1);
  });

  it('admits one of 10 concurrent hosted streams under a $0.01 spend budget', async () => {
    // At $0.001 a token, one reservation (the prompt and 50 tokens) is more than the budget.
    app.simulator?.setTokenLatencyMs(10);
    const { key, id } = await apiKey(owner, [deploymentId], { allow_hosted_models: true, limits: { monthly_spend_budget: '0.01' } });
    const client = inferenceClient(app, key);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 10 }, async () => {
        const stream = await client.chat.completions.create({ model: HOSTED, messages: [{ role: 'user', content: 'hi' }], max_tokens: 50, stream: true });
        for await (const chunk of stream) void chunk;
      }),
    );
    app.simulator?.setTokenLatencyMs(1);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === 'rejected').map((o) => (o as PromiseRejectedResult).reason.code)).toEqual(Array(9).fill('insufficient_quota'));
    expect((await usageOf(id)).length).toBe(1);
  });

  it('gives a reservation back when the request ends: calls without max_tokens go on, and the shared count holds what was used', async () => {
    // Each call reserves the model's context (32,768 tokens for qwen2.5-instruct) and uses a few.
    const budget = 100_000;
    const { key, id } = await apiKey(owner, [deploymentId], { limits: { monthly_token_budget: budget } });
    for (let i = 0; i < 6; i++) expect((await chat(key, {})).status).toBe(200);
    const concurrent = await Promise.all([chat(key, {}), chat(key, {})]);
    expect(concurrent.map((a) => a.status)).toEqual([200, 200]);
    const used = tokensOf(await usageOf(id));
    expect(used).toBeLessThan(1000);
    // This process keeps a share (a thousandth of the budget) and one reservation; the rest of the
    // eight reservations (over 260,000 tokens) went back to the count.
    const reservation = 32_768 + 100;
    await waitUntil(async () => {
      const bucket = await app.db('api_key_limit_buckets').where({ api_key_id: id }).where('dimension', 'like', 'monthly_tokens:%').first();
      return Number(bucket?.used) <= used + budget / 1000 + reservation;
    }, 'the reservations to be given back to the shared count');
  });

  it('gives the reservation back when the engine fails', async () => {
    stub.behave(CHAT, (req, res) => {
      req.resume();
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"detail":"boom"}');
    });
    const { key } = await apiKey(owner, [deploymentId], { limits: { monthly_token_budget: 40_000 } });
    for (let i = 0; i < 3; i++) expect((await chat(key, {})).status).toBeGreaterThanOrEqual(500);
    stub.behave(CHAT, undefined);
    expect((await chat(key, {})).status).toBe(200);
  });
});

describe('a client that leaves before the engine’s answer is metered', () => {
  it('records the hosted prompt the engine read, by a tokenizer estimate, and counts it against the key’s budget', async () => {
    // The simulator answers a JSON chat once all its tokens are generated: 100 × 50 ms.
    app.simulator?.setTokenLatencyMs(50);
    const { key, id } = await apiKey(owner, [deploymentId], { allow_hosted_models: true, limits: { monthly_token_budget: 1500 } });
    const prompt = 'The quick brown fox jumps over the lazy dog. '.repeat(200);
    const controller = new AbortController();
    const call = chat(key, { model: HOSTED, messages: [{ role: 'user', content: prompt }], max_tokens: 100 }, controller.signal);
    // The client leaves once the engine is generating (it read the whole prompt), before its answer.
    await waitUntil(async () => (app.simulator?.active() ?? 0) > 0, 'the engine to work on the call');
    controller.abort();
    await expect(call).rejects.toThrow();
    let rows: Array<Record<string, unknown>> = [];
    await waitUntil(async () => (rows = await usageOf(id)).length === 1, 'the call the client left to be metered', 10_000);
    app.simulator?.setTokenLatencyMs(1);
    // 1,800 words and 200 periods: cl100k counts 2,000 tokens, plus the message's role and overhead
    // (a token per 4 bytes of the request would say about 2,280).
    expect(rows[0]).toMatchObject({ outcome: 'aborted', estimated: true, unit: 'token', deployment_id: null, model: HOSTED, completion_tokens: 0 });
    expect(Number(rows[0]?.prompt_tokens)).toBeGreaterThanOrEqual(2000);
    expect(Number(rows[0]?.prompt_tokens)).toBeLessThan(2020);
    // The prompt used the budget: the next call is refused.
    expect((await chat(key, { model: HOSTED, max_tokens: 2 })).code).toBe('insufficient_quota');
  });
});

describe('a stream the client leaves is metered by the text delivered', () => {
  it('counts chunks that carry many tokens by their text, not one token per chunk', async () => {
    const words = Array.from({ length: 50 }, (_, i) => ` word${i % 10}`).join('');
    stub.behave(CHAT, (req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let sent = 0;
      const timer = setInterval(() => {
        if (res.destroyed || sent === 20) {
          clearInterval(timer);
          res.end();
          return;
        }
        sent++;
        res.write(`data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: words }, finish_reason: null }] })}\n\n`);
      }, 100);
      res.once('close', () => clearInterval(timer));
    });
    const { key, id } = await apiKey(owner, [deploymentId]);
    const stream = await inferenceClient(app, key).chat.completions.create({ model: deploymentId, messages: [{ role: 'user', content: 'tell a long story' }], stream: true });
    let read = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) read++;
      if (read === 5) break;
    }
    let rows: Array<Record<string, unknown>> = [];
    await waitUntil(async () => (rows = await usageOf(id)).length === 1, 'the stream the client left to be metered');
    stub.behave(CHAT, undefined);
    expect(rows[0]).toMatchObject({ outcome: 'aborted', estimated: true, unit: 'token' });
    // Five chunks of 50 words, each a word and a digit: 2 tokens a word (the review recorded one per chunk).
    const completion = Number(rows[0]?.completion_tokens);
    expect(completion).toBeGreaterThanOrEqual(5 * 50);
    expect(completion).toBeLessThanOrEqual(7 * 50 * 2);
  });
});
