import type { Knex } from 'knex';

/**
 * The catalog checked against Xinference's own model specifications (v3.2.0+61; the test
 * `catalog-fidelity.test.ts` reads them from ../shared/xinference):
 *
 * - `gemma-2-it` and `internlm2.5-chat` no longer exist in Xinference (dropped in 1.6); the 1B size
 *   of `gemma-3-it` is its own family, `gemma-3-1b-it`; InternLM's current family is
 *   `internlm3-instruct`. The two current families are added.
 * - `codestral-v0.1` has only the `generate` ability: it cannot chat, and the platform offers only
 *   the chat route for LLMs. Dropped.
 * - Combinations Xinference does not offer are removed: phi-3-mini gguf, deepseek-r1-distill-qwen
 *   gptq 14B/32B, deepseek-r1-distill-llama gguf 8B, llama-3.3 gguf Q5_K_M; glm4-chat's gguf
 *   quantizations are Q4_K/Q5_K (there are no `_M` variants).
 * - FLUX.1-schnell runs on the diffusers engine, whose format is `diffusers`, not `pytorch`.
 *
 * A dropped model that existing deployments reference (`deployments.deployable_model_id`) is kept
 * and disabled, so those deployments keep their catalog row; one nobody references is deleted.
 * Deployments copy their launch combination, so removing a combination changes no deployment;
 * FLUX deployments not launched yet are moved to the `diffusers` format.
 */

interface Spec {
  format: string;
  sizes: number[];
  quantizations: string[];
  engine: string;
}
interface CatalogModel {
  name: string;
  display: string;
  provider: string;
  family: string;
  description: string;
  tags: string[];
  sortOrder: number;
  specs: Spec[];
}

const vllm = (format: string, sizes: number[], quantizations: string[]): Spec => ({ format, sizes, quantizations, engine: 'vLLM' });
const gguf = (sizes: number[], quantizations = ['Q4_K_M', 'Q5_K_M', 'Q8_0']): Spec => ({ format: 'ggufv2', sizes, quantizations, engine: 'llama.cpp' });

const ADDED: CatalogModel[] = [
  {
    name: 'gemma-3-1b-it',
    display: 'Gemma 3 1B Instruct',
    provider: 'Google',
    family: 'gemma-3',
    description: 'The 1B text-only model of Google Gemma 3, with 32K context, for low-latency chat on a small GPU.',
    tags: ['chat', 'small'],
    sortOrder: 125,
    specs: [vllm('pytorch', [1], ['none']), gguf([1])],
  },
  {
    name: 'internlm3-instruct',
    display: 'InternLM3 Instruct',
    provider: 'Shanghai AI Laboratory',
    family: 'internlm3',
    description: 'InternLM3 8B instruction model trained on 4 trillion tokens, with a deep-thinking mode for reasoning.',
    tags: ['chat', 'reasoning', 'tools'],
    sortOrder: 180,
    specs: [vllm('pytorch', [8], ['none']), vllm('awq', [8], ['Int4']), vllm('gptq', [8], ['Int4']), gguf([8])],
  },
];

/** The dropped models as the first catalog migration defined them, for `down`. */
const DROPPED: CatalogModel[] = [
  {
    name: 'codestral-v0.1',
    display: 'Codestral 22B',
    provider: 'Mistral AI',
    family: 'codestral',
    description: 'Mistral AI code model trained on 80+ programming languages, with fill-in-the-middle.',
    tags: ['code'],
    sortOrder: 100,
    specs: [vllm('pytorch', [22], ['none']), gguf([22])],
  },
  {
    name: 'gemma-2-it',
    display: 'Gemma 2 Instruct',
    provider: 'Google',
    family: 'gemma-2',
    description: 'Google Gemma 2 instruction-tuned open models in 2B, 9B and 27B sizes.',
    tags: ['chat'],
    sortOrder: 110,
    specs: [vllm('pytorch', [2, 9, 27], ['none']), gguf([2, 9, 27])],
  },
  {
    name: 'internlm2.5-chat',
    display: 'InternLM 2.5 Chat',
    provider: 'Shanghai AI Laboratory',
    family: 'internlm2.5',
    description: 'InternLM 2.5 chat models with strong reasoning and a 1M-token context variant.',
    tags: ['chat', 'reasoning'],
    sortOrder: 180,
    specs: [vllm('pytorch', [1.8, 7, 20], ['none']), gguf([7])],
  },
];

/** Launch combinations Xinference does not offer: [model, format, size]. */
const REMOVED_SPECS: Array<[model: string, format: string, size: number, spec: Spec]> = [
  ['gemma-3-it', 'pytorch', 1, vllm('pytorch', [1], ['none'])],
  ['gemma-3-it', 'ggufv2', 1, gguf([1])],
  ['phi-3-mini-128k-instruct', 'ggufv2', 4, gguf([4])],
  ['deepseek-r1-distill-qwen', 'gptq', 14, vllm('gptq', [14], ['Int4'])],
  ['deepseek-r1-distill-qwen', 'gptq', 32, vllm('gptq', [32], ['Int4'])],
  ['deepseek-r1-distill-llama', 'ggufv2', 8, gguf([8])],
];

/** Quantizations corrected: [model, format, size, now, before]. */
const QUANTIZATIONS: Array<[model: string, format: string, size: number, now: string[], before: string[]]> = [
  ['llama-3.3-instruct', 'ggufv2', 70, ['Q4_K_M', 'Q8_0'], ['Q4_K_M', 'Q5_K_M', 'Q8_0']],
  ['glm4-chat', 'ggufv2', 9, ['Q4_K', 'Q5_K', 'Q8_0'], ['Q4_K_M', 'Q5_K_M', 'Q8_0']],
];

const modelId = (knex: Knex, name: string) => knex('deployable_models').where({ model_name: name }).select('id');

export async function up(knex: Knex): Promise<void> {
  for (const { name } of DROPPED) await dropModel(knex, name);
  for (const [model, format, size] of REMOVED_SPECS) {
    await knex('model_specs').where({ deployable_model_id: modelId(knex, model), model_format: format, model_size_in_billions: size }).delete();
  }
  for (const [model, format, size, now] of QUANTIZATIONS) {
    await knex('model_specs').where({ deployable_model_id: modelId(knex, model), model_format: format, model_size_in_billions: size }).update({ quantizations: now });
  }
  await knex('model_specs').where({ deployable_model_id: modelId(knex, 'FLUX.1-schnell'), model_format: 'pytorch' }).update({ model_format: 'diffusers' });
  await knex('deployments')
    .where({ model_name: 'FLUX.1-schnell', model_format: 'pytorch' })
    .whereIn('status', ['requested', 'provisioning'])
    .update({ model_format: 'diffusers' });
  for (const model of ADDED) await addModel(knex, model);
}

export async function down(knex: Knex): Promise<void> {
  for (const { name } of ADDED) await dropModel(knex, name);
  await knex('model_specs').where({ deployable_model_id: modelId(knex, 'FLUX.1-schnell'), model_format: 'diffusers' }).update({ model_format: 'pytorch' });
  for (const [model, format, size, , before] of QUANTIZATIONS) {
    await knex('model_specs').where({ deployable_model_id: modelId(knex, model), model_format: format, model_size_in_billions: size }).update({ quantizations: before });
  }
  for (const [model, , , spec] of REMOVED_SPECS) await insertSpecs(knex, model, [spec]);
  for (const model of DROPPED) await addModel(knex, model);
}

/** Deletes a catalog model nobody deployed; disables one that deployments reference. */
async function dropModel(knex: Knex, name: string): Promise<void> {
  const referenced = await knex('deployments').whereIn('deployable_model_id', modelId(knex, name)).first('id');
  if (referenced) await knex('deployable_models').where({ model_name: name }).update({ enabled: false });
  else await knex('deployable_models').where({ model_name: name }).delete();
}

/** Adds a catalog model, or enables it again when a deployment kept it. */
async function addModel(knex: Knex, model: CatalogModel): Promise<void> {
  const kept = await knex('deployable_models').where({ model_name: model.name }).update({ enabled: true });
  if (kept) return insertSpecs(knex, model.name, model.specs);
  await knex('deployable_models').insert({
    model_name: model.name,
    display_name: model.display,
    provider: model.provider,
    family: model.family,
    model_type: 'LLM',
    description: model.description,
    tags: model.tags,
    sort_order: model.sortOrder,
  });
  await insertSpecs(knex, model.name, model.specs);
}

async function insertSpecs(knex: Knex, name: string, specs: Spec[]): Promise<void> {
  const [row] = await knex('deployable_models').where({ model_name: name }).select('id');
  if (!row) return;
  const rows = specs.flatMap((spec) =>
    spec.sizes.map((size) => ({ deployable_model_id: (row as { id: string }).id, model_format: spec.format, model_size_in_billions: size, quantizations: spec.quantizations, model_engine: spec.engine })),
  );
  await knex('model_specs').insert(rows).onConflict(['deployable_model_id', 'model_format', 'model_size_in_billions']).ignore();
}
