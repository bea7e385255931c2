import type { Knex } from 'knex';

/**
 * The catalog of deployable models and the launch combinations the serving engine (Xinference)
 * supports for each: model format × size in billions × quantizations, with the engine that runs it.
 * Seeded with open models a user would deploy; names, formats and quantizations are Xinference's.
 */
interface Spec {
  format: string;
  sizes: number[];
  quantizations: string[];
  engine: string;
}
interface SeedModel {
  name: string;
  display: string;
  provider: string;
  family: string;
  type: 'LLM' | 'embedding' | 'rerank';
  description: string;
  tags: string[];
  specs: Spec[];
  hosted?: boolean;
}

const vllm = (format: string, sizes: number[], quantizations: string[]): Spec => ({ format, sizes, quantizations, engine: 'vLLM' });
const pytorch = (sizes: number[]) => vllm('pytorch', sizes, ['none']);
const awq = (sizes: number[]) => vllm('awq', sizes, ['Int4']);
const gptq = (sizes: number[], quantizations = ['Int4', 'Int8']) => vllm('gptq', sizes, quantizations);
const gguf = (sizes: number[]) => ({ format: 'ggufv2', sizes, quantizations: ['Q4_K_M', 'Q5_K_M', 'Q8_0'], engine: 'llama.cpp' });
const single = (size: number): Spec[] => [{ format: 'pytorch', sizes: [size], quantizations: ['none'], engine: 'sentence_transformers' }];

const MODELS: SeedModel[] = [
  {
    name: 'qwen2.5-instruct', display: 'Qwen2.5 Instruct', provider: 'Alibaba Cloud', family: 'qwen2.5', type: 'LLM',
    description: 'Instruction-tuned Qwen2.5 models with 128K context, strong at coding, mathematics and multilingual chat.',
    tags: ['chat', 'multilingual', 'tools', '128k-context'],
    specs: [pytorch([0.5, 1.5, 3, 7, 14, 32, 72]), awq([0.5, 1.5, 3, 7, 14, 32, 72]), gptq([0.5, 1.5, 3, 7, 14, 32, 72]), gguf([0.5, 1.5, 3, 7, 14, 32])],
    hosted: true,
  },
  {
    name: 'qwen3', display: 'Qwen3', provider: 'Alibaba Cloud', family: 'qwen3', type: 'LLM',
    description: 'Qwen3 dense and mixture-of-experts models with switchable thinking and non-thinking modes.',
    tags: ['chat', 'reasoning', 'multilingual', 'tools'],
    specs: [pytorch([0.6, 1.7, 4, 8, 14, 32]), awq([4, 8, 14, 32]), gptq([0.6, 1.7, 4, 8, 14, 32], ['Int4'])],
  },
  {
    name: 'qwen2.5-coder-instruct', display: 'Qwen2.5 Coder Instruct', provider: 'Alibaba Cloud', family: 'qwen2.5-coder', type: 'LLM',
    description: 'Code-specialised Qwen2.5 models trained on 5.5T tokens of code, for generation, repair and reasoning over code.',
    tags: ['code', 'chat', 'tools'],
    specs: [pytorch([0.5, 1.5, 3, 7, 14, 32]), awq([0.5, 1.5, 3, 7, 14, 32]), gptq([0.5, 1.5, 3, 7, 14, 32])],
  },
  {
    name: 'QwQ-32B', display: 'QwQ 32B', provider: 'Alibaba Cloud', family: 'qwq', type: 'LLM',
    description: 'Reasoning model of the Qwen series trained with reinforcement learning to think before it answers.',
    tags: ['reasoning', 'math', 'code'],
    specs: [pytorch([32]), awq([32]), gguf([32])],
  },
  {
    name: 'llama-3.1-instruct', display: 'Llama 3.1 Instruct', provider: 'Meta', family: 'llama-3.1', type: 'LLM',
    description: 'Meta Llama 3.1 instruction-tuned models with 128K context and tool use, in 8B and 70B sizes.',
    tags: ['chat', 'tools', '128k-context', 'multilingual'],
    specs: [pytorch([8, 70]), awq([8, 70]), gptq([8, 70], ['Int4']), gguf([8, 70])],
    hosted: true,
  },
  {
    name: 'llama-3.3-instruct', display: 'Llama 3.3 Instruct', provider: 'Meta', family: 'llama-3.3', type: 'LLM',
    description: 'Meta Llama 3.3 70B, a text model that matches much larger Llama models on reasoning, math and instruction following.',
    tags: ['chat', 'tools', '128k-context'],
    specs: [pytorch([70]), awq([70]), gptq([70], ['Int4']), gguf([70])],
  },
  {
    name: 'mistral-instruct-v0.3', display: 'Mistral 7B Instruct v0.3', provider: 'Mistral AI', family: 'mistral', type: 'LLM',
    description: 'Mistral 7B instruction-tuned, with an extended vocabulary and function calling.',
    tags: ['chat', 'tools'],
    specs: [pytorch([7]), awq([7]), gptq([7], ['Int4']), gguf([7])],
  },
  {
    name: 'mistral-nemo-instruct', display: 'Mistral NeMo Instruct', provider: 'Mistral AI', family: 'mistral-nemo', type: 'LLM',
    description: '12B model built with NVIDIA, 128K context, strong multilingual and coding ability for its size.',
    tags: ['chat', 'multilingual', '128k-context'],
    specs: [pytorch([12]), awq([12]), gptq([12], ['Int4'])],
  },
  {
    name: 'mixtral-instruct-v0.1', display: 'Mixtral 8x7B Instruct', provider: 'Mistral AI', family: 'mixtral', type: 'LLM',
    description: 'Sparse mixture-of-experts model: 46.7B parameters, about 13B active per token.',
    tags: ['chat', 'moe'],
    specs: [pytorch([46.7]), awq([46.7]), gptq([46.7], ['Int4']), gguf([46.7])],
  },
  {
    name: 'codestral-v0.1', display: 'Codestral 22B', provider: 'Mistral AI', family: 'codestral', type: 'LLM',
    description: 'Mistral AI code model trained on 80+ programming languages, with fill-in-the-middle.',
    tags: ['code'],
    specs: [pytorch([22]), gguf([22])],
  },
  {
    name: 'gemma-2-it', display: 'Gemma 2 Instruct', provider: 'Google', family: 'gemma-2', type: 'LLM',
    description: 'Google Gemma 2 instruction-tuned open models in 2B, 9B and 27B sizes.',
    tags: ['chat'],
    specs: [pytorch([2, 9, 27]), gguf([2, 9, 27])],
  },
  {
    name: 'gemma-3-it', display: 'Gemma 3 Instruct', provider: 'Google', family: 'gemma-3', type: 'LLM',
    description: 'Google Gemma 3 with 128K context and support for over 140 languages.',
    tags: ['chat', 'multilingual', '128k-context'],
    specs: [pytorch([1, 4, 12, 27]), gguf([1, 4, 12, 27])],
  },
  {
    name: 'phi-3-mini-128k-instruct', display: 'Phi-3 Mini 128K Instruct', provider: 'Microsoft', family: 'phi-3', type: 'LLM',
    description: 'Small 3.8B model with 128K context trained on high-quality and synthetic data.',
    tags: ['chat', 'small', '128k-context'],
    specs: [pytorch([4]), gguf([4])],
  },
  {
    name: 'deepseek-r1-distill-qwen', display: 'DeepSeek R1 Distill Qwen', provider: 'DeepSeek', family: 'deepseek-r1', type: 'LLM',
    description: 'Qwen2.5 models fine-tuned on reasoning traces of DeepSeek-R1.',
    tags: ['reasoning', 'math', 'code'],
    specs: [pytorch([1.5, 7, 14, 32]), awq([7, 14, 32]), gptq([14, 32], ['Int4']), gguf([1.5, 7, 14, 32])],
  },
  {
    name: 'deepseek-r1-distill-llama', display: 'DeepSeek R1 Distill Llama', provider: 'DeepSeek', family: 'deepseek-r1', type: 'LLM',
    description: 'Llama 3 models fine-tuned on reasoning traces of DeepSeek-R1, in 8B and 70B sizes.',
    tags: ['reasoning', 'math'],
    specs: [pytorch([8, 70]), awq([8, 70]), gguf([8, 70])],
  },
  {
    name: 'glm4-chat', display: 'GLM-4 Chat', provider: 'Zhipu AI', family: 'glm4', type: 'LLM',
    description: 'GLM-4 9B chat model, bilingual Chinese and English, with tool calling.',
    tags: ['chat', 'multilingual', 'tools'],
    specs: [pytorch([9]), gguf([9])],
  },
  {
    name: 'Yi-1.5-chat', display: 'Yi 1.5 Chat', provider: '01.AI', family: 'yi-1.5', type: 'LLM',
    description: 'Yi 1.5 chat models continually pre-trained on 500B tokens, in 6B, 9B and 34B sizes.',
    tags: ['chat', 'multilingual'],
    specs: [pytorch([6, 9, 34]), gptq([6, 9, 34], ['Int4']), awq([6, 9, 34])],
  },
  {
    name: 'internlm2.5-chat', display: 'InternLM 2.5 Chat', provider: 'Shanghai AI Laboratory', family: 'internlm2.5', type: 'LLM',
    description: 'InternLM 2.5 chat models with strong reasoning and a 1M-token context variant.',
    tags: ['chat', 'reasoning'],
    specs: [pytorch([1.8, 7, 20]), gguf([7])],
  },
  {
    name: 'bge-m3', display: 'BGE-M3', provider: 'BAAI', family: 'bge', type: 'embedding',
    description: 'Multilingual embedding model for dense, sparse and multi-vector retrieval over inputs up to 8192 tokens.',
    tags: ['embedding', 'multilingual', 'retrieval'],
    specs: single(0.57),
    hosted: true,
  },
  {
    name: 'bge-large-en-v1.5', display: 'BGE Large EN v1.5', provider: 'BAAI', family: 'bge', type: 'embedding',
    description: 'English embedding model with 1024 dimensions for retrieval, clustering and classification.',
    tags: ['embedding', 'english', 'retrieval'],
    specs: single(0.34),
  },
  {
    name: 'jina-embeddings-v3', display: 'Jina Embeddings v3', provider: 'Jina AI', family: 'jina-embeddings', type: 'embedding',
    description: 'Multilingual embedding model with task-specific LoRA adapters and Matryoshka dimensions.',
    tags: ['embedding', 'multilingual'],
    specs: single(0.57),
  },
  {
    name: 'e5-large-v2', display: 'E5 Large v2', provider: 'Microsoft', family: 'e5', type: 'embedding',
    description: 'English text embedding model trained with weakly supervised contrastive pre-training.',
    tags: ['embedding', 'english'],
    specs: single(0.34),
  },
  {
    name: 'bge-reranker-v2-m3', display: 'BGE Reranker v2 M3', provider: 'BAAI', family: 'bge-reranker', type: 'rerank',
    description: 'Lightweight multilingual cross-encoder reranker built on BGE-M3.',
    tags: ['rerank', 'multilingual', 'retrieval'],
    specs: single(0.57),
    hosted: true,
  },
  {
    name: 'bge-reranker-large', display: 'BGE Reranker Large', provider: 'BAAI', family: 'bge-reranker', type: 'rerank',
    description: 'Cross-encoder reranker for English and Chinese.',
    tags: ['rerank', 'retrieval'],
    specs: single(0.56),
  },
  {
    name: 'jina-reranker-v2', display: 'Jina Reranker v2', provider: 'Jina AI', family: 'jina-reranker', type: 'rerank',
    description: 'Multilingual reranker with function-calling and code search support.',
    tags: ['rerank', 'multilingual', 'code'],
    specs: single(0.28),
  },
];

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    -- Weighted search document of a catalog model: names first, then family, provider and tags,
    -- then the description. (Immutable as used here: fixed configurations, a text array.)
    create function deployable_model_search(name text, display text, family text, provider text, tags text[], description text)
    returns tsvector language sql immutable parallel safe as $$
      select setweight(to_tsvector('simple'::regconfig, name || ' ' || replace(name, '-', ' ') || ' ' || display), 'A') ||
             setweight(to_tsvector('simple'::regconfig, family || ' ' || provider || ' ' || array_to_string(tags, ' ')), 'B') ||
             setweight(to_tsvector('english'::regconfig, description), 'C')
    $$;

    create table deployable_models (
      id uuid primary key default gen_random_uuid(),
      model_name text not null unique,
      display_name text not null,
      provider text not null,
      family text not null,
      model_type text not null check (model_type in ('LLM', 'embedding', 'rerank', 'image', 'audio')),
      description text not null,
      tags text[] not null default '{}',
      enabled boolean not null default true,
      hosted boolean not null default false,
      sort_order integer not null default 0,
      -- null: every organization may deploy it; otherwise only these.
      allowed_organization_ids integer[],
      search tsvector generated always as (
        deployable_model_search(model_name, display_name, family, provider, tags, description)
      ) stored,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create index deployable_models_search on deployable_models using gin (search);
    create index deployable_models_listing on deployable_models (model_type, sort_order, display_name);
    create trigger deployable_models_updated_at before update on deployable_models for each row execute function set_updated_at();

    create table model_specs (
      id integer generated always as identity primary key,
      deployable_model_id uuid not null references deployable_models (id) on delete cascade,
      model_format text not null,
      model_size_in_billions numeric(8, 2) not null check (model_size_in_billions > 0),
      quantizations text[] not null check (cardinality(quantizations) > 0),
      model_engine text not null,
      unique (deployable_model_id, model_format, model_size_in_billions)
    );
  `);

  for (const [index, model] of MODELS.entries()) {
    const [row] = await knex('deployable_models')
      .insert({
        model_name: model.name,
        display_name: model.display,
        provider: model.provider,
        family: model.family,
        model_type: model.type,
        description: model.description,
        tags: model.tags,
        hosted: model.hosted ?? false,
        sort_order: (index + 1) * 10,
      })
      .returning('id');
    const specs = model.specs.flatMap((spec) =>
      spec.sizes.map((size) => ({
        deployable_model_id: (row as { id: string }).id,
        model_format: spec.format,
        model_size_in_billions: size,
        quantizations: spec.quantizations,
        model_engine: spec.engine,
      })),
    );
    await knex('model_specs').insert(specs);
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop table model_specs, deployable_models; drop function deployable_model_search');
}
