import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser } from '../factories/accounts.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

interface Model {
  id: string;
  model_name: string;
  provider: string;
  model_type: string;
  enabled: boolean;
  hosted: boolean;
  tags: string[];
  specs: Array<{ model_format: string; model_size_in_billions: number; quantizations: string[] }>;
}

let app: TestApp;
let browser: Awaited<ReturnType<typeof registeredUser>>['browser'];
beforeAll(async () => {
  app = await startTestApp();
  browser = (await registeredUser(app)).browser;
});
afterAll(() => app.close());

const list = async (query = '') => {
  const response = await browser.get(`/api/v1/deployable-models${query}`);
  expect(response.status).toBe(200);
  return (await jsonOf<{ items: Model[] }>(response)).items;
};

describe('the catalog', () => {
  it('lists at least 20 real open models, LLMs by default, with their launch combinations', async () => {
    const llms = await list();
    expect(llms.length).toBeGreaterThanOrEqual(15);
    expect(llms.every((m) => m.model_type === 'LLM' && m.enabled)).toBe(true);
    const all = [...llms, ...(await list('?model_type=embedding')), ...(await list('?model_type=rerank'))];
    expect(all.length).toBeGreaterThanOrEqual(20);
    expect(new Set(all.map((m) => m.provider)).size).toBeGreaterThanOrEqual(8);
    const qwen = llms.find((m) => m.model_name === 'qwen2.5-instruct');
    expect(qwen?.specs).toContainEqual({ model_format: 'pytorch', model_size_in_billions: 7, quantizations: ['none'] });
    expect(qwen?.specs).toContainEqual({ model_format: 'awq', model_size_in_billions: 1.5, quantizations: ['Int4'] });
  });

  it('filters by type and by provider, whatever its case', async () => {
    const rerankers = await list('?model_type=rerank');
    expect(rerankers.map((m) => m.model_name)).toContain('bge-reranker-v2-m3');
    const meta = await list('?provider=meta');
    expect(meta.map((m) => m.model_name).sort()).toEqual(['llama-3.1-instruct', 'llama-3.3-instruct']);
  });

  it('ranks a free-text search by relevance, names first', async () => {
    expect((await list('?q=coder'))[0]?.model_name).toBe('qwen2.5-coder-instruct');
    expect((await list('?q=llama 3.3'))[0]?.model_name).toBe('llama-3.3-instruct');
    const reasoning = (await list('?q=reasoning')).map((m) => m.model_name);
    expect(reasoning).toEqual(expect.arrayContaining(['QwQ-32B', 'deepseek-r1-distill-qwen']));
    expect(await list('?q=nothingmatchesthis')).toEqual([]);
  });

  it('gets a model by id, and answers 404 for an unknown one', async () => {
    const [first] = await list();
    const response = await browser.get(`/api/v1/deployable-models/${first?.id}`);
    expect(await jsonOf(response)).toMatchObject({ id: first?.id, model_name: first?.model_name });
    const missing = await browser.get('/api/v1/deployable-models/00000000-0000-4000-8000-000000000000');
    expect(missing.status).toBe(404);
    expect((await jsonOf<Problem>(missing)).code).toBe('NOT_FOUND');
  });

  it('hides a disabled model unless enabled_only is false', async () => {
    await app.db('deployable_models').where({ model_name: 'QwQ-32B' }).update({ enabled: false });
    try {
      expect((await list()).map((m) => m.model_name)).not.toContain('QwQ-32B');
      const everything = await list('?enabled_only=false');
      expect(everything.find((m) => m.model_name === 'QwQ-32B')).toMatchObject({ enabled: false });
      const id = everything.find((m) => m.model_name === 'QwQ-32B')?.id;
      expect((await browser.get(`/api/v1/deployable-models/${id}`)).status).toBe(404);
      expect((await browser.get(`/api/v1/deployable-models/${id}?enabled_only=false`)).status).toBe(200);
    } finally {
      await app.db('deployable_models').where({ model_name: 'QwQ-32B' }).update({ enabled: true });
    }
  });

  it('shows a model restricted to some organizations only to them', async () => {
    const insider = await registeredUser(app);
    const organizationId = (await jsonOf<{ id: number }>(await insider.browser.get('/v1/organization'))).id;
    await app.db('deployable_models').where({ model_name: 'glm4-chat' }).update({ allowed_organization_ids: [organizationId] });
    try {
      const id = (await app.db('deployable_models').where({ model_name: 'glm4-chat' }).first('id')).id;
      expect((await browser.get(`/api/v1/deployable-models/${id}`)).status).toBe(404);
      expect((await list()).map((m) => m.model_name)).not.toContain('glm4-chat');
      expect((await insider.browser.get(`/api/v1/deployable-models/${id}`)).status).toBe(200);
    } finally {
      await app.db('deployable_models').where({ model_name: 'glm4-chat' }).update({ allowed_organization_ids: null });
    }
  });

  it('is readable by a viewer and refuses bad query values with 422', async () => {
    const members = await team(app);
    expect((await members.viewer.browser.get('/api/v1/deployable-models')).status).toBe(200);
    expect((await browser.get('/api/v1/deployable-models?model_type=video')).status).toBe(422);
    expect((await browser.get(`/api/v1/deployable-models?q=${'x'.repeat(201)}`)).status).toBe(422);
  });
});
