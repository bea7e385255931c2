/**
 * Regenerates `dev/simulator/xinference-models.json`, the builtin model families the cluster
 * simulator knows, from Xinference's own model specifications (data, Apache-2.0):
 *
 *   node scripts/simulator-models.ts ../shared/xinference [output directory]
 *
 * Kept per family: its abilities, its tool parser (what makes a family with the `tools` ability
 * call tools, `xinference/model/llm/__init__.py`), and per launch spec the format, the size and the
 * quantizations offered on the Hugging Face hub (the hub Xinference downloads from by default). Run it when the
 * specifications move to a new Xinference version, and say which in the file's `source`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

interface Source {
  quantizations?: string[];
}
interface LlmFamily {
  model_name: string;
  model_ability: string[];
  architectures?: string[];
  tool_parser?: string;
  model_specs: Array<{ model_format: string; model_size_in_billions: number | string; model_src: Record<string, Source> }>;
}
interface OtherModel {
  model_name: string;
  model_ability?: string[];
  model_format?: string;
  engine?: string;
  model_specs?: Array<{ model_format: string; model_src: Record<string, Source> }>;
}

const directory = process.argv[2];
if (!directory) throw new Error('usage: node scripts/simulator-models.ts <directory of the Xinference spec files>');
const read = <T>(file: string): T => JSON.parse(readFileSync(path.join(directory, file), 'utf8')) as T;
const readme = readFileSync(path.join(directory, 'README.md'), 'utf8');
const commit = /commit `([0-9a-f]{40})`/.exec(readme)?.[1] ?? 'unknown';

const llm = Object.fromEntries(
  read<LlmFamily[]>('llm-llm_family.json').map((family) => [
    family.model_name,
    {
      abilities: family.model_ability,
      architectures: family.architectures ?? [],
      ...(family.tool_parser ? { toolParser: family.tool_parser } : {}),
      specs: family.model_specs.flatMap((spec) => {
        const hub = spec.model_src.huggingface;
        return hub ? [[spec.model_format, String(spec.model_size_in_billions), hub.quantizations ?? []]] : [];
      }),
    },
  ]),
);
const withSpecs = (file: string) =>
  Object.fromEntries(
    read<OtherModel[]>(file).map((model) => [
      model.model_name,
      { specs: (model.model_specs ?? []).flatMap((spec) => (spec.model_src.huggingface ? [[spec.model_format, spec.model_src.huggingface.quantizations ?? []]] : [])) },
    ]),
  );
/** Audio and image models: one entry per engine that runs the name (Whisper: transformers and MLX). */
const byEngine = (file: string) => {
  const entries: Record<string, Array<{ abilities: string[]; engine: string | null; format: string | null }>> = {};
  for (const model of read<OtherModel[]>(file)) {
    (entries[model.model_name] ??= []).push({ abilities: model.model_ability ?? [], engine: model.engine ?? null, format: model.model_format ?? null });
  }
  return entries;
};

const registry = {
  source: `xorbitsai/inference at ${commit}: xinference/model/{llm/llm_family.json,embedding,rerank,audio,image/model_spec.json}`,
  license: 'Apache License 2.0; derived data (families, formats, sizes, Hugging Face quantizations, abilities, architectures, tool parsers). See xinference-models.LICENSE.',
  LLM: llm,
  embedding: withSpecs('embedding-model_spec.json'),
  rerank: withSpecs('rerank-model_spec.json'),
  audio: byEngine('audio-model_spec.json'),
  image: byEngine('image-model_spec.json'),
};
const output = process.argv[3] ?? path.join(import.meta.dirname, '../dev/simulator');
const target = path.join(output, 'xinference-models.json');
writeFileSync(target, `${JSON.stringify(registry)}\n`);
writeFileSync(path.join(output, 'xinference-models.LICENSE'), readFileSync(path.join(directory, 'LICENSE')));
process.stdout.write(`wrote ${target}: ${Object.keys(llm).length} LLM families\n`);
