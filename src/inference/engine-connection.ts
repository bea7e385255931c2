import http, { type ClientRequest } from 'node:http';
import https from 'node:https';

/**
 * The relay's connections to engines: node:http on keep-alive agents shared by every request (not
 * got, which costs a third of the proxy's CPU per request: docs/performance.md, Benchmark). Idle sockets are
 * closed after 4 s, before the 5 s keep-alive of uvicorn (Xinference) and of Node servers, so a
 * request is not written on a socket the engine is closing.
 */
const agentOptions = { keepAlive: true, timeout: 4_000, scheduling: 'lifo' as const };

/** Where an engine's base URL points, parsed once per endpoint rather than per request. */
interface Origin {
  secure: boolean;
  hostname: string;
  port: string;
  /** The base URL's own path, without its trailing slash. */
  prefix: string;
  /** The Host header: the host name (bracketed for IPv6) and a port other than the scheme's. */
  host: string;
}

export class EngineConnections {
  readonly #http = new http.Agent(agentOptions);
  readonly #https = new https.Agent(agentOptions);
  readonly #origins = new Map<string, Origin>();
  readonly #connectTimeoutMs: number;

  constructor(connectTimeoutMs: number) {
    this.#connectTimeoutMs = connectTimeoutMs;
  }

  /**
   * Starts a POST to `path` of the engine at `endpoint`; the caller writes the body and ends it.
   * A new connection the engine does not accept within the connect timeout fails the request with
   * an `ETIMEDOUT` error; a reused one is not timed.
   */
  post(endpoint: string, path: string, headers: Readonly<Record<string, string | number>>): ClientRequest {
    const origin = this.#origin(endpoint);
    // As a flat list, with the Host header node:http adds itself to an object of headers: each is
    // still checked as it is written, without the setHeader and getHeader calls of an object's.
    const list: string[] = ['Host', origin.host];
    for (const name in headers) list.push(name, String(headers[name]));
    const request = (origin.secure ? https : http).request({
      method: 'POST',
      hostname: origin.hostname,
      port: origin.port,
      path: origin.prefix + path,
      headers: list,
      agent: origin.secure ? this.#https : this.#http,
    });
    request.once('socket', (socket) => {
      if (!socket.connecting) return;
      const timer = setTimeout(() => request.destroy(Object.assign(new Error('the engine did not accept the connection in time'), { code: 'ETIMEDOUT' })), this.#connectTimeoutMs);
      const clear = () => clearTimeout(timer);
      socket.once('connect', clear);
      socket.once('close', clear);
    });
    return request;
  }

  #origin(endpoint: string): Origin {
    let origin = this.#origins.get(endpoint);
    if (!origin) {
      const url = new URL(endpoint);
      origin = {
        secure: url.protocol === 'https:',
        // A bracketed IPv6 literal is passed to the socket without its brackets.
        hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'),
        port: url.port || (url.protocol === 'https:' ? '443' : '80'),
        prefix: url.pathname.replace(/\/+$/, ''),
        host: url.host,
      };
      this.#origins.set(endpoint, origin);
    }
    return origin;
  }
}
