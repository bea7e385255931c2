import type { Logger } from 'pino';

type Stop = () => Promise<void> | void;

/** A part finished starting after the lifecycle began to stop (a signal during start-up); it was stopped again. */
export class StoppedDuringStart extends Error {
  constructor(part: string) {
    super(`${part} started while the process was stopping, and was stopped`);
  }
}

/**
 * The parts of a process that start and stop (database, job queue, HTTP server, local stand-ins).
 * Each part registers its stop as soon as it has started; `stop()` stops them in reverse order, the
 * last started first, each once, logging a failure and going on to the next. A part that finishes
 * starting after `stop()` was called (a signal during start-up) is stopped at once and its start
 * throws `StoppedDuringStart`, so whatever has started is stopped whenever the signal comes.
 */
export class Lifecycle {
  readonly #log: Logger;
  readonly #parts: Array<{ name: string; stop: Stop }> = [];
  #stopped: Promise<void> | undefined;

  constructor(log: Logger) {
    this.#log = log;
  }

  /** True once `stop()` was called. */
  get stopping(): boolean {
    return this.#stopped !== undefined;
  }

  /** Starts a part and registers its stop. */
  async start<T>(name: string, start: () => Promise<T>, stop: (part: T) => Promise<void> | void): Promise<T> {
    if (this.stopping) throw new StoppedDuringStart(name);
    const part = await start();
    await this.started(name, () => stop(part));
    return part;
  }

  /** Registers the stop of a part that has just started (one made without waiting, such as a pool). */
  async started(name: string, stop: Stop): Promise<void> {
    if (!this.stopping) {
      this.#parts.push({ name, stop });
      return;
    }
    await this.#stopPart({ name, stop });
    throw new StoppedDuringStart(name);
  }

  /** A lifecycle of its own (a group of parts with their own `stop()`), stopped at this point of this one's order. */
  async child(name: string): Promise<Lifecycle> {
    const child = new Lifecycle(this.#log);
    await this.started(name, () => child.stop());
    return child;
  }

  /** Stops every part, the last started first; the same promise to every caller. */
  stop(): Promise<void> {
    this.#stopped ??= this.#stopAll();
    return this.#stopped;
  }

  async #stopAll(): Promise<void> {
    for (let part = this.#parts.pop(); part; part = this.#parts.pop()) await this.#stopPart(part);
  }

  async #stopPart(part: { name: string; stop: Stop }): Promise<void> {
    try {
      await part.stop();
    } catch (error) {
      this.#log.error({ err: error, part: part.name }, 'error while stopping');
    }
  }
}
