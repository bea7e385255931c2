import { once } from 'node:events';
import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { LOCAL_CLUSTER_NAME } from '../../dev/local-cluster.ts';
import type { TestApp } from './app.ts';

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The first 64 KiB of the body. */
  body: Buffer;
  /** All bytes of the body. */
  bytes: number;
}

/** What the engine does for one route instead of passing the request on. */
export type EngineBehaviour = (req: IncomingMessage, res: ServerResponse) => void;

const KEPT = 64 * 1024;

/**
 * An engine on loopback in front of the cluster simulator: it passes every request through to the
 * simulator unless a test gave the route a behaviour (an error body, a stall, another media type),
 * and records what reached the engine's OpenAI routes. Register it as the cluster's endpoint.
 */
export class EngineStub {
  readonly recorded: RecordedRequest[] = [];
  readonly #behaviours = new Map<string, EngineBehaviour>();
  readonly #sockets = new Set<Socket>();
  readonly #upstream: URL;
  #server!: Server;
  url = '';

  private constructor(upstream: string) {
    this.#upstream = new URL(upstream);
  }

  static async start(upstream: string): Promise<EngineStub> {
    const stub = new EngineStub(upstream);
    stub.#server = createServer((req, res) => stub.#handle(req, res));
    stub.#server.on('connection', (socket: Socket) => {
      stub.#sockets.add(socket);
      socket.once('close', () => stub.#sockets.delete(socket));
    });
    stub.#server.listen(0, '127.0.0.1');
    await once(stub.#server, 'listening');
    stub.url = `http://127.0.0.1:${(stub.#server.address() as AddressInfo).port}`;
    return stub;
  }

  /**
   * A stub in front of the app's simulated cluster, made the cluster's endpoint as an operator
   * moves a cluster: registered again (`cluster register`), its credentials checked through the stub.
   */
  static async inFrontOf(app: Pick<TestApp, 'simulator' | 'container'>): Promise<EngineStub> {
    const credentials = app.simulator?.credentials;
    if (!app.simulator || !credentials) throw new Error('the app runs no simulated cluster with authentication');
    const stub = await EngineStub.start(app.simulator.url);
    await app.container.clusters.register({
      name: LOCAL_CLUSTER_NAME,
      provider: 'local',
      region: 'simulator',
      endpoint: stub.url,
      auth: { mode: 'advanced', username: credentials.adminUser, password: credentials.adminPassword, apiKey: credentials.apiKey },
    });
    return stub;
  }

  /** `route` is `METHOD /path`; undefined passes the route through again. */
  behave(route: string, behaviour: EngineBehaviour | undefined): void {
    if (behaviour) this.#behaviours.set(route, behaviour);
    else this.#behaviours.delete(route);
  }

  /** Requests that reached `route` (`METHOD /path`). */
  requestsTo(route: string): RecordedRequest[] {
    return this.recorded.filter((r) => `${r.method} ${r.path}` === route);
  }

  /** Connections the engine has open (the proxy's, kept alive or not). */
  get openSockets(): number {
    return this.#sockets.size;
  }

  async stop(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const route = `${req.method} ${path}`;
    if (path.startsWith('/v1/') && !path.startsWith('/v1/models') && !path.startsWith('/v1/cluster') && !path.startsWith('/v1/workers')) {
      const entry: RecordedRequest = { method: req.method ?? '', path, headers: req.headers, body: Buffer.alloc(0), bytes: 0 };
      this.recorded.push(entry);
      req.on('data', (chunk: Buffer) => {
        entry.bytes += chunk.length;
        if (entry.body.length < KEPT) entry.body = Buffer.concat([entry.body, chunk.subarray(0, KEPT - entry.body.length)]);
      });
    }
    const behaviour = this.#behaviours.get(route);
    if (behaviour) {
      behaviour(req, res);
      return;
    }
    const upstream = request(
      { host: this.#upstream.hostname, port: this.#upstream.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  }
}
