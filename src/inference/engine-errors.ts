import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import { AppError } from '../errors.ts';

/** How much of an engine's error body is read, and logged. */
export const ENGINE_ERROR_READ = 64 * 1024;
const ENGINE_ERROR_LOGGED = 2 * 1024;
const REASON_MAX = 300;

/**
 * The engine's refusal as the hosted-inference error the client gets. Engine text never reaches
 * the client, with one exception: the reason of a 400 or 422 (a validation error, e.g. "This
 * model's maximum context length is 4096 tokens…") when it passes `passesAllowlist`. Everything
 * else answers a fixed message per class, and the engine's body is logged with the request id
 * (Xinference's "model not found" lists every model uid on the cluster; tracebacks name files and
 * workers).
 */
export function engineError(status: number, headers: IncomingHttpHeaders, body: string, log: Logger): AppError {
  log.warn({ engine_status: status, engine_body: forTheLog(body) }, 'the engine refused an inference request');
  if (status === 503) {
    return new AppError('SERVICE_UNAVAILABLE', 'The model is busy or not ready yet; retry after Retry-After seconds.', {
      headers: { 'Retry-After': String(retryAfterSeconds(headers['retry-after'], 10)) },
      inference: { code: 'engine_overloaded', status: 503 },
    });
  }
  if (isKeyBan(status, body)) {
    // The (address, key) ban: the cluster's key, from the platform's address, for an hour
    // (`auth_service.py`: 5 uses of a disabled or expired key in 300 s). A refused credential.
    log.error({ engine_status: status, alert: 'cluster_key_banned' }, "the engine banned the cluster's inference API key from the platform's address");
    return upstreamFailure();
  }
  if (status === 429) {
    // Xinference answers 429 for a model's `request_limits` ("Rate limit reached…") and, on every
    // route, for an address it banned after invalid bearers: the platform's own address.
    const banned = /IP temporarily banned/i.test(body);
    if (banned) {
      log.error({ engine_status: status, alert: 'cluster_address_banned' }, "the engine banned the platform's address after invalid credentials");
    }
    return new AppError('RATE_LIMITED', 'The model is receiving too many requests; retry after Retry-After seconds.', {
      headers: { 'Retry-After': String(retryAfterSeconds(headers['retry-after'], banned ? 60 : 5)) },
      inference: { code: 'engine_rate_limited', status: 429 },
    });
  }
  if (status === 400 && /^Only \{.*\} support tool (calls|messages)$/s.test(validationReason(body) ?? '')) {
    // Xinference's refusal of tools to a family without a tool-call parser (`api/restful_api.py`,
    // `create_chat_completion`): it lists every family that has one, too long to pass on.
    return new AppError('VALIDATION_FAILED', 'The model cannot call tools on its serving engine (its family has no tool-call parser there); send the request without `tools`.', {
      inference: { code: 'unsupported_parameter', param: 'tools', status: 400 },
    });
  }
  if (status === 400 || status === 422) {
    const reason = validationReason(body);
    const message = reason && passesAllowlist(reason) ? `The model refused the request: ${reason}` : 'The model refused the request as invalid.';
    return new AppError('VALIDATION_FAILED', message, { inference: { code: 'engine_rejected_request', status: 400 } });
  }
  if (isModelAccessRefusal(status, body)) {
    log.error(
      { engine_status: status, alert: 'cluster_key_model_access' },
      "the engine refused the cluster's inference API key for this model only (the key is limited to some models): give it access to all models",
    );
  } else if (status === 401 || status === 403) {
    log.error({ engine_status: status }, "the engine refused the cluster's inference credential");
  }
  if (status >= 405 && status < 500) {
    return new AppError('VALIDATION_FAILED', 'The model refused the request as invalid.', { inference: { code: 'engine_rejected_request', status: 400 } });
  }
  // 5xx, 404 (the engine lost the model) and 401/403 (the cluster's credential): nothing the caller can fix.
  return upstreamFailure();
}

/**
 * Xinference's 403 for a key limited to some model uids or types, about the one model called
 * (`api/restful_api.py`, `_check_model_access`): the key is valid and the cluster stays usable.
 */
export function isModelAccessRefusal(status: number, body: string): boolean {
  return status === 403 && /^API key does not have access to model\b/.test(validationReason(body) ?? '');
}

/** Xinference's 429 for the (address, key) ban (`api/oauth2/advanced/auth_service.py`, `is_key_banned`). */
function isKeyBan(status: number, body: string): boolean {
  return status === 429 && /Too many failed attempts for this key/i.test(body);
}

/**
 * Whether the engine refused the cluster's inference key itself, so that every further call with
 * it is refused too: a 401, a 403 other than one model's, or the key's ban.
 */
export function refusesCredential(status: number, body: string): boolean {
  return status === 401 || (status === 403 && !isModelAccessRefusal(status, body)) || isKeyBan(status, body);
}

export function upstreamFailure(message = 'The model failed to answer.'): AppError {
  return new AppError('SERVICE_UNAVAILABLE', message, { inference: { code: 'upstream_error', status: 502 } });
}

export function upstreamTimeout(): AppError {
  return new AppError('SERVICE_UNAVAILABLE', 'The model did not answer in time.', { inference: { code: 'upstream_timeout', status: 504 } });
}

/** The engine's body, shortened, without the `input` that validation errors echo (the caller's prompt). */
function forTheLog(body: string): string {
  try {
    const parsed = JSON.parse(body) as { detail?: unknown };
    if (Array.isArray(parsed.detail)) {
      parsed.detail = parsed.detail.map((issue: unknown) => (issue && typeof issue === 'object' ? { ...issue, input: undefined } : issue));
      return JSON.stringify(parsed).slice(0, ENGINE_ERROR_LOGGED);
    }
  } catch {
    // Not JSON: the text as it came.
  }
  return body.slice(0, ENGINE_ERROR_LOGGED);
}

function retryAfterSeconds(value: string | string[] | undefined, fallback: number): number {
  const seconds = Number(Array.isArray(value) ? value[0] : value);
  return Number.isInteger(seconds) && seconds > 0 && seconds <= 3600 ? seconds : fallback;
}

/** The reason of a validation error, from the shapes engines answer with (FastAPI, vLLM, OpenAI). */
function validationReason(body: string): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return body.trim() || undefined;
  }
  if (!parsed || typeof parsed !== 'object') return undefined;
  const { detail, message, error } = parsed as { detail?: unknown; message?: unknown; error?: { message?: unknown } };
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    // Pydantic: [{loc: ['body', 'temperature'], msg: 'Input should be …', input: …}]; `input` is never used.
    return detail
      .slice(0, 3)
      .map((issue: { loc?: unknown; msg?: unknown }) => {
        const where = Array.isArray(issue.loc) ? issue.loc.filter((part) => part !== 'body').join('.') : '';
        return `${where ? `${where}: ` : ''}${String(issue.msg ?? 'is invalid')}`;
      })
      .join('; ');
  }
  if (typeof error?.message === 'string') return error.message;
  if (typeof message === 'string') return message;
  return undefined;
}

/** Printable text without slashes or backslashes (paths, URLs). */
const ALLOWED_CHARACTERS = /^[\p{L}\p{N} .,:;'"`()[\]{}<>=!?+\-*_%#&|~^]+$/u;
/** What engine text must never carry: model uids, ids, tracebacks, exceptions, hosts and addresses. */
const DENIED = [
  /\buids?\b/i,
  /\bdep-/i,
  /[0-9a-f]{12,}/i,
  /[0-9a-f]{8}-[0-9a-f]{4}-/i,
  /traceback|\bfile "|\bline \d/i,
  /\w(error|exception)\b/i,
  /worker|address|host|localhost|supervisor|actor/i,
  /\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}/,
  /:\d{2,5}\b/,
];

/** A short, single-line validation message that names nothing of the cluster. */
export function passesAllowlist(text: string): boolean {
  return text.length > 0 && text.length <= REASON_MAX && ALLOWED_CHARACTERS.test(text) && !DENIED.some((pattern) => pattern.test(text));
}
