import { randomUUID } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import type { Principal } from '../principal.ts';
import type { Config } from '../config.ts';
import { AppError } from '../errors.ts';
import type { HandlerContext, Handlers, OperationId } from '../http/types.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { embeddingsAsBase64, imagesAs, JsonStreamRewriter, withoutReplica, type RewritePolicy } from './json-rewrite.ts';
import { byImages, byRerankTokens, byTokens, perRequest, type Meter, type Metered } from './metering.ts';
import type { AnswerWatch } from './answer-watch.ts';
import type { Admission, Cost, KeyLimiter } from './key-limiter.ts';
import { Relay, type AnswerRewrite, type Delivery, type MediaType } from './proxy.ts';
import type { RequestNote } from './request-metrics.ts';
import type { InferenceRouter, Target } from './routing.ts';
import { TranscriptionForm } from './transcription-form.ts';
import { engineFormatFor, isTextFormat, renderTranscript, type TextFormat } from './transcripts.ts';
import type { UsageRecord, UsageRecorder } from './usage.ts';
import { STREAMED } from '../http/operation-call.ts';

type InferenceHandlers = Pick<
  Handlers,
  'createChatCompletion' | 'createCompletion' | 'createEmbedding' | 'createRerank' | 'createImage' | 'createTranscription' | 'listModels' | 'retrieveModel'
>;

/** What each inference operation does, called by its handler (inference.handlers.ts) with the gateway's context. */
export interface InferenceService {
  chatCompletion: InferenceHandlers['createChatCompletion'];
  completion: InferenceHandlers['createCompletion'];
  embedding: InferenceHandlers['createEmbedding'];
  rerank: InferenceHandlers['createRerank'];
  image: InferenceHandlers['createImage'];
  transcription: InferenceHandlers['createTranscription'];
  models: InferenceHandlers['listModels'];
  model: InferenceHandlers['retrieveModel'];
}

/** Largest engine answer a transcript is rendered from (a verbose_json of 25 MiB of audio is far smaller). */
const TRANSCRIPT_ANSWER_LIMIT = 8 * 1024 * 1024;

/** A prompt's estimate at admission, before anything is counted: a token per 4 bytes of the request sent. */
const PROMPT_BYTES_PER_TOKEN = 4;
/** The completion reserved for a model whose context length is unknown and a request that sets no `max_tokens`. */
const UNKNOWN_CONTEXT_TOKENS = 32_768;

/**
 * The most a chat or completion request may generate: its `max_completion_tokens` (chat) or
 * `max_tokens`, at most the model's context length; the context length when it sets neither.
 */
function completionLimit(body: Record<string, unknown>, target: Pick<Target, 'contextLength'>): number {
  const asked = body.max_completion_tokens ?? body.max_tokens;
  const context = target.contextLength ?? UNKNOWN_CONTEXT_TOKENS;
  return typeof asked === 'number' && asked >= 0 ? Math.min(asked, context) : context;
}

/**
 * Usage of a stream is reported in its last chunk only when asked for (chat and completions alike);
 * metering needs it.
 */
function askForStreamUsage(body: Record<string, unknown>): undefined {
  if (body.stream === true) body.stream_options = { ...(body.stream_options as object | undefined), include_usage: true };
  return undefined;
}


/** The caller's `X-Scale-Up-Timeout` (seconds): the longest it will wait for a cold start. */
function scaleUpTimeout(context: HandlerContext<OperationId>): number | undefined {
  // The document's validator has coerced it to a number in place.
  const header: unknown = context.req.headers['x-scale-up-timeout'];
  const seconds = typeof header === 'string' || typeof header === 'number' ? Number(header) : Number.NaN;
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

/** The request's notes for its metrics (request-metrics.ts), on its answer's locals. */
const noteOf = (context: HandlerContext<OperationId>) => context.res.locals as RequestNote;

function callerOf(context: HandlerContext<OperationId>): Principal {
  if (!context.auth) throw new AppError('UNAUTHENTICATED', 'Send an API key or sign in.', { inference: { code: 'missing_credentials' } });
  return context.auth;
}

/** A value the serving engine does not honour, refused before it is called. */
const unsupportedValue = (param: string, message: string) => new AppError('VALIDATION_FAILED', message, { inference: { code: 'unsupported_value', param } });

/**
 * A chat request the model's abilities, where the catalog knows them, do not cover: a model that
 * does not chat (a `generate`-only model is pointed to completions), and `tools` to a model whose
 * specification has no `tools` ability (Xinference refuses both, with text the client never sees).
 */
function refuseBeyondChatAbilities(body: Record<string, unknown>, abilities: readonly string[], model: string): void {
  if (abilities.length === 0) return;
  if (!abilities.includes('chat')) {
    const instead = abilities.includes('generate') ? '; call /v1/completions' : '';
    throw unsupportedValue('model', `The model \`${model}\` does not chat (its Xinference specification has no \`chat\` ability)${instead}.`);
  }
  if (Array.isArray(body.tools) && body.tools.length > 0 && !abilities.includes('tools')) {
    throw new AppError('VALIDATION_FAILED', `The model \`${model}\` cannot call tools (its Xinference specification has no \`tools\` ability); send the request without \`tools\`.`, {
      inference: { code: 'unsupported_parameter', param: 'tools' },
    });
  }
}

/** `logit_bias` other than null: the serving engine does not implement it. */
function refuseLogitBias(body: Record<string, unknown>): void {
  if (body.logit_bias !== undefined && body.logit_bias !== null) {
    throw new AppError('VALIDATION_FAILED', '`logit_bias` is not supported by the serving engine; leave it out (or send null).', {
      inference: { code: 'unsupported_parameter', param: 'logit_bias' },
    });
  }
}

/** A count the engine does not honour (`n`, `best_of`) other than 1: it generates one `what` per request. */
function refuseMoreThanOne(body: Record<string, unknown>, param: string, what: string): void {
  const value = body[param];
  if (value !== undefined && value !== null && value !== 1) {
    throw unsupportedValue(param, `\`${param}\` must be 1: the serving engine generates one ${what} per request; send several requests for several ${what}s.`);
  }
}

/**
 * Chat parameters the serving engine does not honour, refused here rather than half-served:
 * Xinference answers `logit_bias` with 501 and drops `n` (one choice), `api/restful_api.py`,
 * `create_chat_completion`.
 */
function refuseUnsupportedChat(body: Record<string, unknown>): void {
  refuseLogitBias(body);
  refuseMoreThanOne(body, 'n', 'choice');
}

/**
 * Completion parameters the serving engine does not honour, refused as chat's are: Xinference
 * answers `logit_bias` with 501, drops `n` and `best_of`, and completes one string prompt
 * (`api/restful_api.py`, `create_completion`; `types.py`, `ModelAndPrompt`); its vLLM and llama.cpp
 * engines do not echo the prompt (`model/llm/vllm/core.py`, `_sanitize_generate_config`). A prompt
 * array of one string is sent as that string.
 */
function refuseUnsupportedCompletion(body: Record<string, unknown>): void {
  refuseLogitBias(body);
  refuseMoreThanOne(body, 'n', 'completion');
  refuseMoreThanOne(body, 'best_of', 'completion');
  if (body.echo === true) throw unsupportedValue('echo', '`echo` must be false: the serving engine does not echo the prompt; prepend it to the text yourself.');
  if (Array.isArray(body.prompt)) {
    if (body.prompt.length !== 1) throw unsupportedValue('prompt', '`prompt` must be one string (or an array of one): the serving engine completes one prompt per request; send one request per prompt.');
    body.prompt = body.prompt[0];
  }
}

/** A JSON answer rewritten as it streams (json-rewrite.ts). */
function jsonRewrite(policy: RewritePolicy): AnswerRewrite {
  const decoder = new StringDecoder('utf8');
  const rewriter = new JsonStreamRewriter(policy);
  return {
    mediaType: 'application/json',
    push: (chunk) => rewriter.write(decoder.write(chunk)),
    end: () => rewriter.write(decoder.end()) + rewriter.end(),
  };
}

/** The engine's JSON transcription, held (it is small) and rendered as `format` once complete. */
function transcriptRewrite(format: TextFormat): AnswerRewrite {
  const chunks: Buffer[] = [];
  let bytes = 0;
  return {
    mediaType: 'text/plain',
    push: (chunk) => {
      bytes += chunk.length;
      if (bytes > TRANSCRIPT_ANSWER_LIMIT) throw new Error(`the transcription answer is over ${TRANSCRIPT_ANSWER_LIMIT} bytes`);
      chunks.push(chunk);
      return '';
    },
    end: () => renderTranscript(format, JSON.parse(Buffer.concat(chunks).toString('utf8'))),
  };
}

/**
 * The inference proxy: each operation authorizes the caller's `model`, admits the request under
 * its key's limits, routes it to a deployment's engine (or a hosted model), relays the answer as it
 * streams and meters what was delivered. The gateway (gateway.ts) authenticates, reads and
 * validates before this runs.
 */
export function createInferenceService(deps: {
  router: InferenceRouter;
  usage: UsageRecorder;
  keyLimiter: KeyLimiter;
  config: Pick<Config, 'inference'>;
  metrics?: Metrics | undefined;
}): InferenceService {
  const { router, usage, keyLimiter: limiter } = deps;
  const relay = new Relay(deps.config.inference, (target, reason) => router.credentialsRefused(target, reason), deps.metrics);

  /**
   * Relays the request and meters what was delivered: one record per request the engine answered,
   * keyed by an id the service makes (the request id, the client's when it sent one, is a label).
   * The usage of an answer delivered in full is committed before its last bytes go out (a process
   * killed afterwards has it); an answer cut short is recorded with the next batch.
   */
  const relayMetered = async (
    call: { context: HandlerContext<OperationId>; principal: Principal; admission: Admission | undefined; target: Target; route: string },
    /** What the relay sends besides the request and its target (the request's own `req`, `res`, `target` and `route`). */
    forward: Omit<Parameters<Relay['forward']>[0], 'beforeEnd' | 'req' | 'res' | 'target' | 'path'>,
    meter: (answer: AnswerWatch) => Metered | Promise<Metered>,
  ): Promise<void> => {
    const { context, principal, admission, target, route } = call;
    const usageRecord = (outcome: Delivery['outcome'], metered: Metered): UsageRecord => {
      limiter.settle(admission, metered.unit === 'token' ? metered.totalTokens : 0);
      noteOf(context).metricsTokensIn = metered.promptTokens;
      noteOf(context).metricsTokensOut = metered.completionTokens;
      return {
        usageId: randomUUID(),
        requestId: context.requestId,
        organizationId: target.organizationId,
        deploymentId: target.deploymentId,
        apiKeyId: principal.kind === 'apiKey' ? principal.keyId : null,
        userId: principal.kind === 'session' ? principal.user.id : null,
        route,
        model: target.modelName,
        outcome,
        ...metered,
        recordedAt: new Date(),
      };
    };
    let committed = false;
    try {
      const delivery = await relay.forward({
        ...forward,
        req: context.req,
        res: context.res,
        target,
        path: route,
        beforeEnd: (answer) => {
          committed = true;
          const metered = meter(answer);
          return metered instanceof Promise ? metered.then((m) => usage.commit(usageRecord('completed', m))) : usage.commit(usageRecord('completed', metered));
        },
      });
      if (delivery && !committed) usage.record(usageRecord(delivery.outcome, await meter(delivery.answer)));
    } finally {
      // A request that failed used nothing: its reservation is given back.
      limiter.settle(admission, 0);
    }
  };

  /**
   * Admits an API key's request under its limits, reserving the most it can cost (429 over them),
   * with their `x-ratelimit-*` headers on the answer.
   */
  const admit = async (context: HandlerContext<OperationId>, principal: Principal, cost: Cost): Promise<Admission | undefined> => {
    if (principal.kind !== 'apiKey' || !principal.limits) return undefined;
    const headers: Record<string, string> = {};
    const admission = await limiter.admit(principal, headers, cost);
    for (const [name, value] of Object.entries(headers)) context.res.setHeader(name, value);
    return admission;
  };

  /**
   * A JSON route: refuse what the engine would not honour, rewrite `model` to the engine's uid (and
   * the body as the route needs), stream the answer back with the name the caller asked for in
   * place of the uid (and rewritten where the contract promises what the engine does not give),
   * meter what was delivered.
   */
  const json =
    (
      path: string,
      options: {
        accepts: readonly MediaType[];
        meter: Meter;
        /** The route generates text (chat, completions): its `max_tokens` is reserved too. */
        generates?: boolean;
        /** Refuses (and may normalize) what the engine would not honour, before routing. */
        refuse?: (body: Record<string, unknown>) => void;
        /** Refuses what the model's abilities (the catalog's, Xinference's) do not cover, before the engine is called. */
        requires?: (body: Record<string, unknown>, abilities: readonly string[], model: string) => void;
        /** Changes the body sent to the engine; returns the rewrite of the answer, if any. */
        prepare?: (body: Record<string, unknown>) => (() => AnswerRewrite) | undefined;
      },
    ) => {
    /** Refuses what the model cannot do, admits the request under its key's limits, relays it and meters it. */
    const relay = async (context: HandlerContext<OperationId>, principal: Principal, target: Target, asked: string, body: Record<string, unknown>) => {
      options.requires?.(body, target.abilities, asked);
      body.model = target.engineModelUid;
      const rewrite = options.prepare?.(body);
      const payload = JSON.stringify(body);
      const request = { bytes: Buffer.byteLength(payload), body };
      const admission = await admit(context, principal, {
        tokens: Math.ceil(request.bytes / PROMPT_BYTES_PER_TOKEN) + (options.generates ? completionLimit(body, target) : 0),
        hostedModel: target.deploymentId === null ? target.modelName : null,
      });
      await relayMetered(
        { context, principal, admission, target, route: path },
        {
          body: payload,
          contentType: 'application/json',
          accepts: options.accepts,
          rewrite,
          model: { engineUid: target.engineModelUid, asked },
        },
        (answer) => options.meter({ answer }, request),
      );
    };
    return async (context: HandlerContext<OperationId>) => {
      const principal = callerOf(context);
      const body = { ...(context.body as unknown as Record<string, unknown>) };
      options.refuse?.(body);
      const asked = body.model;
      const target = await router.resolve(principal, asked, { scaleUpTimeoutSeconds: scaleUpTimeout(context), note: noteOf(context) });
      try {
        await relay(context, principal, target, asked as string, body);
      } finally {
        router.done(target);
      }
      return STREAMED;
    };
  };

  /** A transcription's upload relayed as it streams, metered per request. */
  const relayTranscription = async (context: HandlerContext<OperationId>, principal: Principal, target: Target, form: TranscriptionForm) => {
    const admission = await admit(context, principal, { tokens: 0, hostedModel: null });
    const path = '/v1/audio/transcriptions';
    await relayMetered(
      { context, principal, admission, target, route: path },
      {
        // Whisper answers only json and verbose_json: text, srt and vtt are rendered here.
        body: form.body(target.engineModelUid, engineFormatFor),
        contentType: form.contentType,
        accepts: ['application/json'],
        rewrite: () => {
          const format = form.responseFormat;
          return isTextFormat(format) ? transcriptRewrite(format) : undefined;
        },
      },
      (answer) => perRequest({ answer }, { bytes: 0, body: {} }),
    );
  };

  return {
    chatCompletion: json('/v1/chat/completions', {
      accepts: ['application/json', 'text/event-stream'],
      meter: byTokens,
      generates: true,
      refuse: refuseUnsupportedChat,
      requires: refuseBeyondChatAbilities,
      prepare: askForStreamUsage,
    }),
    completion: json('/v1/completions', {
      accepts: ['application/json', 'text/event-stream'],
      meter: byTokens,
      generates: true,
      refuse: refuseUnsupportedCompletion,
      requires: (_body, abilities, model) => {
        if (!abilities.includes('generate')) {
          throw unsupportedValue('model', `The model \`${model}\` does not generate completions (its Xinference specification has no \`generate\` ability); call /v1/chat/completions.`);
        }
      },
      prepare: askForStreamUsage,
    }),
    embedding: json('/v1/embeddings', {
      accepts: ['application/json'],
      meter: byTokens,
      prepare: (body) => {
        // Xinference ignores `encoding_format` (floats always): base64 is encoded here, as OpenAI
        // does. Its `model_replica` is dropped.
        const base64 = body.encoding_format === 'base64';
        delete body.encoding_format;
        return () => jsonRewrite(withoutReplica(base64 ? embeddingsAsBase64 : undefined));
      },
    }),
    rerank: json('/v1/rerank', {
      accepts: ['application/json'],
      meter: byRerankTokens,
      prepare: (body) => {
        body.return_len = true;
        return undefined;
      },
    }),
    image: json('/v1/images/generations', {
      accepts: ['application/json'],
      meter: byImages,
      prepare: (body) => {
        // Xinference's `url` is a path on the worker's disk: the image is always asked for as
        // base64, and a `url` answered as a data URL of it.
        const as = body.response_format === 'b64_json' ? 'b64_json' : 'url';
        body.response_format = 'b64_json';
        return () => jsonRewrite(imagesAs(as));
      },
    }),
    transcription: async (context) => {
      const principal = callerOf(context);
      const form = await TranscriptionForm.open(context.req, context.bodyLimit);
      try {
        const target = await router.resolve(principal, form.model, { scaleUpTimeoutSeconds: scaleUpTimeout(context), note: noteOf(context) });
        try {
          await relayTranscription(context, principal, target, form);
        } finally {
          router.done(target);
        }
      } finally {
        await form.dispose();
      }
      return STREAMED;
    },
    // A listing is a request under the key's limits (as at OpenAI): it counts against
    // requests_per_minute, uses no tokens, and is refused once a monthly budget is used up.
    models: async (context) => {
      const principal = callerOf(context);
      await admit(context, principal, { tokens: 0, hostedModel: null });
      return { status: 200, body: { object: 'list', data: await router.models(principal) } };
    },
    // A retrieval is a request under the key's limits, as a listing is.
    model: async (context) => {
      const principal = callerOf(context);
      await admit(context, principal, { tokens: 0, hostedModel: null });
      return { status: 200, body: await router.model(principal, context.params.model) };
    },
  };
}
