import { describe, expect, it } from 'vitest';
import { engineFormatFor, renderTranscript, UnusableTranscript } from '../../src/inference/transcripts.ts';

/** A verbose_json answer as Xinference's Whisper writes it (`model/audio/whisper.py`). */
const verbose = {
  task: 'transcribe',
  language: 'english',
  duration: 7.5,
  text: ' The sun rises in the east. It sets in the west.',
  segments: [
    { id: 0, seek: 0, start: 0, end: 3, text: ' The sun rises in the east.', tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 0, no_speech_prob: 0 },
    { id: 1, seek: 27, start: 3.25, end: null, text: ' It sets in the west.', tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 0, no_speech_prob: 0 },
  ],
};

describe('transcripts rendered by the proxy', () => {
  it('asks the engine for json for text, and for verbose_json where timestamps are needed', () => {
    expect([undefined, 'json', 'text', 'verbose_json', 'srt', 'vtt'].map(engineFormatFor)).toEqual(['json', 'json', 'json', 'verbose_json', 'verbose_json', 'verbose_json']);
  });

  it('renders text as the trimmed transcript and a newline', () => {
    expect(renderTranscript('text', { text: ' Hello there. ' })).toBe('Hello there.\n');
  });

  it('renders SubRip cues from the segments, closing an open segment at the duration', () => {
    expect(renderTranscript('srt', verbose)).toBe(
      '1\n00:00:00,000 --> 00:00:03,000\nThe sun rises in the east.\n\n2\n00:00:03,250 --> 00:00:07,500\nIt sets in the west.\n\n',
    );
  });

  it('renders WebVTT with its header and dotted milliseconds, past the hour too', () => {
    const long = { text: 'x', segments: [{ start: 3725.0404, end: 3727.9996, text: 'Late.' }] };
    expect(renderTranscript('vtt', long)).toBe('WEBVTT\n\n01:02:05.040 --> 01:02:08.000\nLate.\n\n');
    expect(renderTranscript('vtt', verbose)).toMatch(/^WEBVTT\n\n00:00:00\.000 --> 00:00:03\.000\nThe sun rises in the east\.\n\n00:00:03\.250 --> 00:00:07\.500\n/);
  });

  it('makes one cue of the whole text when the engine gave no segments, and none for silence', () => {
    expect(renderTranscript('srt', { text: ' All of it. ', duration: 2 })).toBe('1\n00:00:00,000 --> 00:00:02,000\nAll of it.\n\n');
    expect(renderTranscript('srt', { text: '' })).toBe('');
    expect(renderTranscript('vtt', { text: '' })).toBe('WEBVTT\n\n');
  });

  it('keeps a cue one block when its text holds a blank line', () => {
    expect(renderTranscript('srt', { text: 'a', segments: [{ start: 0, end: 1, text: 'one\n\ntwo' }] })).toBe('1\n00:00:00,000 --> 00:00:01,000\none\ntwo\n\n');
  });

  it('refuses an answer without text', () => {
    expect(() => renderTranscript('text', { detail: 'no' })).toThrow(UnusableTranscript);
    expect(() => renderTranscript('srt', null)).toThrow(UnusableTranscript);
  });
});
