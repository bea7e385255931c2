import { AppError } from '../errors.ts';

/** The windows a metrics route names, and the steps its series may have. */
export type MetricsWindowName = '1h' | '24h' | '7d';
export type MetricsStep = '1m' | '5m' | '1h';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

export const WINDOW_MS: Readonly<Record<MetricsWindowName, number>> = { '1h': HOUR, '24h': DAY, '7d': 7 * DAY };
export const STEP_MS: Readonly<Record<MetricsStep, number>> = { '1m': MINUTE, '5m': 5 * MINUTE, '1h': HOUR };

/** How long minute rollups are kept (the pruning job deletes older ones): the longest range a query may ask for. */
export const METRICS_RETENTION_DAYS = 30;
const RETENTION_MS = METRICS_RETENTION_DAYS * DAY;

/**
 * The longest span each step may cover, so a series has at most a few hundred points: 1 minute up
 * to 6 hours (360 points), 5 minutes up to 48 hours (576), 1 hour up to the retention (720).
 */
export const STEP_MAX_SPAN_MS: Readonly<Record<MetricsStep, number>> = { '1m': 6 * HOUR, '5m': 48 * HOUR, '1h': RETENTION_MS };

const STEPS = Object.keys(STEP_MS) as MetricsStep[];

/** A metrics query as the route's parameters give it (validated by the document: enums and date-times). */
export interface MetricsQuery {
  window?: MetricsWindowName | undefined;
  start?: string | undefined;
  end?: string | undefined;
  step?: MetricsStep | undefined;
}

/** The range a series covers: [start, end), both on a multiple of the step, and its step. */
export interface MetricsRange {
  start: Date;
  end: Date;
  step: MetricsStep;
  stepMs: number;
}

const invalid = (location: string, message: string) =>
  new AppError('VALIDATION_FAILED', `The metrics query is invalid: ${location.slice('query/'.length)} ${message}.`, { errors: [{ location, message }] });

/**
 * The range a query asks for: a named window ending now (default `1h`), or `start` and `end`
 * (both, without `window`); the step the smallest the span allows unless one is asked for, which
 * must fit the span (`STEP_MAX_SPAN_MS`). Start is rounded down and end up to the step, so each
 * point of a series is one whole step. 422 `VALIDATION_FAILED` for anything else.
 */
export function metricsRange(query: MetricsQuery, now: Date): MetricsRange {
  const custom = query.start !== undefined || query.end !== undefined;
  if (custom && query.window !== undefined) throw invalid('query/window', 'must be absent when `start` and `end` are given');
  if (custom && (query.start === undefined || query.end === undefined)) {
    throw invalid(query.start === undefined ? 'query/start' : 'query/end', 'must be given with the other end of a custom range');
  }
  let fromMs: number;
  let toMs: number;
  if (custom) {
    fromMs = Date.parse(query.start as string);
    toMs = Date.parse(query.end as string);
    if (!(toMs > fromMs)) throw invalid('query/end', 'must be after `start`');
    if (toMs - fromMs > RETENTION_MS) throw invalid('query/start', `must be at most ${METRICS_RETENTION_DAYS} days before \`end\` (minutes are kept ${METRICS_RETENTION_DAYS} days)`);
  } else {
    toMs = now.getTime();
    fromMs = toMs - WINDOW_MS[query.window ?? '1h'];
  }
  const span = toMs - fromMs;
  const step = query.step ?? (STEPS.find((candidate) => span <= STEP_MAX_SPAN_MS[candidate]) as MetricsStep);
  if (span > STEP_MAX_SPAN_MS[step]) {
    const allowed = STEPS.filter((candidate) => span <= STEP_MAX_SPAN_MS[candidate]);
    throw invalid('query/step', `must be one of ${allowed.map((s) => `\`${s}\``).join(', ')} for this range (\`${step}\` covers at most ${STEP_MAX_SPAN_MS[step] / HOUR} hours)`);
  }
  const stepMs = STEP_MS[step];
  const start = Math.floor(fromMs / stepMs) * stepMs;
  const end = Math.max(Math.ceil(toMs / stepMs) * stepMs, start + stepMs);
  return { start: new Date(start), end: new Date(end), step, stepMs };
}
