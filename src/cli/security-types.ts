/**
 * Step of `make generate` after the normalizer: writes, for every operation of the document, the
 * security schemes it accepts as a TypeScript type, so each handler's `auth` is typed from its
 * operation's security requirement (src/http/types.ts). openapi-typescript leaves security out.
 *
 * Usage: node src/cli/security-types.ts generated/openapi.json generated/security.d.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';

type Requirement = Record<string, string[]>;
interface Document {
  security?: Requirement[];
  paths?: Record<string, Record<string, { operationId?: string; security?: Requirement[] } | undefined>>;
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** The declaration file: one member per operationId, the union of the schemes it accepts; `none` stands for the empty requirement `{}` (no credential needed). */
export function securityTypes(document: Document): string {
  const members: string[] = [];
  for (const pathItem of Object.values(document.paths ?? {})) {
    for (const method of METHODS) {
      const operation = pathItem[method];
      if (!operation?.operationId) continue;
      const requirements = operation.security ?? document.security ?? [];
      const schemes = [...new Set(requirements.flatMap((requirement) => (Object.keys(requirement).length ? Object.keys(requirement) : ['none'])))].sort();
      members.push(`  ${JSON.stringify(operation.operationId)}: ${schemes.map((scheme) => JSON.stringify(scheme)).join(' | ') || '"none"'};`);
    }
  }
  return [
    '// Generated from openapi.json by src/cli/security-types.ts (make generate). Do not edit.',
    '',
    '/** The security schemes each operation accepts, any one of them; `none`: no credential needed. */',
    'export interface OperationSecurity {',
    ...members.sort(),
    '}',
    '',
  ].join('\n');
}

const [input, output] = process.argv.slice(2);
if (input && output) writeFileSync(output, securityTypes(JSON.parse(readFileSync(input, 'utf8')) as Document));
