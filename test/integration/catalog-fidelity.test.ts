import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/database.ts';
import { load as loadRegistry } from '../../dev/simulator/model-registry.ts';
import { createTestDatabase } from '../helpers/database.ts';

/**
 * Every catalog entry checked against Xinference's own builtin model specifications (data files
 * of xorbitsai/inference at the commit the review read, in ../shared/xinference from the repo
 * root; XINFERENCE_SPECS_DIR overrides): the name exists, each launch combination (format, size,
 * quantization, case-insensitively, as `match_llm` compares) is offered on the Hugging Face hub,
 * the engine runs that format, an LLM has the `chat` or the `generate` ability (the platform serves
 * LLMs through the chat and the completions routes), and the catalog's abilities (which route the
 * proxy serves a model through) are the specification's.
 *
 * Where those files are not beside the repository (a checkout of its own), the same data is read
 * from `dev/simulator/xinference-models.json`, which `scripts/simulator-models.ts` derives
 * from them; wherever they are, a test checks that the derived file is exactly what the script
 * makes of them, so the two sources cannot drift apart.
 */

const REPO_ROOT = path.resolve(import.meta.dirname, '../..');
const SPECS_DIR = path.resolve(REPO_ROOT, process.env.XINFERENCE_SPECS_DIR ?? '../shared/xinference');
const HAVE_SPECS = existsSync(path.join(SPECS_DIR, 'llm-llm_family.json'));

interface HubSource {
  quantizations?: string[];
}
interface LlmFamily {
  model_name: string;
  model_ability: string[];
  architectures?: string[];
  model_specs: Array<{ model_format: string; model_size_in_billions: number | string; model_src: Record<string, HubSource> }>;
}
interface OtherModel {
  model_name: string;
  model_ability?: string[];
  model_format?: string;
  engine?: string;
  model_specs?: Array<{ model_format: string; model_src: Record<string, HubSource> }>;
}
interface CatalogRow {
  model_name: string;
  model_type: string;
  enabled: boolean;
  model_format: string;
  model_size_in_billions: string;
  quantizations: string[];
  model_engine: string;
}

/**
 * The formats each engine runs, with Xinference's quantization rules
 * (`model/llm/vllm/core.py`, `VLLMChatModel.match_json`; `model/llm/llama_cpp/core.py`;
 * `model/embedding/sentence_transformers/core.py`; `model/rerank/sentence_transformers/core.py`;
 * `model/image/engine_family.py` for diffusers).
 */
const ENGINES: Record<string, { types: string[]; formats: string[]; quantization?: (format: string, quantization: string) => boolean }> = {
  vLLM: {
    types: ['LLM'],
    formats: ['pytorch', 'gptq', 'awq', 'fp4', 'fp8', 'bnb', 'ggufv2'],
    quantization: (format, q) =>
      format === 'pytorch' ? q === 'none' : format === 'awq' ? /[48]/.test(q) : format === 'gptq' ? /[348]/.test(q) : true,
  },
  'llama.cpp': { types: ['LLM'], formats: ['ggufv2'] },
  // model/llm/transformers/core.py, `match_json`: any family without a custom implementation.
  Transformers: { types: ['LLM'], formats: ['pytorch', 'gptq', 'awq', 'bnb', 'fp4'] },
  sentence_transformers: { types: ['embedding', 'rerank'], formats: ['pytorch'] },
  transformers: { types: ['audio'], formats: ['pytorch'] },
  diffusers: { types: ['image'], formats: ['diffusers'] },
};

function readSpecs<T>(file: string): T {
  return JSON.parse(readFileSync(path.join(SPECS_DIR, file), 'utf8')) as T;
}

/**
 * The architectures vLLM's chat engine runs, in any vLLM version Xinference knows
 * (`model/llm/vllm/core.py`, `VLLM_SUPPORTED_CHAT_MODELS` and `_update_vllm_supported_lists`), and
 * those of its multimodal engine, which also needs the `vision` ability (`VLLM_SUPPORTED_MULTI_MODEL_LIST`).
 * A family matched by neither launches on vLLM only when Xinference's virtualenv mode bypasses the
 * check (`model/llm/llm_family.py`), which a cluster may turn off.
 */
const VLLM_CHAT_ARCHITECTURES = new Set([
  'BaichuanForCausalLM', 'ChatGLMForConditionalGeneration', 'ChatGLMModel', 'CohereForCausalLM', 'DeepseekV2ForCausalLM', 'DeepseekV32ForCausalLM',
  'DeepseekV3ForCausalLM', 'DeepseekV4ForCausalLM', 'Ernie4_5ForCausalLM', 'Gemma3ForCausalLM', 'GemmaForCausalLM', 'Glm4ForCausalLM', 'Glm4MoeForCausalLM',
  'Glm4MoeLiteForCausalLM', 'GlmForCausalLM', 'GlmMoeDsaForCausalLM', 'GptOssForCausalLM', 'HYV3ForCausalLM', 'HunYuanDenseV1ForCausalLM', 'InternLM2ForCausalLM',
  'InternLM3ForCausalLM', 'LlamaForCausalLM', 'MiniCPM3ForCausalLM', 'MiniCPMForCausalLM', 'MiniMaxM2ForCausalLM', 'MistralForCausalLM', 'MixtralForCausalLM',
  'OrionForCausalLM', 'QWenLMHeadModel', 'Qwen2ForCausalLM', 'Qwen2MoeForCausalLM', 'Qwen3ForCausalLM', 'Qwen3MoeForCausalLM', 'Qwen3NextForCausalLM',
  'Qwen3_5MoeForCausalLM', 'SeedOssForCausalLM',
]);
const VLLM_MULTIMODAL_ARCHITECTURES = new Set([
  'Gemma3ForConditionalGeneration', 'Gemma4ForConditionalGeneration', 'Glm4vForConditionalGeneration', 'Glm4vMoeForConditionalGeneration', 'InternVLChatModel',
  'KimiK25ForConditionalGeneration', 'MiniCPMV', 'MiniCPMV4_6ForConditionalGeneration', 'MiniMaxM3SparseForConditionalGeneration', 'MllamaForConditionalGeneration',
  'Qwen2AudioForConditionalGeneration', 'Qwen2VLForConditionalGeneration', 'Qwen2_5OmniModel', 'Qwen2_5_VLForConditionalGeneration',
  'Qwen3OmniMoeForConditionalGeneration', 'Qwen3VLMoeForConditionalGeneration', 'Qwen3_5ForConditionalGeneration', 'Qwen3_5MoeForConditionalGeneration',
]);

/**
 * The architectures vLLM's base engine runs for a family with the `generate` ability, in any vLLM
 * version Xinference knows (`model/llm/vllm/core.py`, `VLLM_SUPPORTED_MODELS`, `VLLMModel.match_json`).
 */
const VLLM_GENERATE_ARCHITECTURES = new Set(['LlamaForCausalLM', 'MistralForCausalLM', 'Qwen2ForCausalLM', 'MllamaForConditionalGeneration']);

/**
 * Whether vLLM's chat, multimodal or base engine matches the family by its architectures
 * (`VLLMChatModel.match_json`, `VLLMMultiModel.match_json`, `VLLMModel.match_json`).
 */
function vllmRuns(family: LlmFamily): boolean {
  const architectures = family.architectures ?? [];
  if (family.model_ability.includes('chat') && architectures.some((a) => VLLM_CHAT_ARCHITECTURES.has(a))) return true;
  if (family.model_ability.includes('generate') && architectures.some((a) => VLLM_GENERATE_ARCHITECTURES.has(a))) return true;
  return family.model_ability.includes('vision') && architectures.some((a) => VLLM_MULTIMODAL_ARCHITECTURES.has(a));
}

const sizeOf = (size: number | string) => Number(String(size).replace('_', '.'));
const hasQuantization = (offered: string[] | undefined, quantization: string) => (offered ?? []).some((q) => q.toLowerCase() === quantization.toLowerCase());

let db: Knex;
let drop: () => Promise<void>;
let llms: Map<string, LlmFamily>;
let others: Record<string, Map<string, OtherModel[]>>;

beforeAll(async () => {
  if (HAVE_SPECS) {
    llms = new Map(readSpecs<LlmFamily[]>('llm-llm_family.json').map((family) => [family.model_name, family]));
    others = Object.fromEntries(
      (['embedding', 'rerank', 'audio', 'image'] as const).map((type) => {
        const byName = new Map<string, OtherModel[]>();
        for (const model of readSpecs<OtherModel[]>(`${type}-model_spec.json`)) byName.set(model.model_name, [...(byName.get(model.model_name) ?? []), model]);
        return [type, byName];
      }),
    );
  } else {
    ({ llms, others } = fromRegistry());
  }
  const database = await createTestDatabase();
  drop = database.drop;
  db = createDatabase({ url: database.url, poolMax: 2 });
});
afterAll(async () => {
  await db?.destroy();
  await drop?.();
});

/** The same families, read from the simulator's registry that `scripts/simulator-models.ts` derives from the spec files. */
function fromRegistry(): { llms: Map<string, LlmFamily>; others: Record<string, Map<string, OtherModel[]>> } {
  const registry = loadRegistry();
  const hub = (quantizations: string[]) => ({ huggingface: { quantizations } });
  const llms = new Map(
    Object.entries(registry.LLM).map(([name, family]) => [
      name,
      {
        model_name: name,
        model_ability: family.abilities,
        architectures: family.architectures,
        model_specs: family.specs.map(([format, size, quantizations]) => ({ model_format: format, model_size_in_billions: size, model_src: hub(quantizations) })),
      },
    ]),
  );
  const withSpecs = (type: 'embedding' | 'rerank') =>
    new Map(
      Object.entries(registry[type]).map(([name, model]) => [
        name,
        [{ model_name: name, model_specs: model.specs.map(([format, quantizations]) => ({ model_format: format, model_src: hub(quantizations) })) }],
      ]),
    );
  const byEngine = (type: 'audio' | 'image') =>
    new Map(
      Object.entries(registry[type]).map(([name, entries]) => [
        name,
        entries.map((entry) => ({ model_name: name, model_ability: entry.abilities, ...(entry.format ? { model_format: entry.format } : {}), ...(entry.engine ? { engine: entry.engine } : {}) })),
      ]),
    );
  return { llms, others: { embedding: withSpecs('embedding'), rerank: withSpecs('rerank'), audio: byEngine('audio'), image: byEngine('image') } };
}

/** What is wrong with one catalog launch combination, as Xinference sees it. */
function problemsOf(row: CatalogRow): string[] {
  const label = `${row.model_name} ${row.model_format} ${Number(row.model_size_in_billions)}B [${row.quantizations.join(', ')}] on ${row.model_engine}`;
  const problems: string[] = [];
  const engine = ENGINES[row.model_engine];
  if (!engine || !engine.types.includes(row.model_type)) problems.push(`${label}: ${row.model_engine} is not an engine of ${row.model_type} models`);
  else if (!engine.formats.includes(row.model_format)) problems.push(`${label}: ${row.model_engine} does not run the ${row.model_format} format`);
  else for (const q of row.quantizations) if (engine.quantization && !engine.quantization(row.model_format, q)) problems.push(`${label}: ${row.model_engine} does not run ${row.model_format} ${q}`);

  if (row.model_type === 'LLM') {
    const family = llms.get(row.model_name);
    if (!family) return [...problems, `${label}: Xinference has no LLM family of that name`];
    if (!family.model_ability.some((ability) => ability === 'chat' || ability === 'generate')) {
      problems.push(`${label}: the family's abilities are ${family.model_ability.join(', ')}, neither chat nor generate`);
    }
    if (row.model_engine === 'vLLM' && !vllmRuns(family)) {
      problems.push(`${label}: vLLM does not run the architectures ${(family.architectures ?? []).join(', ') || '(none)'} without virtualenv mode`);
    }
    const specs = family.model_specs.filter((spec) => spec.model_format === row.model_format && sizeOf(spec.model_size_in_billions) === Number(row.model_size_in_billions));
    if (specs.length === 0) return [...problems, `${label}: no ${row.model_format} spec of ${Number(row.model_size_in_billions)}B`];
    for (const q of row.quantizations) {
      if (!specs.some((spec) => hasQuantization(spec.model_src.huggingface?.quantizations, q))) problems.push(`${label}: quantization ${q} is not offered`);
    }
    return problems;
  }
  // A name may have one entry per engine (audio: transformers and MLX).
  const entries = others[row.model_type]?.get(row.model_name);
  if (!entries) return [...problems, `${label}: Xinference has no ${row.model_type} model of that name`];
  if (row.model_type === 'audio') {
    if (!entries.some((entry) => entry.model_format === row.model_format && entry.engine === row.model_engine)) {
      problems.push(`${label}: Xinference runs it as ${entries.map((entry) => `${entry.model_format} on ${entry.engine}`).join(' or ')}`);
    }
  } else if (row.model_type === 'embedding' || row.model_type === 'rerank') {
    // The size is not matched for these types (model/core.py); format and quantization are.
    const spec = entries.flatMap((entry) => entry.model_specs ?? []).find((s) => s.model_format === row.model_format);
    if (!spec) problems.push(`${label}: no ${row.model_format} spec`);
    else for (const q of row.quantizations) if (!hasQuantization(spec.model_src.huggingface?.quantizations, q)) problems.push(`${label}: quantization ${q} is not offered`);
  }
  return problems;
}

describe('the simulator\'s copy of Xinference\'s model specifications', () => {
  it.skipIf(!HAVE_SPECS)(`is exactly what scripts/simulator-models.ts derives from ${SPECS_DIR}`, () => {
    const output = mkdtempSync(path.join(tmpdir(), 'xinference-models-'));
    try {
      execFileSync(process.execPath, [path.join(REPO_ROOT, 'scripts/simulator-models.ts'), SPECS_DIR, output]);
      const committed = path.join(REPO_ROOT, 'dev/simulator/xinference-models.json');
      expect(readFileSync(path.join(output, 'xinference-models.json'), 'utf8')).toBe(readFileSync(committed, 'utf8'));
    } finally {
      rmSync(output, { recursive: true, force: true });
    }
  });
});

describe('the catalog against Xinference 3.x model specifications', () => {
  it('offers only launch combinations Xinference has, on engines that run them (vLLM by architecture), and only LLMs that chat or generate', async () => {
    const rows: CatalogRow[] = await db('deployable_models as m')
      .join('model_specs as s', 's.deployable_model_id', 'm.id')
      .where('m.enabled', true)
      .select('m.model_name', 'm.model_type', 'm.enabled', 's.model_format', 's.model_size_in_billions', 's.quantizations', 's.model_engine');
    expect(rows.length).toBeGreaterThan(100);
    expect(await db('deployable_models').where({ enabled: false })).toEqual([]);
    expect(rows.flatMap(problemsOf)).toEqual([]);
  });

  it('has dropped what Xinference no longer has, and offers the current families instead', async () => {
    const names = (await db('deployable_models').select('model_name')).map((row: { model_name: string }) => row.model_name);
    for (const gone of ['gemma-2-it', 'internlm2.5-chat']) expect(names).not.toContain(gone);
    // codestral-v0.1 (only `generate`) came back with /v1/completions.
    expect(names).toEqual(expect.arrayContaining(['gemma-3-1b-it', 'internlm3-instruct', 'codestral-v0.1']));
  });

  it('states each model\'s abilities as Xinference\'s specification does (none for embedding and rerank models)', async () => {
    const rows: Array<{ model_name: string; model_type: string; abilities: string[] }> = await db('deployable_models').select('model_name', 'model_type', 'abilities');
    const specified = (row: { model_name: string; model_type: string }) =>
      row.model_type === 'LLM' ? llms.get(row.model_name)?.model_ability : [...new Set((others[row.model_type]?.get(row.model_name) ?? []).flatMap((entry) => entry.model_ability ?? []))];
    const wrong = rows.filter((row) => JSON.stringify(row.abilities) !== JSON.stringify(specified(row))).map((row) => `${row.model_name}: ${row.abilities.join(', ')}`);
    expect(wrong).toEqual([]);
    expect(rows.find((row) => row.model_name === 'codestral-v0.1')?.abilities).toEqual(['generate']);
  });

  it('would catch a wrong entry: the rules refuse each mismatch the review found', () => {
    const row = (over: Partial<CatalogRow>): CatalogRow => ({
      model_name: 'qwen2.5-instruct',
      model_type: 'LLM',
      enabled: true,
      model_format: 'pytorch',
      model_size_in_billions: '7',
      quantizations: ['none'],
      model_engine: 'vLLM',
      ...over,
    });
    expect(problemsOf(row({}))).toEqual([]);
    expect(problemsOf(row({ model_format: 'ggufv2', quantizations: ['Q4_K_M'], model_engine: 'llama.cpp' }))).toEqual([]);
    expect(problemsOf(row({ model_name: 'gemma-2-it', model_size_in_billions: '9' }))).toEqual([expect.stringMatching(/no LLM family of that name/)]);
    expect(problemsOf(row({ model_name: 'codestral-v0.1', model_size_in_billions: '22' }))).toEqual([]);
    expect(problemsOf(row({ model_name: 'opt', model_size_in_billions: '1' }))).toEqual([expect.stringMatching(/vLLM does not run the architectures OPTForCausalLM/)]);
    expect(problemsOf(row({ model_name: 'llama-3.3-instruct', model_format: 'ggufv2', model_size_in_billions: '70', quantizations: ['Q5_K_M'], model_engine: 'llama.cpp' }))).toEqual([
      expect.stringMatching(/quantization Q5_K_M is not offered/),
    ]);
    expect(problemsOf(row({ model_name: 'gemma-3-it', model_size_in_billions: '1' }))).toEqual([expect.stringMatching(/no pytorch spec of 1B/)]);
    expect(problemsOf(row({ model_name: 'phi-3-mini-128k-instruct', model_size_in_billions: '4', model_engine: 'Transformers' }))).toEqual([]);
    expect(problemsOf(row({ model_name: 'phi-3-mini-128k-instruct', model_size_in_billions: '4' }))).toEqual([
      expect.stringMatching(/vLLM does not run the architectures Phi3ForCausalLM without virtualenv mode/),
    ]);
    expect(problemsOf(row({ model_format: 'ggufv2', quantizations: ['Q4_K_M'] }))).toEqual([]);
    expect(problemsOf(row({ model_engine: 'llama.cpp' }))).toEqual([expect.stringMatching(/llama.cpp does not run the pytorch format/)]);
    expect(problemsOf(row({ model_name: 'FLUX.1-schnell', model_type: 'image', model_format: 'pytorch', model_engine: 'diffusers' }))).toEqual([
      expect.stringMatching(/diffusers does not run the pytorch format/),
    ]);
  });
});

describe('the catalog migration', () => {
  it('keeps a dropped model that deployments reference, disabled, and leaves those deployments as they were', async () => {
    await db.migrate.down({ name: '20261123000500_catalog_fidelity.ts' });
    expect(await db('deployable_models').where({ model_name: 'gemma-2-it' }).first()).toMatchObject({ enabled: true });
    const [organization] = await db('organizations').insert({ name: 'Migration', slug: `migration-${Date.now()}` }).returning('id');
    const [user] = await db('users').insert({ email: `migration-${Date.now()}@example.com`, name: 'Migration' }).returning('id');
    const insert = async (model: string, format: string, size: number, status: string) => {
      const [row] = await db('deployments')
        .insert({
          user_id: (user as { id: number }).id,
          organization_id: (organization as { id: number }).id,
          deployable_model_id: db('deployable_models').where({ model_name: model }).select('id'),
          model_name: model,
          model_format: format,
          model_size_in_billions: size,
          quantization: 'none',
          model_engine: model === 'FLUX.1-schnell' ? 'diffusers' : 'vLLM',
          status,
        })
        .returning('*');
      return row as { id: string; deployable_model_id: string };
    };
    const gemma = await insert('gemma-2-it', 'pytorch', 9, 'running');
    const flux = await insert('FLUX.1-schnell', 'pytorch', 12, 'requested');

    await db.migrate.latest();
    expect(await db('deployable_models').where({ model_name: 'gemma-2-it' }).first()).toMatchObject({ id: gemma.deployable_model_id, enabled: false });
    expect(await db('deployable_models').where({ model_name: 'internlm2.5-chat' }).first()).toBeUndefined();
    expect(await db('deployments').where({ id: gemma.id }).first()).toMatchObject({ status: 'running', model_name: 'gemma-2-it', deployable_model_id: gemma.deployable_model_id });
    expect(await db('deployments').where({ id: flux.id }).first()).toMatchObject({ model_format: 'diffusers' });
  });
});
