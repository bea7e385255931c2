import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { operations } from '../../generated/api.d.ts';
import { restrictModel, setModelEnabled } from '../../src/catalog/catalog.repository.ts';
import { registeredUser } from '../factories/accounts.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { statusOf, unchecked } from '../helpers/http.ts';

type Query = NonNullable<operations['listDeployableModels']['parameters']['query']>;

let app: TestApp;
let api: Api;
beforeAll(async () => {
  app = await startTestApp();
  api = (await registeredUser(app)).api;
});
afterAll(() => app.close());

const list = async (query: Query = {}) => {
  const { data, response } = await api.GET('/api/v1/deployable-models', { params: { query } });
  expect(response.status).toBe(200);
  return data?.items ?? [];
};
const get = (caller: Api, id: string, query: { enabled_only?: boolean } = {}) =>
  caller.GET('/api/v1/deployable-models/{model_id}', { params: { path: { model_id: id }, query } });

describe('the catalog', () => {
  it('lists at least 20 real open models, LLMs by default, with their launch combinations', async () => {
    const llms = await list();
    expect(llms.length).toBeGreaterThanOrEqual(15);
    expect(llms.every((m) => m.model_type === 'LLM' && m.enabled)).toBe(true);
    const all = [...llms, ...(await list({ model_type: 'embedding' })), ...(await list({ model_type: 'rerank' }))];
    expect(all.length).toBeGreaterThanOrEqual(20);
    expect(new Set(all.map((m) => m.provider)).size).toBeGreaterThanOrEqual(8);
    const qwen = llms.find((m) => m.model_name === 'qwen2.5-instruct');
    expect(qwen?.specs).toContainEqual({ model_format: 'pytorch', model_size_in_billions: 7, quantizations: ['none'] });
    expect(qwen?.specs).toContainEqual({ model_format: 'awq', model_size_in_billions: 1.5, quantizations: ['Int4'] });
  });

  it('filters by type and by provider, whatever its case', async () => {
    const rerankers = await list({ model_type: 'rerank' });
    expect(rerankers.map((m) => m.model_name)).toContain('bge-reranker-v2-m3');
    const meta = await list({ provider: 'meta' });
    expect(meta.map((m) => m.model_name).sort()).toEqual(['llama-3.1-instruct', 'llama-3.3-instruct']);
  });

  it('ranks a free-text search by relevance, names first', async () => {
    expect((await list({ q: 'coder' }))[0]?.model_name).toBe('qwen2.5-coder-instruct');
    expect((await list({ q: 'llama 3.3' }))[0]?.model_name).toBe('llama-3.3-instruct');
    const reasoning = (await list({ q: 'reasoning' })).map((m) => m.model_name);
    expect(reasoning).toEqual(expect.arrayContaining(['QwQ-32B', 'deepseek-r1-distill-qwen']));
    expect(await list({ q: 'nothingmatchesthis' })).toEqual([]);
  });

  it('gets a model by id, and answers 404 for an unknown one', async () => {
    const [first] = await list();
    expect((await get(api, first?.id ?? '')).data).toMatchObject({ id: first?.id, model_name: first?.model_name });
    const missing = await get(api, '00000000-0000-4000-8000-000000000000');
    expect(missing.response.status).toBe(404);
    expect(missing.error?.code).toBe('NOT_FOUND');
  });

  it('hides a disabled model unless enabled_only is false', async () => {
    await setModelEnabled(app.db, 'QwQ-32B', false);
    try {
      expect((await list()).map((m) => m.model_name)).not.toContain('QwQ-32B');
      const everything = await list({ enabled_only: false });
      expect(everything.find((m) => m.model_name === 'QwQ-32B')).toMatchObject({ enabled: false });
      const id = everything.find((m) => m.model_name === 'QwQ-32B')?.id ?? '';
      expect(await statusOf(get(api, id))).toBe(404);
      expect(await statusOf(get(api, id, { enabled_only: false }))).toBe(200);
    } finally {
      await setModelEnabled(app.db, 'QwQ-32B', true);
    }
  });

  it('shows a model restricted to some organizations only to them', async () => {
    const insider = await registeredUser(app);
    const organizationId = (await insider.api.GET('/v1/organization')).data?.id ?? 0;
    const id = (await list()).find((m) => m.model_name === 'glm4-chat')?.id ?? '';
    await restrictModel(app.db, 'glm4-chat', [organizationId]);
    try {
      expect(await statusOf(get(api, id))).toBe(404);
      expect((await list()).map((m) => m.model_name)).not.toContain('glm4-chat');
      expect(await statusOf(get(insider.api, id))).toBe(200);
    } finally {
      await restrictModel(app.db, 'glm4-chat', null);
    }
  });

  it('lists every type with model_type all', async () => {
    const everything = await list({ model_type: 'all' });
    const types = ['LLM', 'embedding', 'rerank', 'image', 'audio'] as const;
    const byType = await Promise.all(types.map((model_type) => list({ model_type })));
    expect(new Set(everything.map((m) => m.model_type))).toEqual(new Set(types));
    expect(everything.map((m) => m.id).sort()).toEqual(byType.flat().map((m) => m.id).sort());
  });

  it('is readable by a viewer and refuses bad query values with 422', async () => {
    const members = await team(app);
    expect(await statusOf(members.viewer.api.GET('/api/v1/deployable-models'))).toBe(200);
    expect(await statusOf(api.GET('/api/v1/deployable-models', { params: { query: { model_type: unchecked('video') } } }))).toBe(422);
    expect(await statusOf(api.GET('/api/v1/deployable-models', { params: { query: { q: 'x'.repeat(201) } } }))).toBe(422);
  });
});

describe('paging the catalog, as the other lists page', () => {
  const page = async (query: Query) => {
    const { data, error, response } = await api.GET('/api/v1/deployable-models', { params: { query } });
    return { data, error, status: response.status };
  };
  /** Every item of a walk from `query`'s first page along `next_cursor`. */
  const walk = async (query: Query) => {
    const ids: string[] = [];
    let after: string | undefined;
    do {
      const { data, status } = await page({ ...query, ...(after ? { after } : {}) });
      expect(status).toBe(200);
      ids.push(...(data?.items ?? []).map((m) => m.id));
      after = data?.next_cursor ?? undefined;
    } while (after);
    return ids;
  };

  it('takes limit and walks the list with the cursor: every model once, in list order, total exact', async () => {
    for (const query of [{}, { model_type: 'all' }, { q: 'qwen' }, { q: 'instruct', model_type: 'all', enabled_only: false }] as Query[]) {
      const { data: whole } = await page({ ...query, limit: 500 });
      const ids = (whole?.items ?? []).map((m) => m.id);
      expect(ids.length, JSON.stringify(query)).toBeGreaterThan(2);
      expect(whole).toMatchObject({ total: ids.length, limit: 500, offset: 0, next_cursor: null });
      const { data: first } = await page({ ...query, limit: 2 });
      expect(first).toMatchObject({ total: ids.length, limit: 2, offset: 0, next_cursor: expect.any(String) });
      expect(first?.items.map((m) => m.id)).toEqual(ids.slice(0, 2));
      expect(await walk({ ...query, limit: 2 })).toEqual(ids);
    }
  });

  it('pages by offset too, each page with the cursor to the next', async () => {
    const { data: whole } = await page({ limit: 500 });
    const ids = (whole?.items ?? []).map((m) => m.id);
    const { data: third } = await page({ limit: 3, offset: 3 });
    expect(third).toMatchObject({ total: ids.length, limit: 3, offset: 3 });
    expect(third?.items.map((m) => m.id)).toEqual(ids.slice(3, 6));
    const { data: next } = await page({ limit: 3, after: third?.next_cursor ?? '' });
    expect(next?.items.map((m) => m.id)).toEqual(ids.slice(6, 9));
  });

  it('refuses a cursor with an offset, a cursor of another query and a made-up one with 422', async () => {
    const { data: first } = await page({ limit: 2 });
    const after = first?.next_cursor ?? '';
    const withOffset = await page({ limit: 2, after, offset: 2 });
    expect(withOffset.status).toBe(422);
    expect(withOffset.error?.errors?.[0]?.location).toBe('query/offset');
    for (const query of [{ after, q: 'qwen' }, { after, model_type: 'embedding' }, { after: `x${after}` }, { after: 'not-a-cursor' }] as Query[]) {
      const refused = await page(query);
      expect(refused.status, JSON.stringify(query)).toBe(422);
      expect(refused.error?.errors?.[0]?.location).toBe('query/after');
    }
    expect((await page({ limit: 501 })).status).toBe(422);
  });
});
