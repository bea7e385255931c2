import type { Knex } from 'knex';

/**
 * `phi-3-mini-128k-instruct` moves from vLLM to Xinference's Transformers engine
 * (../shared/reviews/xinference-fidelity-24d823e.md, N6; issue 32 item 23). Its architecture,
 * `Phi3ForCausalLM`, is in none of the lists vLLM's chat engine matches a family by
 * (`xinference/model/llm/vllm/core.py`, `VLLM_SUPPORTED_CHAT_MODELS`), so a vLLM launch works only
 * while the cluster's virtualenv mode bypasses that check, and fails with "Model
 * phi-3-mini-128k-instruct cannot be run on engine vLLM" once it is off. Transformers runs any
 * pytorch chat family without a custom implementation (`model/llm/transformers/core.py`,
 * `match_json`). Deployments not launched yet move too; launched ones keep what they run.
 */

const NAME = 'phi-3-mini-128k-instruct';
const modelId = (knex: Knex) => knex('deployable_models').where({ model_name: NAME }).select('id');

async function move(knex: Knex, from: string, to: string): Promise<void> {
  await knex('model_specs').where({ deployable_model_id: modelId(knex), model_format: 'pytorch', model_engine: from }).update({ model_engine: to });
  await knex('deployments').where({ model_name: NAME, model_format: 'pytorch', model_engine: from }).whereIn('status', ['requested', 'provisioning']).update({ model_engine: to });
}

export async function up(knex: Knex): Promise<void> {
  await move(knex, 'vLLM', 'Transformers');
}

export async function down(knex: Knex): Promise<void> {
  await move(knex, 'Transformers', 'vLLM');
}
