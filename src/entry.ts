import type { Logger } from 'pino';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { Lifecycle } from './lifecycle.ts';
import { createLogger } from './logger.ts';
import type { Runtime } from './runtime.ts';

/**
 * What the service's two entries share: `src/main.ts` (production, `npm start`) and `dev/main.ts`
 * (`make run`, which starts the local stand-ins first). Kept here so that both read settings, stop
 * on signals and report a failed start the same way, while production imports nothing of `dev/`.
 */

/**
 * Runs a composition root: `read` takes the settings (a bad one ends the process with its message,
 * no stack), then `start` registers each part in one lifecycle as it starts; SIGTERM/SIGINT (also
 * during start-up) stop them in reverse order.
 */
export async function runEntry<Settings extends { config: Config }>(
  read: (env: NodeJS.ProcessEnv) => Settings,
  start: (settings: Settings, log: Logger, lifecycle: Lifecycle) => Promise<void>,
): Promise<void> {
  let settings: Settings;
  try {
    settings = read(process.env);
  } catch (error) {
    process.stderr.write(`${error instanceof ConfigError ? error.message : `Start-up failed: ${String(error)}`}\n`);
    process.exit(1);
  }
  const log = createLogger(settings.config.logLevel);
  const lifecycle = new Lifecycle(log);
  let signalled = false;
  const shutdown = async (signal: string) => {
    if (signalled) return;
    signalled = true;
    log.info({ signal }, 'shutting down: finishing in-flight requests and jobs');
    await lifecycle.stop();
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  try {
    await start(settings, log, lifecycle);
  } catch (error) {
    // After a signal, start-up fails because its parts are being stopped: the shutdown ends the process.
    if (!signalled) {
      log.debug({ err: error }, 'start-up failed');
      await lifecycle.stop();
      process.stderr.write(`Start-up failed: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    }
  }
}

/** The production settings of the environment: what `src/main.ts` runs with. */
export function readConfig(env: NodeJS.ProcessEnv): { config: Config } {
  return { config: loadConfig(env) };
}

/**
 * The URLs printed once the API listens: the service's own, then `rows` (label, value) saying
 * where its database, email, payments and clusters are.
 */
export function printBanner(config: Config, runtime: Runtime, rows: Array<[label: string, value: string]>): void {
  const base = config.publicUrl;
  const lines: Array<[string, string]> = [
    ['API', base],
    ['Health', `${base}/healthz`],
    ['Swagger UI', `${base}/docs`],
    ['ReDoc', `${base}/redoc`],
    ['OpenAPI', `${base}/openapi.json`],
    ...(config.metrics && runtime.metricsPort !== undefined ? [['Metrics', `${listenerUrl(config.metrics.host, runtime.metricsPort)}/metrics`] as [string, string]] : []),
    ...rows,
  ];
  process.stdout.write(['', ...lines.map(([label, value]) => `  ${label.padEnd(14)}${value}`), '', ''].join('\n'));
}

/** `http://host:port` of a listener on `host` (one on every address is reached through loopback). */
function listenerUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}`;
}
