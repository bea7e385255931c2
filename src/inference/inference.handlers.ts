import type { Readable } from 'node:stream';
import type { Principal } from '../accounts/principal.ts';
import { AppError } from '../errors.ts';
import type { HandlerContext, Handlers, OperationId } from '../http/types.ts';
import { forward, multipartWithModel, type Usage } from './proxy.ts';
import type { InferenceRouter, Target } from './routing.ts';
import type { UsageRecorder } from './usage.ts';

type InferenceHandlers = Pick<
  Handlers,
  'createChatCompletion' | 'createEmbedding' | 'createRerank' | 'createImage' | 'createTranscription' | 'listModels'
>;

const TRANSCRIPTION_LIMIT = 25 * 1024 * 1024;

/** The handler has written the answer itself (a stream); the dispatcher sends nothing more. */
const STREAMED = { status: 200, body: undefined } as never;

function callerOf(context: HandlerContext<OperationId>): Principal {
  if (!context.auth) throw new AppError('UNAUTHENTICATED', 'Send an API key or sign in.', { inference: { code: 'missing_credentials' } });
  return context.auth;
}

/** The inference proxy: each route resolves `model` to a deployment and streams to its engine. */
export function inferenceHandlers(deps: { router: InferenceRouter; usage: UsageRecorder }): InferenceHandlers {
  const { router, usage } = deps;

  const record = (context: HandlerContext<OperationId>, principal: Principal, target: Target, route: string, counted: Usage | undefined) => {
    if (!counted) return;
    usage.record({
      requestId: context.requestId,
      organizationId: target.organizationId,
      deploymentId: target.deploymentId,
      apiKeyId: principal.kind === 'apiKey' ? principal.keyId : null,
      userId: principal.kind === 'session' ? principal.user.id : null,
      route,
      model: target.modelName,
      ...counted,
    });
  };

  /** A JSON route: rewrite `model` to the engine's uid and stream the answer back. */
  const json = (path: string, prepare?: (body: Record<string, unknown>) => void) => async (context: HandlerContext<OperationId>) => {
    const principal = callerOf(context);
    const body = { ...(context.body as unknown as Record<string, unknown>) };
    const target = await router.resolve(principal, body.model);
    body.model = target.engineModelUid;
    prepare?.(body);
    const counted = await forward({ req: context.req, res: context.res, target, path, body: JSON.stringify(body), contentType: 'application/json' });
    record(context, principal, target, path, counted);
    return STREAMED;
  };

  return {
    createChatCompletion: json('/v1/chat/completions', (body) => {
      // Usage of a stream is reported in its last chunk only when asked for; metering needs it.
      if (body.stream === true) body.stream_options = { ...(body.stream_options as object | undefined), include_usage: true };
    }),
    createEmbedding: json('/v1/embeddings'),
    createRerank: json('/v1/rerank'),
    createImage: json('/v1/images/generations'),
    createTranscription: async (context) => {
      const principal = callerOf(context);
      let target: Target | undefined;
      const { body, contentType } = await multipartWithModel(
        context.req,
        async (model) => {
          target = await router.resolve(principal, model);
          return target.engineModelUid;
        },
        TRANSCRIPTION_LIMIT,
      );
      if (!target) throw new Error('unreachable');
      await forward({ req: context.req, res: context.res, target, path: '/v1/audio/transcriptions', body: body as Readable, contentType });
      return STREAMED;
    },
    listModels: async (context) => ({ status: 200, body: { object: 'list', data: await router.models(callerOf(context)) } }),
  };
}
