// Compiled (tsc --strict) against the client orval generates (fetch). Each `@ts-expect-error` is a
// probe that must fail to compile.
import { createChatCompletion, createDeployment, createTranscription, type ChatCompletionChunk, type Deployment } from './out/orval/api.ts';

export async function mustCompile(): Promise<void> {
  await createDeployment({ model_name: 'qwen2.5-instruct', model_size_in_billions: '7' });
  await createChatCompletion({ model: 'qwen2.5-instruct', messages: [{ role: 'user', content: 'hi' }] });
  await createTranscription({ file: new Blob(['RIFF']), model: 'whisper-large-v3' });
  const stage: Deployment['failure_stage'] = null;
  const usage: ChatCompletionChunk['usage'] = null;
  void [stage, usage];
}

export async function mustNotCompile(): Promise<void> {
  // @ts-expect-error an unknown field on a strict body
  await createDeployment({ model_name: 'qwen2.5-instruct', gpu: 'h100' });
  // @ts-expect-error a missing required field
  await createDeployment({ model_format: 'pytorch' });
  // @ts-expect-error a value outside a nullable enum
  const stage: Deployment['failure_stage'] = 'somewhere';
  void stage;
}
