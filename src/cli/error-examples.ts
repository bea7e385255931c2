/**
 * Step of the normalizer (normalize-openapi.ts): every error response of every operation says which
 * codes it carries (`x-error-codes`, the ones its description names) and has one example per code,
 * built by the server's own mappers, so a mock answers `Prefer: code=409` with a body a client can
 * assert on. A response that names no code stops `make generate`. The rules:
 * docs/api-for-sdk-teams.md, Mockable errors.
 */
import { readFileSync } from 'node:fs';
import { AppError, type ErrorCode, type InferenceErrorCode } from '../errors.ts';
import { inferenceStatus, toInferenceError, toProblem } from '../http/problem.ts';

type Schema = Record<string, unknown>;
interface Operation {
  operationId?: string;
  parameters?: Array<{ name?: string; in?: string }>;
  requestBody?: unknown;
  responses?: Record<string, Response>;
  'x-error-format'?: string;
}
interface Response {
  description?: string;
  content?: Record<string, Schema>;
  'x-error-codes'?: string[];
}

const ERRORS_SPEC = new URL('../../spec/common/errors.tsp', import.meta.url);
/** The request id of every example. */
export const REQUEST_ID = 'req_01JD3Q8Z7N4V2X5B6C7D8E9F0G';
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** The members of `enum <name>` in spec/common/errors.tsp with their one-line doc comments, in order. */
export function enumDocs(name: string, source = readFileSync(ERRORS_SPEC, 'utf8')): Map<string, string> {
  const body = new RegExp(`enum ${name} \\{([^}]*)\\}`).exec(source)?.[1];
  if (!body) throw new Error(`enum ${name} not found in ${ERRORS_SPEC.pathname}`);
  return new Map([...body.matchAll(/\/\*\* (.+?) \*\/\s+(\w+),/g)].map(([, doc, member]) => [member as string, doc as string]));
}

/** Where a sample validation problem points: the body, or the operation's first parameter. */
function sampleLocation(operation: Operation): string {
  const parameter = operation.parameters?.find((p) => p.in === 'path' || p.in === 'query');
  return operation.requestBody || !parameter ? 'body' : `${parameter.in}/${parameter.name}`;
}

const MODEL_PARAM: ReadonlySet<string> = new Set(['model_ambiguous', 'model_not_found', 'model_not_in_key_scope', 'deployment_stopped']);
const PARAM_OF: Record<string, string> = { unsupported_parameter: 'logit_bias', unsupported_value: 'n', missing_required_parameter: 'model', invalid_parameter: 'messages' };

/** The HTTP statuses other responses of the operation name; `default` stands for the rest. */
const numericStatuses = (operation: Operation) => Object.keys(operation.responses ?? {}).filter((status) => /^\d{3}$/.test(status));

/** The CSRF check (and the Origin check) runs on state-changing methods only. */
const CSRF_CODES: ReadonlySet<string> = new Set(['CSRF_FAILED', 'csrf_failed']);
const possibleOn = (method: string) => (code: string) => method !== 'get' || !CSRF_CODES.has(code);

function problemExamples(operation: Operation, status: string, named: string[], docs: Map<string, string>) {
  const listed = numericStatuses(operation);
  const codes = named.filter((code): code is ErrorCode => {
    if (!docs.has(code)) return false;
    const own = String(new AppError(code as ErrorCode, '').status);
    return status === 'default' ? !listed.includes(own) : own === status;
  });
  return codes.map((code) => {
    const errors = code === 'VALIDATION_FAILED' ? [{ location: sampleLocation(operation), message: 'is invalid' }] : undefined;
    const error = new AppError(code, docs.get(code) ?? code, { errors });
    return { code, summary: `${error.status} ${code}`, value: toProblem(error, REQUEST_ID) };
  });
}

function inferenceExamples(status: string, named: string[], docs: Map<string, string>) {
  const httpStatus = status === 'default' ? 500 : Number(status);
  return named
    .filter((code): code is InferenceErrorCode => docs.has(code))
    .map((code) => {
      const param = MODEL_PARAM.has(code) ? 'model' : PARAM_OF[code];
      const error = new AppError('INTERNAL_ERROR', docs.get(code) ?? code, { inference: { code, status: httpStatus, ...(param ? { param } : {}) } });
      return { code, summary: `${inferenceStatus(error)} ${code}`, value: toInferenceError(error) };
    });
}

export function withErrorExamples(document: Schema): Schema {
  const problemDocs = enumDocs('ErrorCode');
  const inferenceDocs = enumDocs('InferenceErrorCode');
  const faults: string[] = [];
  const paths = (document.paths ?? {}) as Record<string, Record<string, Operation | undefined>>;
  for (const [path, item] of Object.entries(paths)) {
    for (const method of METHODS) {
      const operation = item[method];
      for (const [status, response] of Object.entries(operation?.responses ?? {})) {
        const media = response.content?.['application/json'];
        if (!operation || /^[23]/.test(status) || !media) continue;
        const named = [...new Set([...(response.description ?? '').matchAll(/`(\w+)`/g)].map((match) => match[1] as string))].filter(possibleOn(method));
        const examples =
          operation['x-error-format'] === 'inference' ? inferenceExamples(status, named, inferenceDocs) : problemExamples(operation, status, named, problemDocs);
        if (!examples.length) {
          faults.push(`${method.toUpperCase()} ${path} ${status}: its description names no error code of that status`);
          continue;
        }
        response['x-error-codes'] = examples.map((example) => example.code);
        delete media.example;
        media.examples = Object.fromEntries(examples.map(({ code, summary, value }) => [code, { summary, value }]));
      }
    }
  }
  if (faults.length) throw new Error(`Error responses without a documented code:\n${faults.join('\n')}`);
  return document;
}
