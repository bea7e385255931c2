// Compiled (tsc --strict) against the client @hey-api/openapi-ts generates (SDK, fetch client, zod).
// Each `@ts-expect-error` is a probe that must fail to compile.
import { createChatCompletion, createDeployment, createTranscription } from './out/hey-api/sdk.gen.js';
import type { ChatCompletionChunk, Deployment } from './out/hey-api/types.gen.js';

export async function mustCompile(): Promise<void> {
  await createDeployment({ body: { model_name: 'qwen2.5-instruct', model_size_in_billions: '7' } });
  await createChatCompletion({ body: { model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'hi' }] } });
  await createTranscription({ body: { file: new Blob(['RIFF']), model: 'whisper-large-v3' } });
  const stage: Deployment['failure_stage'] = null;
  const usage: ChatCompletionChunk['usage'] = null;
  void [stage, usage];
}

export async function mustNotCompile(): Promise<void> {
  // @ts-expect-error an unknown field on a strict body
  await createDeployment({ body: { model_name: 'qwen2.5-instruct', gpu: 'h100' } });
  // @ts-expect-error a missing required field
  await createDeployment({ body: { model_format: 'pytorch' } });
  // @ts-expect-error a value outside a nullable enum
  const stage: Deployment['failure_stage'] = 'somewhere';
  // @ts-expect-error a string where the upload needs a Blob
  await createTranscription({ body: { file: 'RIFF', model: 'whisper-large-v3' } });
  void stage;
}
