/**
 * Stripe's error shape and status codes (https://docs.stripe.com/api/errors): the body is
 * `{"error": {"type", "code", "message", "param", "decline_code", "doc_url"}}`; 400 for invalid
 * requests, 401 for a missing or wrong key, 402 for a declined card, 404 for a missing object,
 * 409 for an idempotent request still running. The `stripe` SDK turns each `type` into its error class.
 */
export type StripeErrorType = 'invalid_request_error' | 'card_error' | 'idempotency_error' | 'api_error';

export class StripeApiError extends Error {
  readonly status: number;
  readonly type: StripeErrorType;
  readonly code: string | undefined;
  readonly param: string | undefined;
  readonly declineCode: string | undefined;

  constructor(status: number, type: StripeErrorType, message: string, extra: { code?: string; param?: string; declineCode?: string } = {}) {
    super(message);
    this.status = status;
    this.type = type;
    this.code = extra.code;
    this.param = extra.param;
    this.declineCode = extra.declineCode;
  }

  toBody(): { error: Record<string, string> } {
    const error: Record<string, string> = { type: this.type, message: this.message };
    if (this.code) {
      error.code = this.code;
      error.doc_url = `https://docs.stripe.com/error-codes/${this.code.replaceAll('_', '-')}`;
    }
    if (this.param) error.param = this.param;
    if (this.declineCode) error.decline_code = this.declineCode;
    return { error };
  }
}

export const invalidRequest = (message: string, extra: { code?: string; param?: string } = {}) =>
  new StripeApiError(400, 'invalid_request_error', message, extra);

/** `resource_missing`: "No such customer: 'cus_…'" (404). */
export const noSuch = (what: string, id: string, param = 'id') =>
  new StripeApiError(404, 'invalid_request_error', `No such ${what}: '${id}'`, { code: 'resource_missing', param });

export const missingParam = (param: string) => invalidRequest(`Missing required param: ${param}.`, { code: 'parameter_missing', param });

export const unknownParam = (param: string) => invalidRequest(`Received unknown parameter: ${param}`, { code: 'parameter_unknown', param });

export const invalidValue = (param: string, message: string) => invalidRequest(message, { code: 'parameter_invalid_empty', param });
