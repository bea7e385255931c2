import { createParser } from 'eventsource-parser';
import type { components } from '../../generated/api.d.ts';
import type { Browser } from './browser.ts';
import { checkResponse } from './contract.ts';
import { waitUntil } from './net.ts';

type DeploymentEvent = components['schemas']['DeploymentEvent'];
type DeploymentEventStreamEnd = components['schemas']['DeploymentEventStreamEnd'];
export const EVENTS_PATH = '/api/v1/model-deployments/{deployment_id}/events';

/** A server-sent event stream read with eventsource-parser over the browser's fetch (its cookies). */
export class StreamReader {
  readonly events: Array<{ id: string | undefined; event: string | undefined; data: DeploymentEvent }> = [];
  readonly comments: string[] = [];
  retry: number | undefined;
  /** The stream's `end` event, once it came. */
  end: { id: string | undefined; data: DeploymentEventStreamEnd } | undefined;
  /** Resolves with how the stream ended: `closed` by the server, or `aborted` by the test. */
  ended: Promise<'closed' | 'aborted'> = Promise.resolve('aborted');
  readonly #abort = new AbortController();

  static async open(browser: Browser, deploymentId: string, headers: Record<string, string> = {}): Promise<{ response: Response; reader: StreamReader }> {
    const reader = new StreamReader();
    const response = await browser.fetch(EVENTS_PATH.replace('{deployment_id}', deploymentId), { headers, signal: reader.#abort.signal });
    await checkResponse('GET', EVENTS_PATH, response);
    if (response.status === 200) reader.ended = reader.#read(response);
    return { response, reader };
  }

  async #read(response: Response): Promise<'closed' | 'aborted'> {
    const parser = createParser({
      onEvent: (event) => {
        if (this.end) throw new Error(`an event after the end: ${event.data}`);
        if (event.event === 'end') this.end = { id: event.id, data: JSON.parse(event.data) as DeploymentEventStreamEnd };
        else this.events.push({ id: event.id, event: event.event, data: JSON.parse(event.data) as DeploymentEvent });
      },
      onComment: (comment) => this.comments.push(comment),
      onRetry: (retry) => (this.retry = retry),
    });
    const decoder = new TextDecoder();
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) parser.feed(decoder.decode(chunk, { stream: true }));
      return 'closed';
    } catch {
      // Closed by the test.
      return 'aborted';
    }
  }

  /** Waits for the server to close the stream. */
  async closedByServer(what: string, timeoutMs = 10_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timed out'>((resolve) => (timer = setTimeout(() => resolve('timed out'), timeoutMs)));
    const how = await Promise.race([this.ended, timeout]);
    clearTimeout(timer);
    if (how !== 'closed') throw new Error(`${what}: the stream was ${how}; got ${JSON.stringify(this.events.map((e) => [e.id, e.data.type, e.data.to_status]))}`);
  }

  statuses(): string[] {
    return this.events.filter((e) => e.data.type === 'deployment.status_changed').map((e) => e.data.to_status);
  }

  async until(probe: (events: DeploymentEvent[]) => boolean, what: string, timeoutMs?: number): Promise<void> {
    await waitUntil(async () => probe(this.events.map((e) => e.data)), () => `${what}; got ${JSON.stringify(this.events.map((e) => [e.id, e.data.type, e.data.to_status, e.data.progress]))}`, timeoutMs);
  }

  close(): void {
    this.#abort.abort();
  }
}

