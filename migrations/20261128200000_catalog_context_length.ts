import type { Knex } from 'knex';

/**
 * Each catalog language model's context length, in tokens, as Xinference's model family states it
 * (`xinference/model/llm/llm_family.json`, `context_length`; ../shared/xinference). The inference
 * proxy reserves a request's most it can cost against a key's token and spend budgets before it
 * forwards the request: the prompt's estimate plus `max_tokens`, capped at this length (issue 32
 * item 14). Null for a model that generates no text (embedding, rerank, image, audio) and for one
 * whose family states none.
 */
const CONTEXT_LENGTHS: Record<string, number> = {
  'QwQ-32B': 131072,
  'Yi-1.5-chat': 4096,
  'codestral-v0.1': 32768,
  'deepseek-r1-distill-llama': 131072,
  'deepseek-r1-distill-qwen': 131072,
  'gemma-3-1b-it': 32768,
  'gemma-3-it': 131072,
  'glm4-chat': 131072,
  'internlm3-instruct': 32768,
  'llama-3.1-instruct': 131072,
  'llama-3.3-instruct': 131072,
  'mistral-instruct-v0.3': 32768,
  'mistral-nemo-instruct': 1024000,
  'mixtral-instruct-v0.1': 32768,
  'phi-3-mini-128k-instruct': 128000,
  'qwen2.5-coder-instruct': 32768,
  'qwen2.5-instruct': 32768,
  qwen3: 40960,
};

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table deployable_models add column context_length integer check (context_length > 0)');
  for (const [name, length] of Object.entries(CONTEXT_LENGTHS)) {
    await knex('deployable_models').where({ model_name: name, model_type: 'LLM' }).update({ context_length: length });
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table deployable_models drop column context_length');
}
