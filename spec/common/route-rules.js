// @ts-check
/**
 * The implementation of the decorators declared in route-rules.tsp: each writes one rule of an
 * operation as an OpenAPI extension, which the server's binding reads at start-up
 * (src/http/operations.ts). TypeSpec checks the arguments against the declarations.
 */
import { setExtension } from '@typespec/openapi';

/** @typedef {import('@typespec/compiler').DecoratorContext} DecoratorContext */
/** @typedef {import('@typespec/compiler').Operation} Operation */
/** @typedef {import('@typespec/compiler').Interface} Interface */

/** @param {DecoratorContext} context @param {Operation} target @param {string | { value: { name: string } }} role */
function $requiredRole(context, target, role) {
  setExtension(context.program, target, 'x-required-role', typeof role === 'string' ? role : role.value.name);
}

/** @param {DecoratorContext} context @param {Operation | Interface} target @param {string} format */
function $errorFormat(context, target, format) {
  const operations = target.kind === 'Interface' ? [...target.operations.values()] : [target];
  for (const operation of operations) setExtension(context.program, operation, 'x-error-format', format);
}

/** @param {DecoratorContext} context @param {Operation} target @param {number} bytes */
function $bodyLimit(context, target, bytes) {
  setExtension(context.program, target, 'x-body-limit', bytes);
}

/** @param {DecoratorContext} context @param {Operation} target */
function $csrfExempt(context, target) {
  setExtension(context.program, target, 'x-csrf-exempt', true);
}

/** @param {DecoratorContext} context @param {Operation} target @param {string} since @param {string} sunset */
function $deprecation(context, target, since, sunset) {
  for (const [name, date] of [['since', since], ['sunset', sunset]]) {
    if (!/^\d{4}-\d{2}-\d{2}$/.test(date) || Number.isNaN(Date.parse(date))) {
      context.program.reportDiagnostic({ code: 'invalid-deprecation', severity: 'error', message: `@deprecation ${name} must be a date, YYYY-MM-DD: ${date}`, target });
    }
  }
  if (since >= sunset) context.program.reportDiagnostic({ code: 'invalid-deprecation', severity: 'error', message: '@deprecation: the sunset must come after since', target });
  setExtension(context.program, target, 'x-deprecation', { since, sunset });
}

export const $decorators = {
  ModelDeployment: { requiredRole: $requiredRole, errorFormat: $errorFormat, bodyLimit: $bodyLimit, csrfExempt: $csrfExempt, deprecation: $deprecation },
};
