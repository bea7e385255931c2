/**
 * Transcriptions in the text formats of the hosted API (`text`, `srt`, `vtt`), rendered by the
 * proxy from the engine's JSON: Xinference's Whisper answers only `json` and `verbose_json`
 * (`xinference/model/audio/whisper.py`, `_call_model`: "Unsupported response format" otherwise).
 * `text` needs the engine's `json`; `srt` and `vtt` need the timed segments of `verbose_json`.
 */

export type TextFormat = 'text' | 'srt' | 'vtt';

/** What the engine is asked for, for the format the client asked for. */
export function engineFormatFor(format: string | undefined): 'json' | 'verbose_json' {
  return format === 'verbose_json' || format === 'srt' || format === 'vtt' ? 'verbose_json' : 'json';
}

export function isTextFormat(format: string | undefined): format is TextFormat {
  return format === 'text' || format === 'srt' || format === 'vtt';
}

/** The engine's answer is not a transcription. */
export class UnusableTranscript extends Error {}

interface Cue {
  start: number;
  end: number;
  text: string;
}

/**
 * The transcript in `format`, from the engine's `json` or `verbose_json` answer. A segment
 * without an end (the transformers pipeline leaves the last one open) ends where the next starts,
 * or at `duration`; without segments, the whole text is one cue from 0 to `duration`.
 */
export function renderTranscript(format: TextFormat, answer: unknown): string {
  if (!answer || typeof answer !== 'object' || typeof (answer as { text?: unknown }).text !== 'string') {
    throw new UnusableTranscript('the answer has no text');
  }
  const { text, segments, duration } = answer as { text: string; segments?: unknown; duration?: unknown };
  if (format === 'text') return `${text.trim()}\n`;
  const cues = cuesOf(segments, seconds(duration)) ?? (text.trim() ? [{ start: 0, end: seconds(duration) ?? 0, text: text.trim() }] : []);
  if (format === 'srt') return cues.map((cue, i) => `${i + 1}\n${timestamp(cue.start, ',')} --> ${timestamp(cue.end, ',')}\n${cue.text}\n\n`).join('');
  return `WEBVTT\n\n${cues.map((cue) => `${timestamp(cue.start, '.')} --> ${timestamp(cue.end, '.')}\n${cue.text}\n\n`).join('')}`;
}

function cuesOf(segments: unknown, duration: number | undefined): Cue[] | undefined {
  if (!Array.isArray(segments) || segments.length === 0) return undefined;
  const read = segments.map((segment: unknown) => {
    const s = (segment ?? {}) as { start?: unknown; end?: unknown; text?: unknown };
    return { start: seconds(s.start), end: seconds(s.end), text: typeof s.text === 'string' ? s.text.trim() : '' };
  });
  return read.map((segment, i) => {
    const start = segment.start ?? 0;
    const end = segment.end ?? read[i + 1]?.start ?? duration ?? start;
    // A cue's text is one block: a blank line would end it early.
    return { start, end: Math.max(start, end), text: segment.text.replace(/\n\s*\n/g, '\n') };
  });
}

function seconds(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** `HH:MM:SS,mmm` (SubRip) or `HH:MM:SS.mmm` (WebVTT). */
function timestamp(value: number, separator: ',' | '.'): string {
  const ms = Math.round(value * 1000);
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor(ms / 60_000) % 60)}:${pad(Math.floor(ms / 1000) % 60)}${separator}${pad(ms % 1000, 3)}`;
}
