import { randomUUID } from 'node:crypto';
import type { Principal } from '../accounts/principal.ts';
import type { Config } from '../config.ts';
import { AppError } from '../errors.ts';
import type { HandlerContext, Handlers, OperationId } from '../http/types.ts';
import { Relay, type Delivery, type MediaType } from './proxy.ts';
import type { InferenceRouter, Target } from './routing.ts';
import { TranscriptionForm } from './transcription-form.ts';
import type { UsageRecord, UsageRecorder } from './usage.ts';

type InferenceHandlers = Pick<
  Handlers,
  'createChatCompletion' | 'createEmbedding' | 'createRerank' | 'createImage' | 'createTranscription' | 'listModels'
>;

const TRANSCRIPTION_LIMIT = 25 * 1024 * 1024;

/** The handler has written the answer itself (a stream); the dispatcher sends nothing more. */
const STREAMED = { status: 200, body: undefined } as never;

/** The metered part of a usage record. */
type Metered = Pick<UsageRecord, 'unit' | 'quantity' | 'promptTokens' | 'completionTokens' | 'totalTokens' | 'estimated'>;
/** What a route is metered by, from what was delivered and the request that was sent. */
type Meter = (delivery: Delivery, request: { bytes: number; body: Record<string, unknown> }) => Metered;

/**
 * Tokens as the engine reported them; when it did not (an aborted stream before its usage chunk, an
 * engine that reports nothing), an estimate: the prompt at one token per 4 bytes of the request
 * sent, and one token per stream chunk that carried generated content.
 */
const byTokens: Meter = (delivery, request) => {
  const reported = delivery.answer.usage();
  if (reported) return { unit: 'token', quantity: reported.totalTokens, ...reported, estimated: false };
  return estimatedTokens(request.bytes, delivery.answer.contentChunks);
};

/** Rerank: `meta.tokens.input_tokens`, asked of the engine with `return_len: true`; estimated when absent. */
const byRerankTokens: Meter = (delivery, request) => {
  const tokens = delivery.answer.rerankTokens();
  if (tokens === undefined) return estimatedTokens(request.bytes, 0);
  return { unit: 'token', quantity: tokens, promptTokens: tokens, completionTokens: 0, totalTokens: tokens, estimated: false };
};

/** Images: the number asked for (`n`, 1 by default), generated in full once the engine answers. */
const byImages: Meter = (_delivery, request) => {
  const images = typeof request.body.n === 'number' ? request.body.n : 1;
  return { unit: 'image', quantity: images, promptTokens: 0, completionTokens: 0, totalTokens: 0, estimated: false };
};

function estimatedTokens(requestBytes: number, completionTokens: number): Metered {
  const promptTokens = Math.ceil(requestBytes / 4);
  const totalTokens = promptTokens + completionTokens;
  return { unit: 'token', quantity: totalTokens, promptTokens, completionTokens, totalTokens, estimated: true };
}

function callerOf(context: HandlerContext<OperationId>): Principal {
  if (!context.auth) throw new AppError('UNAUTHENTICATED', 'Send an API key or sign in.', { inference: { code: 'missing_credentials' } });
  return context.auth;
}

/** The inference proxy: each route resolves `model` to a deployment and streams to its engine. */
export function inferenceHandlers(deps: { router: InferenceRouter; usage: UsageRecorder; config: Pick<Config, 'inference'> }): InferenceHandlers {
  const { router, usage } = deps;
  const relay = new Relay(deps.config.inference);

  /**
   * One record per request the engine answered, keyed by an id the service makes; the request id
   * (the client's, when it sent one) is only a label.
   */
  const record = (context: HandlerContext<OperationId>, principal: Principal, target: Target, route: string, outcome: Delivery['outcome'], metered: Metered) => {
    usage.record({
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
    });
  };

  /** A JSON route: rewrite `model` to the engine's uid, stream the answer back, meter what was delivered. */
  const json =
    (path: string, options: { accepts: readonly MediaType[]; meter: Meter; prepare?: (body: Record<string, unknown>) => void }) =>
    async (context: HandlerContext<OperationId>) => {
      const principal = callerOf(context);
      const body = { ...(context.body as unknown as Record<string, unknown>) };
      const target = await router.resolve(principal, body.model);
      body.model = target.engineModelUid;
      options.prepare?.(body);
      const payload = JSON.stringify(body);
      const delivery = await relay.forward({
        req: context.req,
        res: context.res,
        log: context.log,
        target,
        path,
        body: payload,
        contentType: 'application/json',
        accepts: options.accepts,
      });
      if (delivery) record(context, principal, target, path, delivery.outcome, options.meter(delivery, { bytes: Buffer.byteLength(payload), body }));
      return STREAMED;
    };

  return {
    createChatCompletion: json('/v1/chat/completions', {
      accepts: ['application/json', 'text/event-stream'],
      meter: byTokens,
      prepare: (body) => {
        // Usage of a stream is reported in its last chunk only when asked for; metering needs it.
        if (body.stream === true) body.stream_options = { ...(body.stream_options as object | undefined), include_usage: true };
      },
    }),
    createEmbedding: json('/v1/embeddings', { accepts: ['application/json'], meter: byTokens }),
    createRerank: json('/v1/rerank', {
      accepts: ['application/json'],
      meter: byRerankTokens,
      prepare: (body) => {
        body.return_len = true;
      },
    }),
    createImage: json('/v1/images/generations', { accepts: ['application/json'], meter: byImages }),
    createTranscription: async (context) => {
      const principal = callerOf(context);
      const form = await TranscriptionForm.open(context.req, TRANSCRIPTION_LIMIT);
      try {
        const target = await router.resolve(principal, form.model);
        const delivery = await relay.forward({
          req: context.req,
          res: context.res,
          log: context.log,
          target,
          path: '/v1/audio/transcriptions',
          body: form.body(target.engineModelUid),
          contentType: form.contentType,
          accepts: ['application/json', 'text/plain'],
        });
        if (delivery) {
          record(context, principal, target, '/v1/audio/transcriptions', delivery.outcome, {
            unit: 'request',
            quantity: 1,
            promptTokens: 0,
            completionTokens: 0,
            totalTokens: 0,
            estimated: false,
          });
        }
      } finally {
        await form.dispose();
      }
      return STREAMED;
    },
    listModels: async (context) => ({ status: 200, body: { object: 'list', data: await router.models(callerOf(context)) } }),
  };
}
