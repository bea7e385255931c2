import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { performance } from 'node:perf_hooks';
import { guardedLookup, hostOf, parseTargetUrl, refusedAddress, TARGET_NOT_ALLOWED, TargetRefused, type TargetPolicy } from './target-address.ts';

/** What one attempt came to. */
export interface AttemptResult {
  ok: boolean;
  /** The receiver's status; null when none came. */
  status: number | null;
  /** Why it failed, in words for the admin; null when it succeeded. */
  error: string | null;
  durationMs: number;
}

const USER_AGENT = 'ModelDeploymentService-Webhooks/1.0';
/** The most of a receiver's answer body read (and dropped) before the connection is closed. */
const ANSWER_BODY_LIMIT = 64 * 1024;

/**
 * POSTs one signed webhook body: a fresh connection to an address checked at connection time
 * (`guardedLookup`; an IP literal is checked here), a timeout over the whole exchange, redirects
 * not followed (a 3xx is a failure), success on 2xx. Never throws.
 */
export async function postWebhook(
  target: string,
  headers: Record<string, string>,
  body: string,
  options: { timeoutMs: number; policy: TargetPolicy },
): Promise<AttemptResult> {
  const started = performance.now();
  const done = (status: number | null, error: string | null): AttemptResult => ({
    ok: error === null,
    status,
    error,
    durationMs: Math.max(0, Math.round(performance.now() - started)),
  });
  let url: URL;
  try {
    url = parseTargetUrl(target, options.policy);
    const literal = hostOf(url);
    const refused = isIP(literal) && !options.policy.allowPrivate ? refusedAddress(literal) : undefined;
    if (refused) throw new TargetRefused(TARGET_NOT_ALLOWED, { cause: `${literal} is ${refused}` });
  } catch (error) {
    return done(null, `Refused target: ${error instanceof Error ? error.message : String(error)}.`);
  }
  return new Promise<AttemptResult>((resolve) => {
    let settled = false;
    const finish = (status: number | null, error: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request.destroy();
      resolve(done(status, error));
    };
    const client = url.protocol === 'https:' ? https : http;
    const request = client.request(
      url,
      {
        method: 'POST',
        agent: false,
        lookup: guardedLookup(options.policy) as never,
        headers: { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'user-agent': USER_AGENT },
      },
      (response) => {
        const status = response.statusCode ?? 0;
        let read = 0;
        response.on('data', (chunk: Buffer) => {
          read += chunk.length;
          if (read > ANSWER_BODY_LIMIT) response.destroy();
        });
        const outcome = () =>
          status >= 200 && status < 300
            ? finish(status, null)
            : finish(status, status >= 300 && status < 400 ? `The receiver answered ${status} (redirects are not followed).` : `The receiver answered ${status}.`);
        response.on('end', outcome);
        response.on('close', outcome);
        response.on('error', outcome);
      },
    );
    const timer = setTimeout(() => finish(null, `No answer within ${options.timeoutMs / 1000} s.`), options.timeoutMs);
    request.on('error', (error: NodeJS.ErrnoException) => {
      if (error instanceof TargetRefused || error.code === 'ETARGETREFUSED') finish(null, `Refused target: ${error.message}.`);
      else finish(null, `Could not deliver: ${error.code ?? error.message}.`);
    });
    request.end(body);
  });
}
