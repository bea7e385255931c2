/**
 * The image's HEALTHCHECK (`node scripts/healthcheck.ts`, for Docker, Compose and Podman; Kubernetes
 * ignores it and uses the probes of deploy/kubernetes/). Exit 0 when healthy, 1 otherwise:
 *
 * - an API process (`ROLE` api or all) must answer `GET /healthz` on `PORT` with a 2xx;
 * - a worker has no HTTP API: it must answer `GET /metrics` on `METRICS_PORT` when that is set, and
 *   is otherwise judged only by being alive (the container stops when the process does).
 *
 * Run from the image's /app by Node 24's type stripping, with nothing but Node's own fetch.
 */
const role = process.env.ROLE ?? 'all';
const target =
  role === 'worker'
    ? process.env.METRICS_PORT
      ? { port: process.env.METRICS_PORT, path: '/metrics' }
      : undefined
    : { port: process.env.PORT ?? '8080', path: '/healthz' };

let healthy = true;
if (target) {
  try {
    const answer = await fetch(`http://127.0.0.1:${target.port}${target.path}`, { signal: AbortSignal.timeout(4_000) });
    healthy = answer.ok;
  } catch {
    healthy = false;
  }
}
process.exit(healthy ? 0 : 1);
