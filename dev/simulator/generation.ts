import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import busboy, { type Busboy } from 'busboy';
import type { Model, SimulatedCluster } from './cluster.ts';
import { solidJpeg } from './jpeg.ts';
import { hashSeed, prng } from './seeded.ts';
import { countWords, textGeneration, type GenerationSettings, type ModelAccessCheck } from './text-generation.ts';
import { pydanticError, readJsonObject, sendJson, SimulatorError } from './http.ts';

/**
 * The OpenAI-compatible inference routes of the simulator (`xinference/api/restful_api.py`,
 * `create_embedding`, `rerank`, `create_images`, `create_transcriptions`, and the text routes of
 * `text-generation.ts`, `create_chat_completion` and `create_completion`): the request and answer
 * shapes, SSE framing and usage of Xinference. Outputs are derived deterministically from the
 * request (a hash-seeded word list, hash-seeded unit vectors, a one-colour JPEG).
 *
 * Where Xinference does not answer as the hosted API does, the simulator answers as Xinference:
 * - chat and completions: any `logit_bias` but null is 501 "Not implemented", and `n` is dropped:
 *   one choice (`api/restful_api.py`, `create_chat_completion`, `create_completion`); tools and
 *   structured output as `text-generation.ts` says;
 * - embeddings: `encoding_format` is dropped: vectors are float lists (`restful_api.py`,
 *   `create_embedding`);
 * - images: `url` (the default) is a path on the worker's disk to a JPEG, `b64_json` a base64
 *   JPEG (`model/image/utils.py`, `handle_image_result`; PNG only for images with transparency);
 * - transcriptions: Whisper answers `json` and `verbose_json` only; `text`, `srt` and `vtt` raise,
 *   answered 500 (`model/audio/whisper.py`, `_call_model`), and the route labels every answer
 *   JSON (`restful_api.py`, `create_transcriptions`).
 */

export type { GenerationSettings, ModelAccessCheck } from './text-generation.ts';

export type InferenceRoutes = ReturnType<typeof inferenceRoutes>;

export function inferenceRoutes(cluster: SimulatedCluster, settings: GenerationSettings, checkModelAccess: ModelAccessCheck = () => undefined) {
  const textRoutes = textGeneration(cluster, settings, checkModelAccess);

  function requireAbility(model: Model, type: string, what: string): void {
    if (model.type !== type) throw new SimulatorError(500, `Model ${model.name} is not for ${what}.`);
  }

  async function embeddings(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'CreateEmbeddingRequest', 'model');
    if (body.input === undefined) return pydanticError(res, 'CreateEmbeddingRequest', 'input');
    checkModelAccess(req, body.model, 'embedding');
    const model = await cluster.serving(body.model, res);
    requireAbility(model, 'embedding', 'creating embedding');
    const inputs: unknown[] =
      typeof body.input === 'string' || (Array.isArray(body.input) && body.input.every((item) => typeof item === 'number'))
        ? [body.input]
        : Array.isArray(body.input)
          ? body.input
          : [body.input];
    let tokens = 0;
    const data = inputs.map((input, index) => {
      const text = typeof input === 'string' ? input : JSON.stringify(input);
      tokens += typeof input === 'string' ? countWords(input) : Array.isArray(input) ? input.length : 1;
      return { index, object: 'embedding', embedding: unitVector(text, settings.embeddingDimensions) };
    });
    sendJson(res, 200, {
      object: 'list',
      model: model.uid,
      model_replica: model.replicas[0]?.uid ?? model.uid,
      data,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  async function rerank(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'RerankRequest', 'model');
    if (typeof body.query !== 'string') return pydanticError(res, 'RerankRequest', 'query');
    if (!Array.isArray(body.documents) || !body.documents.every((d) => typeof d === 'string')) return pydanticError(res, 'RerankRequest', 'documents');
    checkModelAccess(req, body.model, 'rerank');
    const model = await cluster.serving(body.model, res);
    requireAbility(model, 'rerank', 'reranking');
    const query = body.query;
    const documents = body.documents as string[];
    const queryWords = new Set(words(query));
    const scored = documents.map((document, index) => {
      const docWords = words(document);
      const overlap = docWords.length === 0 ? 0 : docWords.filter((w) => queryWords.has(w)).length / docWords.length;
      const jitter = hashSeed(`${query}\u0000${document}`) / 0xffffffff;
      return { index, relevance_score: Number((0.7 * overlap + 0.3 * jitter).toFixed(6)), document };
    });
    scored.sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index);
    const topN = typeof body.top_n === 'number' ? Math.max(0, Math.floor(body.top_n)) : undefined;
    const picked = topN === undefined ? scored : scored.slice(0, topN);
    const inputTokens = countWords(query) + documents.reduce((sum, d) => sum + countWords(d), 0);
    sendJson(res, 200, {
      id: randomUUID(),
      results: picked.map((r) => ({ index: r.index, relevance_score: r.relevance_score, document: body.return_documents === true ? { text: r.document } : null })),
      meta: {
        api_version: null,
        billed_units: null,
        tokens: body.return_len === true ? { input_tokens: inputTokens, output_tokens: inputTokens } : null,
        warnings: null,
      },
    });
  }

  async function images(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, res);
    if (!body) return;
    if (typeof body.model !== 'string') return pydanticError(res, 'TextToImageRequest', 'model');
    checkModelAccess(req, body.model, 'image');
    const model = await cluster.serving(body.model, res);
    requireAbility(model, 'image', 'txt2img');
    const prompt = typeof body.prompt === 'string' ? body.prompt : JSON.stringify(body.prompt ?? '');
    const n = typeof body.n === 'number' && body.n > 0 ? Math.min(Math.floor(body.n), 10) : 1;
    // api/schemas/requests.py, TextToImageRequest: `response_format` defaults to "url".
    const format = body.response_format === undefined || body.response_format === null ? 'url' : body.response_format;
    // model/image/utils.py, handle_image_result: a ValueError, answered 500 by create_images.
    if (format !== 'url' && format !== 'b64_json') throw new SimulatorError(500, `Unsupported response format: ${String(format)}`);
    const data = Array.from({ length: n }, (_, i) => {
      const seed = hashSeed(`${prompt}\u0000${i}`);
      if (format === 'url') {
        // The image is saved under XINFERENCE_IMAGE_DIR (<XINFERENCE_HOME>/image) and its path answered.
        return { url: `/root/.xinference/image/${randomUUID().replaceAll('-', '')}.jpg`, b64_json: null };
      }
      return { url: null, b64_json: solidJpeg(seed & 0xff, (seed >>> 8) & 0xff, (seed >>> 16) & 0xff).toString('base64') };
    });
    sendJson(res, 200, { created: Math.floor(Date.now() / 1000), data });
  }

  async function transcriptions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const form = await readMultipart(req);
    if (!form) {
      req.resume();
      return sendJson(res, 422, { detail: [{ type: 'missing', loc: ['body', 'model'], msg: 'Field required', input: null }] });
    }
    const missing = ['model', 'file'].filter((field) => (field === 'file' ? form.fileBytes === undefined : !form.fields.has(field)));
    if (missing.length > 0) {
      return sendJson(res, 422, { detail: missing.map((field) => ({ type: 'missing', loc: ['body', field], msg: 'Field required', input: null })) });
    }
    checkModelAccess(req, form.fields.get('model') ?? '', 'audio');
    const model = await cluster.serving(form.fields.get('model'), res);
    requireAbility(model, 'audio', 'creating transcriptions');
    const text = `Simulated transcription of ${form.fileBytes} bytes of audio.`;
    // restful_api.py, create_transcriptions: the form's default is json.
    const format = form.fields.get('response_format') ?? 'json';
    if (format === 'json') return sendJson(res, 200, { text });
    // model/audio/whisper.py, _call_model: any other format raises, answered 500 with its message.
    if (format !== 'verbose_json') throw new SimulatorError(500, `Unsupported response format: ${format}`);
    // One segment per four words over the audio's length (taken as 16 kB a second); the duration is
    // the end of the last segment, as Whisper reports it.
    const words = text.split(' ');
    const seconds = Math.round(((form.fileBytes ?? 0) / 16_000) * 1000) / 1000;
    const pieces = Array.from({ length: Math.ceil(words.length / 4) }, (_, i) => ` ${words.slice(i * 4, i * 4 + 4).join(' ')}`);
    let seek = 0;
    const segments = pieces.map((piece, id) => {
      const segment = {
        id,
        seek,
        start: Math.round(((seconds * id) / pieces.length) * 1000) / 1000,
        end: Math.round(((seconds * (id + 1)) / pieces.length) * 1000) / 1000,
        text: piece,
        tokens: [],
        temperature: Number(form.fields.get('temperature') ?? 0),
        avg_logprob: 0,
        compression_ratio: 0,
        no_speech_prob: 0,
      };
      seek += piece.length;
      return segment;
    });
    sendJson(res, 200, { task: 'transcribe', language: form.fields.get('language') ?? 'english', duration: segments.at(-1)?.end ?? 0, text, segments });
  }

  return { ...textRoutes, embeddings, rerank, images, transcriptions };
}

function words(text: string): string[] {
  return text.toLowerCase().split(/[^\p{L}\p{N}]+/u).filter(Boolean);
}

function unitVector(text: string, dimensions: number): number[] {
  const random = prng(hashSeed(text));
  const vector = new Array<number>(dimensions);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    const value = random() * 2 - 1;
    vector[i] = value;
    norm += value * value;
  }
  norm = Math.sqrt(norm) || 1;
  for (let i = 0; i < dimensions; i++) vector[i] = (vector[i] as number) / norm;
  return vector;
}

interface MultipartForm {
  fields: Map<string, string>;
  /** Bytes of the file parts, counted as they stream past; undefined when there is none. */
  fileBytes: number | undefined;
}

/**
 * Reads a multipart/form-data body with busboy, as Xinference's server (Starlette) reads a form: a
 * part with a filename is a file (for busboy also one typed application/octet-stream), any other a
 * text field. Text fields are kept (up to 1 MiB each);
 * file parts are only counted, never held in memory. Undefined when the body is not multipart with
 * a boundary (nothing was read then).
 */
async function readMultipart(req: IncomingMessage): Promise<MultipartForm | undefined> {
  let parser: Busboy;
  try {
    parser = busboy({ headers: req.headers, limits: { fieldSize: 1024 * 1024 } });
  } catch {
    return undefined;
  }
  const form: MultipartForm = { fields: new Map(), fileBytes: undefined };
  parser.on('field', (name: string, value: string) => form.fields.set(name, value));
  parser.on('file', (_name: string, stream: Readable) => {
    form.fileBytes ??= 0;
    // A failed upload is reported by the pipeline; the part's stream then errors with it too.
    stream.on('error', () => undefined);
    stream.on('data', (chunk: Buffer) => (form.fileBytes = (form.fileBytes ?? 0) + chunk.length));
  });
  await pipeline(req, parser);
  return form;
}
