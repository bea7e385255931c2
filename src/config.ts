import { z } from 'zod';

/**
 * Every setting of the service, read from the environment once at start-up.
 * A bad value fails fast with a message naming the variable.
 */
const booleanFlag = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'])
  .transform((value) => ['true', '1', 'yes', 'on'].includes(value));

const schema = z.object({
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  ROLE: z.enum(['api', 'worker', 'all']).default('all'),
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  PUBLIC_URL: z.url().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  DATABASE_URL: z.url().optional(),
  DATABASE_POOL_MAX: z.coerce.number().int().min(1).max(200).default(10),
  DATA_DIR: z.string().min(1).default('.data'),
  EMBEDDED_PG_PORT: z.coerce.number().int().min(1).max(65535).default(54329),
  SESSION_COOKIE_NAME: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'must be a valid cookie name')
    .default('session'),
  SESSION_COOKIE_SECURE: booleanFlag.optional(),
  SESSION_COOKIE_SAMESITE: z.enum(['lax', 'strict', 'none']).default('lax'),
  ALLOWED_ORIGINS: z.string().optional(),
  RESPONSE_VALIDATION: booleanFlag.optional(),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).default(15_000),
});

export interface Config {
  env: 'development' | 'test' | 'production';
  role: 'api' | 'worker' | 'all';
  host: string;
  port: number;
  publicUrl: string;
  logLevel: string;
  /** The Postgres to use; undefined means "start the embedded one". */
  databaseUrl: string | undefined;
  databasePoolMax: number;
  dataDir: string;
  embeddedPgPort: number;
  session: { cookieName: string; secure: boolean; sameSite: 'lax' | 'strict' | 'none' };
  allowedOrigins: string[];
  /** Validate every response against the OpenAPI document (on outside production). */
  responseValidation: boolean;
  shutdownTimeoutMs: number;
}

export class ConfigError extends Error {}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = schema.safeParse(
    Object.fromEntries(Object.entries(env).filter(([, value]) => value !== '')),
  );
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  const e = parsed.data;
  const publicUrl = (e.PUBLIC_URL ?? `http://localhost:${e.PORT}`).replace(/\/+$/, '');
  const sameSite = e.SESSION_COOKIE_SAMESITE;
  const secure = e.SESSION_COOKIE_SECURE ?? e.NODE_ENV === 'production';
  if (sameSite === 'none' && !secure) {
    throw new ConfigError('Invalid configuration:\n  SESSION_COOKIE_SAMESITE: "none" requires SESSION_COOKIE_SECURE=true');
  }
  return {
    env: e.NODE_ENV,
    role: e.ROLE,
    host: e.HOST,
    port: e.PORT,
    publicUrl,
    logLevel: e.LOG_LEVEL,
    databaseUrl: e.DATABASE_URL,
    databasePoolMax: e.DATABASE_POOL_MAX,
    dataDir: e.DATA_DIR,
    embeddedPgPort: e.EMBEDDED_PG_PORT,
    session: { cookieName: e.SESSION_COOKIE_NAME, secure, sameSite },
    allowedOrigins: parseOrigins(e.ALLOWED_ORIGINS, publicUrl),
    responseValidation: e.RESPONSE_VALIDATION ?? e.NODE_ENV !== 'production',
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
  };
}

function parseOrigins(list: string | undefined, publicUrl: string): string[] {
  const origins = (list ?? publicUrl).split(',').map((origin) => origin.trim()).filter(Boolean);
  for (const origin of origins) {
    if (!URL.canParse(origin)) {
      throw new ConfigError(`Invalid configuration:\n  ALLOWED_ORIGINS: "${origin}" is not a URL`);
    }
  }
  return origins.map((origin) => new URL(origin).origin);
}
