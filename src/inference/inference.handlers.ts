import type { Handlers } from '../http/types.ts';
import type { InferenceService } from './inference.service.ts';

type InferenceHandlers = Pick<
  Handlers,
  'createChatCompletion' | 'createCompletion' | 'createEmbedding' | 'createRerank' | 'createImage' | 'createTranscription' | 'listModels' | 'retrieveModel'
>;

/** The inference operations, served by the gateway (gateway.ts): authenticated, read and validated before they run. */
export function inferenceHandlers(deps: { inference: InferenceService }): InferenceHandlers {
  const { inference } = deps;
  return {
    createChatCompletion: (context) => inference.chatCompletion(context),
    createCompletion: (context) => inference.completion(context),
    createEmbedding: (context) => inference.embedding(context),
    createRerank: (context) => inference.rerank(context),
    createImage: (context) => inference.image(context),
    createTranscription: (context) => inference.transcription(context),
    listModels: (context) => inference.models(context),
    retrieveModel: (context) => inference.model(context),
  };
}
