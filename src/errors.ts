import type { components } from '../generated/api.d.ts';

export type ErrorCode = components['schemas']['ErrorCode'];
export type ValidationIssue = components['schemas']['ValidationIssue'];
export type InferenceErrorCode = components['schemas']['InferenceErrorCode'];
export type InferenceErrorType = components['schemas']['InferenceErrorType'];

/**
 * The hosted-inference codes the service answers: the document's, and `unknown_url`, OpenAI's
 * answer to a URL under `/v1/` that no operation has (the gateway's fallback), which belongs to no
 * operation of the document and so not to its enum (spec/main.tsp describes it).
 */
export type InferenceAnswerCode = InferenceErrorCode | 'unknown_url';

/** The HTTP status and title that go with each error code. */
const CODES = {
  MALFORMED_REQUEST: [400, 'Malformed Request'],
  INVALID_RESET_TOKEN: [400, 'Invalid Reset Token'],
  INVALID_VERIFICATION_TOKEN: [400, 'Invalid Verification Token'],
  SSO_FAILED: [400, 'Single Sign-On Failed'],
  INVALID_SIGNATURE: [400, 'Invalid Signature'],
  UNAUTHENTICATED: [401, 'Unauthenticated'],
  INVALID_CREDENTIALS: [401, 'Invalid Credentials'],
  AUTHORIZATION_HEADER_NOT_ALLOWED: [401, 'Authorization Header Not Allowed'],
  FORBIDDEN: [403, 'Forbidden'],
  CSRF_FAILED: [403, 'CSRF Check Failed'],
  INVITATION_EMAIL_MISMATCH: [403, 'Invitation Email Mismatch'],
  EMAIL_NOT_VERIFIED: [403, 'Email Not Verified'],
  NOT_FOUND: [404, 'Not Found'],
  INVITATION_NOT_FOUND: [404, 'Invitation Not Found'],
  SSO_NOT_CONFIGURED: [404, 'Single Sign-On Not Configured'],
  METHOD_NOT_ALLOWED: [405, 'Method Not Allowed'],
  EMAIL_TAKEN: [409, 'Email Taken'],
  PAYMENT_SETUP_INCOMPLETE: [409, 'Payment Setup Incomplete'],
  ACTIVE_DEPLOYMENT_LIMIT_REACHED: [409, 'Active Deployment Limit Reached'],
  SPENDING_LIMIT_REACHED: [409, 'Spending Limit Reached'],
  DEPLOYMENT_DELETION_PENDING: [409, 'Deployment Deletion Pending'],
  API_KEY_REVOKED: [409, 'API Key Revoked'],
  INVITATION_NOT_PENDING: [409, 'Invitation Not Pending'],
  INVITATION_ALREADY_PENDING: [409, 'Invitation Already Pending'],
  ALREADY_A_MEMBER: [409, 'Already a Member'],
  EMAIL_ALREADY_VERIFIED: [409, 'Email Already Verified'],
  SSO_LINK_REQUIRES_SIGN_IN: [409, 'Single Sign-On Link Requires Sign-In'],
  SSO_ACCOUNT_ALREADY_LINKED: [409, 'Single Sign-On Account Already Linked'],
  LAST_SUPER_ADMIN: [409, 'Last Super Admin'],
  INVITATION_EXPIRED: [410, 'Invitation Expired'],
  PAYLOAD_TOO_LARGE: [413, 'Payload Too Large'],
  VALIDATION_FAILED: [422, 'Validation Failed'],
  MODEL_NOT_DEPLOYABLE: [422, 'Model Not Deployable'],
  RATE_LIMITED: [429, 'Too Many Requests'],
  INTERNAL_ERROR: [500, 'Internal Server Error'],
  NOT_IMPLEMENTED: [501, 'Not Implemented'],
  PAYMENT_PROCESSOR_ERROR: [502, 'Payment Processor Error'],
  SERVICE_UNAVAILABLE: [503, 'Service Unavailable'],
} as const satisfies Record<ErrorCode, readonly [number, string]>;

export interface AppErrorOptions {
  errors?: ValidationIssue[];
  /** Extra response headers, e.g. `Retry-After` or `Allow`. */
  headers?: Record<string, string>;
  cause?: unknown;
  /**
   * On inference routes: the hosted-inference `code` (e.g. `api_key_revoked`) and `param`, and a
   * status other than the code's, or a `type` other than the status's.
   */
  inference?: { code: InferenceAnswerCode; param?: string; status?: number; type?: InferenceErrorType };
}

/**
 * The one error type of the service. Services throw it with a stable code; the HTTP layer maps
 * it to the wire (a Problem body on management routes, the hosted-inference shape on inference routes).
 */
export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly title: string;
  readonly errors: ValidationIssue[] | undefined;
  readonly headers: Record<string, string>;
  readonly inference: AppErrorOptions['inference'];

  constructor(code: ErrorCode, detail: string, options: AppErrorOptions = {}) {
    super(detail, { cause: options.cause });
    this.name = 'AppError';
    this.code = code;
    [this.status, this.title] = CODES[code];
    this.errors = options.errors;
    this.headers = options.headers ?? {};
    this.inference = options.inference;
  }
}

export function isAppError(error: unknown): error is AppError {
  return error instanceof AppError;
}
