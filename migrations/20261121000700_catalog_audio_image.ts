import type { Knex } from 'knex';

/** Speech-to-text and image models for the transcription and image routes of the proxy. */
const MODELS = [
  {
    model_name: 'whisper-large-v3',
    display_name: 'Whisper Large v3',
    provider: 'OpenAI',
    family: 'whisper',
    model_type: 'audio',
    description: 'Speech recognition and translation model trained on 5M hours of audio in 99 languages.',
    tags: ['speech-to-text', 'multilingual'],
    sort_order: 300,
    spec: { model_format: 'pytorch', model_size_in_billions: 1.55, quantizations: ['none'], model_engine: 'transformers' },
  },
  {
    model_name: 'FLUX.1-schnell',
    display_name: 'FLUX.1 [schnell]',
    provider: 'Black Forest Labs',
    family: 'flux',
    model_type: 'image',
    description: 'Fast 12B rectified-flow text-to-image model that generates in 1 to 4 steps.',
    tags: ['text-to-image'],
    sort_order: 310,
    spec: { model_format: 'pytorch', model_size_in_billions: 12, quantizations: ['none'], model_engine: 'diffusers' },
  },
];

export async function up(knex: Knex): Promise<void> {
  for (const { spec, ...model } of MODELS) {
    const [row] = await knex('deployable_models').insert(model).returning('id');
    await knex('model_specs').insert({ ...spec, deployable_model_id: (row as { id: string }).id });
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex('deployable_models').whereIn('model_name', MODELS.map((m) => m.model_name)).delete();
}
