import { Ajv, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { createParser } from 'eventsource-parser';
import { forJsonSchemaValidators, loadOpenApiDocument } from '../../src/openapi-document.ts';
import { foundViolations as violations, pendingChecks as pending } from './contract-checks.ts';

/**
 * The client side of the contract tier: every response a test receives through the typed client
 * (browser.ts) or the official openai client (inference-client.ts) is checked against the
 * operation's documented schema for its status and media type, errors included; the first `data:`
 * event of a streamed chat answer is checked against `ChatCompletionChunk`. The server checks its
 * own success answers too (RESPONSE_VALIDATION); this catches what it does not: errors raised
 * before or around a handler, and streams.
 */

interface MediaType {
  schema?: unknown;
}
interface Operation {
  operationId: string;
  responses: Record<string, { content?: Record<string, MediaType>; 'x-error-codes'?: string[] }>;
}

const document = forJsonSchemaValidators(loadOpenApiDocument()) as unknown as { paths: Record<string, Record<string, Operation>> };
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema(document, 'openapi.json');

const pointer = (...segments: string[]) => `openapi.json#/${segments.map((s) => s.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')}`;

const validators = new Map<string, ValidateFunction>();
function validatorFor(ref: string): ValidateFunction {
  let validate = validators.get(ref);
  if (!validate) {
    validate = ajv.compile({ $ref: ref });
    validators.set(ref, validate);
  }
  return validate;
}


/** Operations by path template, most literal first, to find the template of a concrete path. */
const templates = Object.keys(document.paths)
  .map((template) => ({
    template,
    pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`),
    parameters: (template.match(/\{/g) ?? []).length,
  }))
  .sort((a, b) => a.parameters - b.parameters);

/** The path template of the document that `pathname` matches, if any. */
export function templateOf(pathname: string): string | undefined {
  return templates.find(({ pattern }) => pattern.test(pathname))?.template;
}

export class ContractViolation extends Error {
  override name = 'ContractViolation';
}

/**
 * Checks `response` to `method` `template` against the document. Throws a ContractViolation for a
 * body (JSON) that breaks the documented schema, an undocumented status or media type; a stream's
 * first event is checked in the background and reported by `settleContractChecks`.
 */
export async function checkResponse(method: string, template: string, response: Response): Promise<void> {
  const operation = document.paths[template]?.[method.toLowerCase()];
  if (!operation) return; // Not an operation of the document (the 404 and 405 of unknown routes).
  const where = `${method.toUpperCase()} ${template} → ${response.status}`;
  const status = String(response.status);
  const documented = operation.responses[status] ?? operation.responses[`${status[0]}XX`] ?? operation.responses.default;
  const key = operation.responses[status] ? status : operation.responses[`${status[0]}XX`] ? `${status[0]}XX` : 'default';
  if (!documented) throw new ContractViolation(`${where}: the status is not documented`);

  const contentType = (response.headers.get('content-type') ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  if (!documented.content) {
    const text = response.body ? await response.clone().text() : '';
    if (text) throw new ContractViolation(`${where}: documented without a body, answered ${JSON.stringify(text.slice(0, 200))}`);
    return;
  }
  if (!contentType && (response.status === 204 || response.headers.get('content-length') === '0')) return;
  const media = documented.content[contentType];
  if (!media) {
    throw new ContractViolation(`${where}: answered ${contentType || 'no content type'}, documented ${Object.keys(documented.content).join(', ')}`);
  }

  const schema = pointer('paths', template, method.toLowerCase(), 'responses', key, 'content', contentType, 'schema');
  if (contentType === 'text/event-stream') {
    // The media's schema is each event's data (a chat stream: ChatCompletionChunk).
    watchFirstEvent(where, response.clone(), schema);
    return;
  }
  if (contentType !== 'application/json' && !contentType.endsWith('+json')) return;
  const text = await response.clone().text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ContractViolation(`${where}: the body is not JSON: ${JSON.stringify(text.slice(0, 200))}`);
  }
  const validate = validatorFor(schema);
  if (!validate(body)) {
    throw new ContractViolation(`${where}: the body does not match the document: ${ajv.errorsText(validate.errors)}\n${text.slice(0, 500)}`);
  }
  const codes = documented['x-error-codes'];
  const code = errorCodeOf(body);
  if (codes && !codes.includes(code ?? '')) {
    throw new ContractViolation(`${where}: the error code ${String(code)} is not one the document lists for it (x-error-codes: ${codes.join(', ')})`);
  }
}

/** The stable code of an error body: a Problem's `code`, an inference error's `error.code`. */
function errorCodeOf(body: unknown): string | undefined {
  const shaped = body as { code?: unknown; error?: { code?: unknown } };
  const code = shaped.error && typeof shaped.error === 'object' ? shaped.error.code : shaped.code;
  return typeof code === 'string' ? code : undefined;
}

/** Reads a copy of the stream up to its first `data:` event and checks it against the event schema. */
function watchFirstEvent(where: string, copy: Response, schema: string) {
  const check = (async () => {
    const reader = copy.body?.getReader();
    if (!reader) return;
    let first: string | undefined;
    const parser = createParser({ onEvent: (event) => (first ??= event.data) });
    const decoder = new TextDecoder();
    try {
      while (first === undefined) {
        const { done, value } = await reader.read();
        if (done) break;
        parser.feed(decoder.decode(value, { stream: true }));
      }
    } catch {
      return; // The client left (or the connection broke) before a first event: nothing to check.
    } finally {
      // Not awaited: a branch of a tee'd stream finishes cancelling only once the other branch (the
      // test's) is done too.
      reader.cancel().catch(() => undefined);
    }
    if (first === undefined) return;
    let event: unknown;
    try {
      event = JSON.parse(first);
    } catch {
      violations.push(new ContractViolation(`${where}: the first event is not JSON: ${first.slice(0, 200)}`));
      return;
    }
    const validate = validatorFor(schema);
    if (!validate(event)) {
      violations.push(new ContractViolation(`${where}: the first event does not match the document's event schema: ${ajv.errorsText(validate.errors)}\n${first.slice(0, 500)}`));
    }
  })();
  pending.add(check);
  void check.finally(() => pending.delete(check));
}

export { settleContractChecks } from './contract-checks.ts';

export type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/**
 * A fetch that checks every answer of an operation of the document, for clients other than the
 * typed one (the official openai client is given this one). `base` is the service's URL.
 */
export function contractFetch(base: string, inner: Fetch = fetch): Fetch {
  const prefix = new URL(base).pathname.replace(/\/$/, '');
  return async (input, init) => {
    const response = await inner(input, init);
    const url = new URL(input instanceof Request ? input.url : input);
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
    const template = templateOf(url.pathname.slice(prefix.length));
    if (template) await checkResponse(method, template, response);
    return response;
  };
}
