import { describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import { inferenceStatus } from '../../src/http/problem.ts';
import { chooseReplica, chooseTarget, type Caller, type Candidate } from '../../src/inference/routing.ts';

const ids = {
  chat: '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a21',
  chat2: '0192f1c6-2b9e-7c4e-9b1a-5d0c8e6f7a22',
  embed: '0192f1d2-5e6f-7a8b-9c0d-1e2f3a4b5c6d',
  loading: '0192f1d2-5e6f-7a8b-9c0d-1e2f3a4b5c6e',
  failed: '0192f1d2-5e6f-7a8b-9c0d-1e2f3a4b5c6f',
};

function candidate(id: string, overrides: Partial<Candidate> = {}): Candidate {
  return {
    id,
    organization_id: 7,
    user_id: 1,
    model_name: 'qwen2.5-instruct',
    status: 'running',
    replicas: [{ id: `replica-of-${id}`, engine_model_uid: `dep-${id.replaceAll('-', '')}` }],
    cluster_id: 'cluster-1',
    endpoint: 'http://engine.test',
    sealed_credential: 'sealed',
    cluster_status: 'active',
    created_at: new Date(0),
    ...overrides,
  };
}

const candidates = [
  candidate(ids.chat),
  candidate(ids.embed, { model_name: 'bge-m3' }),
  candidate(ids.loading, { model_name: 'whisper-large-v3', status: 'starting', replicas: [] }),
  candidate(ids.failed, { model_name: 'FLUX.1-schnell', status: 'failed' }),
];
const session: Caller = { kind: 'session' };
const keyFor = (...deploymentIds: string[]): Caller => ({ kind: 'apiKey', deploymentIds: new Set(deploymentIds) });

/** The refusal `chooseTarget` throws, as the status and hosted-inference code the caller gets on the wire. */
function refusal(choose: () => unknown): { code: string | undefined; status: number; retryAfter?: string } {
  try {
    choose();
  } catch (error) {
    if (!(error instanceof AppError)) throw error;
    return { code: error.inference?.code, status: inferenceStatus(error), ...(error.headers['Retry-After'] ? { retryAfter: error.headers['Retry-After'] } : {}) };
  }
  throw new Error('chose a target');
}

describe('the inference router’s choice of target', () => {
  it('picks a deployment by id, or by a model name unambiguous among the running ones', () => {
    expect(chooseTarget(session, ids.embed, candidates).id).toBe(ids.embed);
    expect(chooseTarget(session, 'qwen2.5-instruct', candidates).id).toBe(ids.chat);
    expect(chooseTarget(keyFor(ids.chat), 'qwen2.5-instruct', candidates).id).toBe(ids.chat);
  });

  it('asks for a deployment id when a name matches several running deployments, counting only those a key reaches', () => {
    const two = [...candidates, candidate(ids.chat2)];
    expect(refusal(() => chooseTarget(session, 'qwen2.5-instruct', two))).toEqual({ code: 'model_ambiguous', status: 400 });
    expect(chooseTarget(keyFor(ids.chat2), 'qwen2.5-instruct', two).id).toBe(ids.chat2);
  });

  it('tells a key it is out of scope (403) from a model that does not exist (404)', () => {
    expect(refusal(() => chooseTarget(keyFor(ids.chat), ids.embed, candidates))).toEqual({ code: 'model_not_in_key_scope', status: 403 });
    expect(refusal(() => chooseTarget(keyFor(ids.embed), 'qwen2.5-instruct', candidates))).toEqual({ code: 'model_not_in_key_scope', status: 403 });
    expect(refusal(() => chooseTarget(session, 'no-such-model', candidates))).toEqual({ code: 'model_not_found', status: 404 });
    expect(refusal(() => chooseTarget(session, '0192f1c6-0000-7000-8000-000000000000', candidates))).toEqual({ code: 'model_not_found', status: 404 });
  });

  it('refuses a missing model, a deployment not running yet (503, Retry-After) and one that stopped (404)', () => {
    expect(refusal(() => chooseTarget(session, undefined, candidates))).toEqual({ code: 'missing_required_parameter', status: 400 });
    expect(refusal(() => chooseTarget(session, ids.loading, candidates))).toEqual({ code: 'deployment_not_running', status: 503, retryAfter: '10' });
    expect(refusal(() => chooseTarget(session, ids.failed, candidates))).toEqual({ code: 'deployment_stopped', status: 404 });
    // A model name reaches running deployments only.
    expect(refusal(() => chooseTarget(session, 'whisper-large-v3', candidates))).toEqual({ code: 'model_not_found', status: 404 });
  });

  it('does not route to a cluster whose engine refused the platform’s credentials: marked in the database, or refused in this process', () => {
    const invalid = [candidate(ids.chat, { cluster_status: 'credentials_invalid' })];
    expect(refusal(() => chooseTarget(session, ids.chat, invalid))).toEqual({ code: 'engine_unavailable', status: 503, retryAfter: '60' });
    expect(refusal(() => chooseTarget(session, ids.chat, candidates, new Set(['cluster-1'])))).toEqual({ code: 'engine_unavailable', status: 503, retryAfter: '60' });
    expect(chooseTarget(session, ids.chat, candidates, new Set(['another-cluster'])).id).toBe(ids.chat);
  });

  it('chooses a running deployment with no replica ready (the gateway holds the request for its cold start), and no replica of it', () => {
    const noneReady = candidate(ids.chat, { replicas: [] });
    expect(chooseTarget(session, ids.chat, [noneReady]).id).toBe(ids.chat);
    expect(chooseReplica(noneReady)).toBeUndefined();
  });

  it('sends a request to the ready replica with the fewest requests in flight, the first by ordinal among equals', () => {
    const two = candidate(ids.chat, {
      replicas: [
        { id: 'replica-0', engine_model_uid: 'dep-a' },
        { id: 'replica-1', engine_model_uid: 'dep-a-r1' },
      ],
    });
    expect(chooseReplica(chooseTarget(session, ids.chat, [two]))).toEqual({ id: 'replica-0', engine_model_uid: 'dep-a' });
    const inFlight = new Map([
      ['replica-0', 3],
      ['replica-1', 2],
    ]);
    expect(chooseReplica(two, (id) => inFlight.get(id) ?? 0)).toEqual({ id: 'replica-1', engine_model_uid: 'dep-a-r1' });
    inFlight.set('replica-1', 3);
    expect(chooseReplica(two, (id) => inFlight.get(id) ?? 0)?.id).toBe('replica-0');
  });
});
