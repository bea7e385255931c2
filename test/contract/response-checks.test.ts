import { describe, expect, it } from 'vitest';
import { checkResponse, ContractViolation, settleContractChecks, templateOf } from '../helpers/contract.ts';

/** The client-side contract check the typed client and the openai client run on every answer (helpers/contract.ts). */
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
const problem = { type: 'https://docs.example.com/errors/not-found', title: 'Not found', status: 404, detail: 'No such thing.', code: 'NOT_FOUND', request_id: 'req_1' };
const chunk = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }] };
const stream = (...events: string[]) =>
  new Response(events.map((data) => `data: ${data}\n\n`).join(''), { status: 200, headers: { 'content-type': 'text/event-stream' } });

describe('the client-side contract check', () => {
  it('passes an error body in the documented shape', async () => {
    await expect(checkResponse('GET', '/api/v1/model-deployments/{deployment_id}', json(404, problem))).resolves.toBeUndefined();
  });

  it('refuses an error body that breaks the documented schema', async () => {
    const { code: _code, ...withoutCode } = problem;
    await expect(checkResponse('GET', '/api/v1/model-deployments/{deployment_id}', json(404, withoutCode))).rejects.toThrow(ContractViolation);
    await expect(checkResponse('POST', '/v1/chat/completions', json(400, problem))).rejects.toThrow(/does not match the document/);
  });

  it('refuses a media type the operation does not document for that status', async () => {
    const html = new Response('<p>oops</p>', { status: 502, headers: { 'content-type': 'text/html' } });
    await expect(checkResponse('POST', '/v1/chat/completions', html)).rejects.toThrow(/answered text\/html, documented application\/json/);
  });

  it('checks the first event of a streamed chat answer against ChatCompletionChunk', async () => {
    await checkResponse('POST', '/v1/chat/completions', stream(JSON.stringify(chunk), '[DONE]'));
    await expect(settleContractChecks()).resolves.toBeUndefined();
    await checkResponse('POST', '/v1/chat/completions', stream(JSON.stringify({ id: 'c1', choices: 'none' }), '[DONE]'));
    await expect(settleContractChecks()).rejects.toThrow(/first event does not match the document's event schema/);
  });

  it('finds the template of a concrete path, literal segments before parameters', () => {
    expect(templateOf('/v1/organization/api-keys/deployment-options')).toBe('/v1/organization/api-keys/deployment-options');
    expect(templateOf('/v1/organization/api-keys/12')).toBe('/v1/organization/api-keys/{api_key_id}');
    expect(templateOf('/v1/nothing-here')).toBeUndefined();
  });
});
