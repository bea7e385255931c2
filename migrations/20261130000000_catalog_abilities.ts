import type { Knex } from 'knex';

/**
 * Each catalog model's abilities, as Xinference's model specification states them
 * (`model_ability` in `xinference/model/llm/llm_family.json`, `audio/model_spec.json`,
 * `image/model_spec.json`; ../shared/xinference), so the inference proxy knows which routes a
 * model serves: `/v1/completions` only a model with `generate` (issue 35 item 3). Embedding and
 * rerank specifications state none.
 *
 * `codestral-v0.1`, which has only `generate`, returns to the catalog: it was dropped
 * (20261123000500_catalog_fidelity.ts) because the platform served LLMs through chat only, and
 * `/v1/completions` now serves it. A row kept disabled for its deployments is enabled again.
 */

const ABILITIES: Record<string, string[]> = {
  'QwQ-32B': ['chat', 'reasoning', 'tools'],
  'Yi-1.5-chat': ['chat'],
  'codestral-v0.1': ['generate'],
  'deepseek-r1-distill-llama': ['chat', 'reasoning'],
  'deepseek-r1-distill-qwen': ['chat', 'reasoning'],
  'gemma-3-1b-it': ['chat'],
  'gemma-3-it': ['chat', 'vision'],
  'glm4-chat': ['chat', 'tools'],
  'internlm3-instruct': ['chat', 'tools'],
  'llama-3.1-instruct': ['chat', 'tools'],
  'llama-3.3-instruct': ['chat', 'tools'],
  'mistral-instruct-v0.3': ['chat'],
  'mistral-nemo-instruct': ['chat'],
  'mixtral-instruct-v0.1': ['chat'],
  'phi-3-mini-128k-instruct': ['chat'],
  'qwen2.5-coder-instruct': ['chat', 'tools'],
  'qwen2.5-instruct': ['chat', 'tools'],
  qwen3: ['chat', 'reasoning', 'hybrid', 'tools'],
  'whisper-large-v3': ['audio2text'],
  'FLUX.1-schnell': ['text2image', 'image2image', 'inpainting'],
};

/** codestral-v0.1 as the first catalog migration offered it, with Xinference's family context length. */
const CODESTRAL = {
  model_name: 'codestral-v0.1',
  display_name: 'Codestral 22B',
  provider: 'Mistral AI',
  family: 'codestral',
  model_type: 'LLM',
  description: 'Mistral AI code model trained on 80+ programming languages, for code completion: it generates (/v1/completions), it does not chat.',
  tags: ['code', 'completion'],
  sort_order: 100,
  context_length: 32768,
};
const CODESTRAL_SPECS = [
  { model_format: 'pytorch', model_size_in_billions: 22, quantizations: ['none'], model_engine: 'vLLM' },
  { model_format: 'ggufv2', model_size_in_billions: 22, quantizations: ['Q4_K_M', 'Q5_K_M', 'Q8_0'], model_engine: 'llama.cpp' },
];

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`alter table deployable_models add column abilities text[] not null default '{}'`);
  const kept = await knex('deployable_models').where({ model_name: CODESTRAL.model_name }).update({ enabled: true, description: CODESTRAL.description, tags: CODESTRAL.tags });
  if (!kept) await knex('deployable_models').insert(CODESTRAL);
  const [row] = await knex('deployable_models').where({ model_name: CODESTRAL.model_name }).select('id');
  const specs = CODESTRAL_SPECS.map((spec) => ({ ...spec, deployable_model_id: (row as { id: string }).id }));
  await knex('model_specs').insert(specs).onConflict(['deployable_model_id', 'model_format', 'model_size_in_billions']).ignore();
  for (const [name, abilities] of Object.entries(ABILITIES)) await knex('deployable_models').where({ model_name: name }).update({ abilities });
}

export async function down(knex: Knex): Promise<void> {
  // As the catalog fidelity migration dropped it: disabled while deployments reference it, else deleted.
  const codestral = knex('deployable_models').where({ model_name: CODESTRAL.model_name }).select('id');
  const referenced = await knex('deployments').whereIn('deployable_model_id', codestral).first('id');
  if (referenced) await knex('deployable_models').where({ model_name: CODESTRAL.model_name }).update({ enabled: false });
  else await knex('deployable_models').where({ model_name: CODESTRAL.model_name }).delete();
  await knex.raw('alter table deployable_models drop column abilities');
}
