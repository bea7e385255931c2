import { pino, type DestinationStream, type Logger } from 'pino';

/**
 * Structured JSON logs, to stdout unless given a destination. Secrets never reach them: credentials
 * are redacted wherever they appear.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = {
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
  };
  return destination ? pino(options, destination) : pino(options);
}
