import { describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import { toInferenceError, toProblem } from '../../src/http/problem.ts';

const invalid = (message: string, location = 'body/temperature') =>
  new AppError('VALIDATION_FAILED', 'The request is invalid; see `errors`.', { errors: [{ location, message }] });

describe('the Problem of a management route', () => {
  it('carries the code, its status and title, the detail and the request id', () => {
    expect(toProblem(new AppError('EMAIL_TAKEN', 'An account with this email already exists.'), 'req-1')).toEqual({
      type: 'https://docs.model-deployment.example/errors/email-taken',
      title: 'Email Taken',
      status: 409,
      detail: 'An account with this email already exists.',
      code: 'EMAIL_TAKEN',
      request_id: 'req-1',
    });
  });

  it('lists the validation issues when there are some, and only then', () => {
    const problem = toProblem(invalid('must be <= 2'), 'req-2');
    expect(problem).toMatchObject({ status: 422, code: 'VALIDATION_FAILED', errors: [{ location: 'body/temperature', message: 'must be <= 2' }] });
    expect(toProblem(new AppError('NOT_FOUND', 'gone'), 'req-3')).not.toHaveProperty('errors');
  });
});

describe('the hosted-inference error of an inference route', () => {
  it('answers a client mistake with 400 invalid_request_error, naming the parameter without its body/ prefix', () => {
    expect(toInferenceError(invalid('must be <= 2'))).toEqual({
      error: { message: 'The request is invalid; see `errors`.', type: 'invalid_request_error', code: 'invalid_parameter', param: 'temperature' },
    });
  });

  it('says missing_required_parameter when the first issue is a missing field', () => {
    expect(toInferenceError(invalid('messages is required', 'body/messages')).error).toMatchObject({ code: 'missing_required_parameter', param: 'messages' });
  });

  it.each([
    ['MALFORMED_REQUEST', 'invalid_json', 'invalid_request_error'],
    ['PAYLOAD_TOO_LARGE', 'request_too_large', 'invalid_request_error'],
    ['NOT_IMPLEMENTED', 'not_implemented', 'server_error'],
    ['SERVICE_UNAVAILABLE', 'service_unavailable', 'server_error'],
  ] as const)('maps %s to the code %s of type %s', (code, inferenceCode, type) => {
    expect(toInferenceError(new AppError(code, 'x')).error).toEqual({ message: 'x', type, code: inferenceCode, param: null });
  });

  it.each([
    ['UNAUTHENTICATED', 'authentication_error'],
    ['FORBIDDEN', 'permission_error'],
    ['NOT_FOUND', 'not_found_error'],
    ['RATE_LIMITED', 'rate_limit_error'],
  ] as const)('gives %s the type %s', (code, type) => {
    expect(toInferenceError(new AppError(code, 'x')).error.type).toBe(type);
  });

  it('keeps the inference code and parameter a service chose', () => {
    const error = new AppError('UNAUTHENTICATED', 'The API key was revoked.', { inference: { code: 'api_key_revoked' } });
    expect(toInferenceError(error).error).toEqual({ message: 'The API key was revoked.', type: 'authentication_error', code: 'api_key_revoked', param: null });
    const scoped = new AppError('FORBIDDEN', 'not yours', { inference: { code: 'model_not_in_key_scope', param: 'model' } });
    expect(toInferenceError(scoped).error).toMatchObject({ code: 'model_not_in_key_scope', param: 'model' });
  });

  it('takes its type from the inference status a service chose, not from the code', () => {
    const error = new AppError('SERVICE_UNAVAILABLE', 'The engine did not answer in time.', { inference: { code: 'upstream_timeout', status: 504 } });
    expect(toInferenceError(error).error).toMatchObject({ type: 'server_error', code: 'upstream_timeout' });
    const tooMany = new AppError('UNAUTHENTICATED', 'slow down', { inference: { code: 'too_many_invalid_api_keys', status: 429 } });
    expect(toInferenceError(tooMany).error.type).toBe('rate_limit_error');
  });
});
