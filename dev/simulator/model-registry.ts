import { readFileSync } from 'node:fs';

/**
 * The builtin model families the simulator knows, as a Xinference cluster of the version played
 * knows them (`xinference-models.json`, derived from Xinference's own specification files by
 * `scripts/simulator-models.ts`). A launch of a name, format, size or quantization that does not
 * exist fails in the worker, as `match_llm` / `match_embedding` / … make it fail
 * (`xinference/model/llm/core.py`, `create_llm_model_instance`: "Model not found, name: …").
 */

type LlmSpec = [format: string, size: string, quantizations: string[]];
type OtherSpec = [format: string, quantizations: string[]];
/** One entry per engine that runs the name. */
type EngineEntry = { abilities: string[]; engine: string | null; format: string | null };

export interface Registry {
  /** `architectures`: what vLLM's chat engine matches a family by (`model/llm/vllm/core.py`, `VLLMChatModel.match_json`). */
  /** `toolParser`: the family's `tool_parser` (`model/llm/llm_family.json`), for those that have one. */
  LLM: Record<string, { abilities: string[]; architectures: string[]; toolParser?: string; specs: LlmSpec[] }>;
  embedding: Record<string, { specs: OtherSpec[] }>;
  rerank: Record<string, { specs: OtherSpec[] }>;
  audio: Record<string, EngineEntry[]>;
  image: Record<string, EngineEntry[]>;
}

let registry: Registry | undefined;
export function load(): Registry {
  registry ??= JSON.parse(readFileSync(new URL('./xinference-models.json', import.meta.url), 'utf8')) as Registry;
  return registry;
}

export interface LaunchedModel {
  name: string;
  type: string;
  format: string | null;
  sizeInBillions: number | string | null;
  quantization: string | null;
}

/** Why the worker would refuse this launch, or undefined when Xinference has the combination. */
export function launchProblem(model: LaunchedModel): string | undefined {
  const known = load();
  const { name, format, quantization } = model;
  const sameQuantization = (offered: string[]) => quantization === null || offered.some((q) => q.toLowerCase() === quantization.toLowerCase());
  switch (model.type) {
    case 'LLM': {
      const size = model.sizeInBillions === null ? null : sizeKey(model.sizeInBillions);
      const family = known.LLM[name];
      const match = family?.specs.some(([f, s, q]) => (format === null || f === format) && (size === null || sizeKey(s) === size) && sameQuantization(q));
      if (match) return undefined;
      return `Model not found, name: ${name}, format: ${format}, size: ${model.sizeInBillions}, quantization: ${quantization}`;
    }
    case 'embedding':
    case 'rerank': {
      const family = known[model.type][name];
      const label = model.type === 'embedding' ? 'Embedding' : 'Rerank';
      if (!family) return `${label} model ${name} not found`;
      const match = family.specs.some(([f, q]) => (format === null || f === format) && (quantization === null || quantization === 'none' || sameQuantization(q)));
      return match ? undefined : `${label} model ${name} has no spec for format ${format} and quantization ${quantization}`;
    }
    case 'audio':
      return known.audio[name] ? undefined : `Audio model ${name} not found`;
    case 'image':
      return known.image[name] ? undefined : `Image model ${name} not found`;
    default:
      return undefined;
  }
}

/** The abilities of a known family (`generate` only for some LLMs, such as codestral-v0.1). */
export function familyAbilities(type: string, name: string): string[] | undefined {
  const known = load();
  if (type === 'LLM') return known.LLM[name]?.abilities;
  if (type === 'audio' || type === 'image') return known[type][name]?.flatMap((entry) => entry.abilities);
  return undefined;
}

/**
 * The tool parsers Xinference sorts tool-calling families by (`xinference/model/llm/__init__.py`,
 * `register_llm`: a family with the `tools` ability joins `QWEN_TOOL_CALL_FAMILY` for "qwen" and
 * "minimax…", `DEEPSEEK_TOOL_CALL_FAMILY` for "deepseek…", and one set each for "gemma", "glm4",
 * "glm5" and "llama3"). A family with `tools` but another parser, or none, joins no set.
 */
function sortsIntoToolCallFamily(parser: string): boolean {
  return ['qwen', 'gemma', 'glm4', 'glm5', 'llama3'].includes(parser) || parser.startsWith('minimax') || parser.startsWith('deepseek');
}

let toolCallParsers: Map<string, string> | undefined;

/** The tool parser of each builtin family that may call tools. */
function toolCallFamilies(): Map<string, string> {
  toolCallParsers ??= new Map(
    Object.entries(load().LLM).flatMap(([name, { abilities, toolParser }]) =>
      abilities.includes('tools') && toolParser !== undefined && sortsIntoToolCallFamily(toolParser) ? [[name, toolParser] as const] : [],
    ),
  );
  return toolCallParsers;
}

/**
 * The builtin families `create_chat_completion` lets call tools (`api/restful_api.py`: the union of
 * the six `*_TOOL_CALL_FAMILY` sets of `model/llm/utils.py`), sorted.
 */
export function toolCallFamilyNames(): string[] {
  return [...toolCallFamilies().keys()].sort();
}

/** The tool parser of a family that may call tools; undefined for any other family. */
export function toolParserOf(name: string): string | undefined {
  return toolCallFamilies().get(name);
}

/** "1_5", "1.5" and 1.5 are one size. */
function sizeKey(size: number | string): string {
  return String(Number(String(size).replace('_', '.')));
}
