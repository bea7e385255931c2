import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Model, SimulatedCluster } from './cluster.ts';
import { isRecord, pydanticError, pySet, readJsonObject, sendJson, SimulatorError, valueError } from './http.ts';
import { toolCallFamilyNames, toolParserOf } from './model-registry.ts';
import { answerWords, hashSeed, prng } from './seeded.ts';
import { chatRequestProblem, chooseTool, functionTools, guidedSchema, pyJson, schemaValue, tokenPieces, toolCallText, type FunctionTool } from './structured.ts';

/**
 * The text routes of the simulator: chat completions and completions, as Xinference serves them
 * with its vLLM engine (`xinference/api/restful_api.py`, `create_chat_completion` and
 * `create_completion`; `xinference/model/llm/vllm/core.py`, `async_chat` and `async_generate`;
 * `xinference/model/llm/utils.py`, the chunk conversions). Answers are paced token by token and
 * derived from the request's text.
 *
 * Xinference drives vLLM's engine itself and parses tool calls with its own parsers
 * (`xinference/model/llm/tool_parsers/`); vLLM's OpenAI server (`vllm/entrypoints/openai/serving_chat.py`,
 * which streams a call's name first and then pieces of its arguments) is not in the path. So:
 * - a request with `tools` to a family that may call tools answers `tool_calls` (ids `call_<uuid>`,
 *   arguments serialized by Python's `json.dumps`), content "" and finish_reason "tool_calls"
 *   (`_post_process_completion`); streamed, a call arrives whole in one delta (name and arguments),
 *   since vLLM's `stream_results` holds a Qwen `<tool_call>` back until it is complete and every
 *   parser reports a call once its closing tag is read (`_post_process_completion_chunk`); every
 *   chunk of that path has its own id, its delta the role and `tool_calls` (`[]` for text);
 * - a conversation that ends with a tool's result, or `tool_choice` "none", gets words on that
 *   same path (see `chooseTool`);
 * - `response_format` json_object or json_schema answers JSON guided decoding would allow (see
 *   `guidedSchema`); with tools too, guided decoding keeps the model from writing a call;
 * - `tools`, or a last message from a tool, to any other family is 400 (`create_chat_completion`).
 * The Llama 3 and DeepSeek R1 parsers cannot stream (`extract_tool_calls_streaming` raises): a
 * streamed request with tools to those families ends with an error event. GLM4's parser expects
 * the Transformers engine's output and garbles calls on vLLM; the simulator answers GLM4 calls as
 * the others instead.
 */

export interface GenerationSettings {
  /** Delay between generated tokens (streamed, and in total for non-streaming answers). */
  tokenLatencyMs: number;
  /** Length in tokens (= words) of a generated answer unless `max_tokens` cuts it short. */
  completionTokens: number;
  /** Dimension of the simulated embedding vectors. */
  embeddingDimensions: number;
}

/** The auth's model check of an inference route (`SimulatedAuth.checkModelAccess`); none without auth. */
export type ModelAccessCheck = (req: IncomingMessage, modelUid: string, modelType: string) => void;

interface Generation {
  model: Model;
  res: ServerResponse;
  done: boolean;
  timer: NodeJS.Timeout | undefined;
  fail(message: string): void;
  stop(): void;
}

/** What the model writes: its tokens, why it stopped, and the tool call they make, if any. */
interface Answer {
  pieces: string[];
  finishReason: string;
  call?: { name: string; arguments: string };
}

type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};
/** sse-starlette (Xinference's SSE writer) ends lines with CRLF. */
const SSE_END = '\r\n\r\n';
const sse = (data: string) => `data: ${data}${SSE_END}`;
const DONE_EVENT = sse('[DONE]');

/** The tool parsers whose `extract_tool_calls_streaming` raises, and the name their message gives the family. */
const NO_STREAMING_PARSERS: Record<string, string> = { llama3: 'Llama3', 'deepseek-r1': 'DeepSeek R1' };

export function textGeneration(cluster: SimulatedCluster, settings: GenerationSettings, checkModelAccess: ModelAccessCheck) {
  const activeGenerations = new Set<Generation>();
  const counters = { abortedRequests: 0, generatedTokens: 0 };

  function track(model: Model, res: ServerResponse, onStop: () => void, onFail: (message: string) => void): Generation {
    const generation: Generation = {
      model,
      res,
      done: false,
      timer: undefined,
      stop() {
        if (generation.done) return;
        generation.done = true;
        if (generation.timer) clearTimeout(generation.timer);
        generation.timer = undefined;
        activeGenerations.delete(generation);
        model.generations.delete(generation);
        onStop();
      },
      fail(message: string) {
        if (generation.done) return;
        generation.stop();
        // api/restful_api.py: a generation that fails is reported (`_report_error_event`) before it is answered.
        cluster.events.report(model.uid, 'ERROR', message);
        onFail(message);
      },
    };
    activeGenerations.add(generation);
    model.generations.add(generation);
    res.once('close', () => {
      if (!generation.done) {
        counters.abortedRequests++;
        generation.stop();
      }
    });
    return generation;
  }

  /** Answers once `count` tokens have been generated at the configured latency (at once when it is 0). */
  function afterTokens(model: Model, res: ServerResponse, count: number, answer: () => void): void {
    const latency = settings.tokenLatencyMs;
    if (latency === 0 || count === 0) {
      counters.generatedTokens += count;
      return answer();
    }
    const generation = track(
      model,
      res,
      () => undefined,
      (message) => sendJson(res, 500, { detail: message }),
    );
    generation.timer = setTimeout(() => {
      counters.generatedTokens += count;
      generation.stop();
      answer();
    }, latency * count);
  }

  /**
   * Streams `count` tokens at the configured latency: `emit(i)` gives the SSE text of token i
   * (nothing is written when it is empty: a held tool call), `tail()` what ends the stream. A
   * client that leaves stops the generation; a model that dies ends the stream with an error event.
   */
  function streamTokens(model: Model, res: ServerResponse, count: number, emit: (index: number) => string, tail: () => string): void {
    const latency = settings.tokenLatencyMs;
    let index = 0;
    const onDrain = () => schedule();
    const generation = track(
      model,
      res,
      () => res.off('drain', onDrain),
      (message) => res.end(sse(JSON.stringify({ error: message }))),
    );
    const step = () => {
      generation.timer = undefined;
      if (generation.done) return;
      while (index < count) {
        const text = emit(index);
        index++;
        counters.generatedTokens++;
        if (text && !res.write(text)) {
          res.once('drain', onDrain);
          return;
        }
        if (latency > 0 && index < count) {
          generation.timer = setTimeout(step, latency);
          return;
        }
      }
      generation.stop();
      res.end(tail());
    };
    function schedule() {
      if (generation.done) return;
      if (latency > 0) generation.timer = setTimeout(step, latency);
      else step();
    }
    schedule();
  }

  /**
   * A model that cannot serve the route: `core/model.py` raises AttributeError ("Model … is not
   * for chat."), which the route answers 500, or, streaming, as an error event of a 200 stream.
   */
  function refuse(res: ServerResponse, stream: boolean, message: string): void {
    if (!stream) throw new SimulatorError(500, message);
    res.writeHead(200, SSE_HEADERS);
    res.end(sse(JSON.stringify({ error: message })));
  }

  /** Words, cut by `max_tokens` (vLLM's `ignore_eos` generates exactly `max_tokens`). */
  function wordsAnswer(body: Record<string, unknown>, seedText: string): Answer {
    const maxTokens = maxTokensOf(body);
    const count = body.ignore_eos === true && maxTokens !== undefined ? maxTokens : settings.completionTokens;
    const words = answerWords(seedText, maxTokens === undefined ? count : Math.min(count, maxTokens));
    return { pieces: words.map((word, i) => (i === 0 ? word : ` ${word}`)), finishReason: maxTokens !== undefined && maxTokens < count ? 'length' : 'stop' };
  }

  async function chatCompletions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'CreateChatCompletion', 'model');
    const problem = chatRequestProblem(body);
    if (problem) return pydanticError(res, 'CreateChatCompletion', problem.field, problem.problem);
    // restful_api.py, create_chat_completion: checked before the messages and the model.
    if (body.logit_bias !== undefined && body.logit_bias !== null) throw new SimulatorError(501, 'Not implemented');
    const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
    if (messages.length === 0) throw valueError('Invalid input. Please specify the prompt.');
    checkModelAccess(req, body.model, 'LLM');
    const model = await cluster.serving(body.model, res);
    const tools = functionTools(body.tools);
    const last = messages.at(-1);
    const endsWithToolResult = isRecord(last) && last.role === 'tool';
    // create_chat_completion: tools, and tool results, only for the tool-calling families (the
    // union of model/llm/utils.py's *_TOOL_CALL_FAMILY sets, printed as the Python set it is).
    const parser = model.type === 'LLM' ? toolParserOf(model.name) : undefined;
    if (parser === undefined && (tools.length > 0 || endsWithToolResult)) {
      throw new SimulatorError(400, `Only ${pySet(toolCallFamilyNames())} support ${tools.length > 0 ? 'tool calls' : 'tool messages'}`);
    }
    const stream = body.stream === true;
    // core/model.py, chat: a family with only `generate` (codestral-v0.1) has no chat on vLLM.
    if (model.type !== 'LLM' || !model.abilities.includes('chat')) return refuse(res, stream, `Model ${model.name} is not for chat.`);

    let promptTokens = tools.length > 0 ? tokenPieces(JSON.stringify(body.tools)).length : 0;
    let lastUser = '';
    for (const message of messages) {
      const text = messageText(message);
      promptTokens += countWords(text);
      if (isRecord(message) && message.role === 'user') lastUser = text;
    }
    const seedText = `${lastUser}\u0000${typeof body.seed === 'number' ? body.seed : ''}`;
    const answer = chatAnswer(body, seedText, tools, endsWithToolResult, lastUser);
    const count = answer.pieces.length;
    const usage = { prompt_tokens: promptTokens, completion_tokens: count, total_tokens: promptTokens + count };
    // model/llm/vllm/core.py, async_chat: any tools take the tool path, whatever the model writes.
    if (tools.length > 0) return toolPathAnswer(model, res, stream, body, answer, usage, parser as string);

    const id = `chatcmpl-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    if (!stream) {
      return afterTokens(model, res, count, () =>
        sendJson(res, 200, {
          id,
          object: 'chat.completion',
          created,
          model: model.uid,
          choices: [{ index: 0, message: { role: 'assistant', content: answer.pieces.join('') }, finish_reason: answer.finishReason }],
          usage,
        }),
      );
    }
    const head = `data: {"id":${JSON.stringify(id)},"model":${JSON.stringify(model.uid)},"object":"chat.completion.chunk","created":${created},"choices":`;
    res.writeHead(200, SSE_HEADERS);
    res.write(`${head}[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}${SSE_END}`);
    streamTokens(
      model,
      res,
      count,
      (i) => `${head}[{"index":0,"delta":{"content":${JSON.stringify(answer.pieces[i])}},"finish_reason":null}]}${SSE_END}`,
      () => {
        let tail = `${head}[{"index":0,"delta":{"content":""},"finish_reason":${JSON.stringify(answer.finishReason)}}]}${SSE_END}`;
        if (includeUsage(body)) tail += `${head}[],"usage":${JSON.stringify(usage)}}${SSE_END}`;
        return tail + DONE_EVENT;
      },
    );
  }

  /** What the simulated model writes for a chat request: JSON under guided decoding, a tool call, or words. */
  function chatAnswer(body: Record<string, unknown>, seedText: string, tools: FunctionTool[], endsWithToolResult: boolean, prompt: string): Answer {
    const schema = guidedSchema(body.response_format);
    if (schema !== undefined) {
      const pieces = tokenPieces(pyJson(schemaValue(schema, prng(hashSeed(`${seedText}\u0000${JSON.stringify(schema)}`)))));
      // vLLM stops a guided answer at max_tokens like any other: the JSON is then cut short.
      const maxTokens = maxTokensOf(body);
      return maxTokens !== undefined && maxTokens < pieces.length ? { pieces: pieces.slice(0, maxTokens), finishReason: 'length' } : { pieces, finishReason: 'stop' };
    }
    const tool = endsWithToolResult ? undefined : chooseTool(tools, body.tool_choice, prompt);
    if (!tool) return wordsAnswer(body, seedText);
    const args = schemaValue(tool.parameters, prng(hashSeed(`${seedText}\u0000${tool.name}`)));
    // The call is written whole: max_tokens does not cut it in the simulator.
    return { pieces: tokenPieces(toolCallText(tool.name, args)), finishReason: 'tool_calls', call: { name: tool.name, arguments: pyJson(args) } };
  }

  /**
   * The answer of a request with tools (`model/llm/utils.py`): `_post_process_completion` when
   * whole, `_async_to_tool_completion_chunks` and `_post_process_completion_chunk` when streamed.
   */
  function toolPathAnswer(model: Model, res: ServerResponse, stream: boolean, body: Record<string, unknown>, answer: Answer, usage: Usage, parser: string): void {
    const { call } = answer;
    if (!stream) {
      return afterTokens(model, res, answer.pieces.length, () =>
        sendJson(res, 200, {
          id: `chatcmpl-${randomUUID()}`,
          model: model.uid,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          choices: [
            {
              index: 0,
              message: {
                role: 'assistant',
                content: call ? '' : answer.pieces.join(''),
                tool_calls: call ? [{ id: `call_${randomUUID()}`, type: 'function', function: { name: call.name, arguments: call.arguments } }] : [],
              },
              logprobs: null,
              // Whole answers report "tool_calls" or "stop", never "length".
              finish_reason: call ? 'tool_calls' : 'stop',
            },
          ],
          usage,
        }),
      );
    }
    res.writeHead(200, SSE_HEADERS);
    const family = NO_STREAMING_PARSERS[parser];
    if (family) {
      const message = `Streaming support for tool calls is available only when using Qwen models with vLLM backend or GLM4-chat models without vLLM backend. ${family} does not support streaming tool call extraction.`;
      res.end(sse(JSON.stringify({ error: message })));
      return;
    }
    const chunk = (delta: Record<string, unknown>, finishReason: string | null, chunkUsage: Usage | null) =>
      sse(
        JSON.stringify({
          id: `chatcmpl-${randomUUID()}`,
          model: model.uid,
          object: 'chat.completion.chunk',
          created: Math.floor(Date.now() / 1000),
          choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
          usage: chunkUsage,
        }),
      );
    const delta = (content: string, toolCalls: unknown[] = []) => ({ role: 'assistant', content, tool_calls: toolCalls });
    streamTokens(
      model,
      res,
      answer.pieces.length,
      (i) => (call ? '' : chunk(delta(answer.pieces[i] as string), null, null)),
      () => {
        let tail = call
          ? chunk(delta('', [{ index: 0, id: `call_${randomUUID()}`, type: 'function', function: { arguments: call.arguments, name: call.name } }]), null, null) +
            chunk(delta(''), 'tool_calls', null)
          : chunk(delta(''), answer.finishReason, usage);
        // _get_usage_chat_completion_chunk: "chat" and the engine's request id.
        if (includeUsage(body)) tail += sse(JSON.stringify({ id: `chat${randomUUID()}`, model: model.uid, created: Math.floor(Date.now() / 1000), object: 'chat.completion.chunk', choices: [], usage }));
        return tail + DONE_EVENT;
      },
    );
  }

  /**
   * `POST /v1/completions` (`restful_api.py`, `create_completion`; `model/llm/vllm/core.py`,
   * `async_generate`): every LLM on vLLM generates, its chat families too. The answer is a
   * `text_completion` whose id is the engine's request id; streamed, every chunk carries the usage
   * so far, the last one the finish reason, and the stream ends without `[DONE]` (only the chat
   * route sends it).
   */
  async function completions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    // api/schemas/requests.py, CreateCompletionRequest: model and prompt are required strings.
    if (typeof body.model !== 'string') return pydanticError(res, 'CreateCompletionRequest', 'model');
    if (typeof body.prompt !== 'string') return pydanticError(res, 'CreateCompletionRequest', 'prompt', body.prompt === undefined ? undefined : 'Input should be a valid string [type=string_type]');
    if (body.logit_bias !== undefined && body.logit_bias !== null) throw new SimulatorError(501, 'Not implemented');
    checkModelAccess(req, body.model, 'LLM');
    const model = await cluster.serving(body.model, res);
    const stream = body.stream === true;
    // core/model.py, generate: a model without generate (any but an LLM) raises AttributeError.
    if (model.type !== 'LLM') return refuse(res, stream, `Model ${model.name} is not for generate.`);

    const answer = wordsAnswer(body, `${body.prompt}\u0000${typeof body.seed === 'number' ? body.seed : ''}`);
    const count = answer.pieces.length;
    const promptTokens = countWords(body.prompt);
    const usageAt = (tokens: number): Usage => ({ prompt_tokens: promptTokens, completion_tokens: tokens, total_tokens: promptTokens + tokens });
    const id = randomUUID();
    const created = Math.floor(Date.now() / 1000);
    const completion = (choices: unknown[], usage: Usage) => ({ id, object: 'text_completion', created, model: model.uid, choices, usage });
    const choice = (text: string, finishReason: string | null) => ({ text, index: 0, logprobs: null, finish_reason: finishReason });
    if (!stream) return afterTokens(model, res, count, () => sendJson(res, 200, completion([choice(answer.pieces.join(''), answer.finishReason)], usageAt(count))));
    res.writeHead(200, SSE_HEADERS);
    streamTokens(
      model,
      res,
      count,
      (i) => sse(JSON.stringify(completion([choice(answer.pieces[i] as string, null)], usageAt(i + 1)))),
      () => sse(JSON.stringify(completion([choice('', answer.finishReason)], usageAt(count)))) + (includeUsage(body) ? sse(JSON.stringify(completion([], usageAt(count)))) : ''),
    );
  }

  return {
    chatCompletions,
    completions,
    counters,
    active: () => activeGenerations.size,
    stopAll() {
      for (const generation of [...activeGenerations]) generation.stop();
    },
  };
}

function maxTokensOf(body: Record<string, unknown>): number | undefined {
  const raw = typeof body.max_completion_tokens === 'number' ? body.max_completion_tokens : body.max_tokens;
  return typeof raw === 'number' && raw >= 0 ? Math.floor(raw) : undefined;
}

function includeUsage(body: Record<string, unknown>): boolean {
  return isRecord(body.stream_options) && body.stream_options.include_usage === true;
}

function messageText(message: unknown): string {
  if (!isRecord(message)) return '';
  const content = message.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (isRecord(part) && typeof part.text === 'string' ? part.text : ''))
      .filter(Boolean)
      .join(' ');
  }
  return '';
}

/** The simulator's token count of a text: its words. */
export function countWords(text: string): number {
  let n = 0;
  for (const part of text.split(/\s+/)) if (part) n++;
  return n;
}
