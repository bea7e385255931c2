import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Lifecycle, StoppedDuringStart } from '../../src/lifecycle.ts';

function recorder() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { lines, lifecycle: new Lifecycle(log) };
}

describe('lifecycle', () => {
  it('stops its parts in reverse order of their start, a child group at its own place', async () => {
    const { lifecycle } = recorder();
    const stopped: string[] = [];
    await lifecycle.start('database', async () => 'db', (part) => void stopped.push(part));
    const runtime = await lifecycle.child('runtime');
    await runtime.started('pool', () => void stopped.push('pool'));
    await runtime.start('http', async () => 'http', (part) => void stopped.push(part));
    await lifecycle.started('simulator', () => void stopped.push('simulator'));

    await lifecycle.stop();
    expect(stopped).toEqual(['simulator', 'http', 'pool', 'db']);
  });

  it('logs a stop that fails and still stops the parts started before it, each once', async () => {
    const { lifecycle, lines } = recorder();
    const stopped: string[] = [];
    await lifecycle.started('first', () => void stopped.push('first'));
    await lifecycle.started('broken', () => {
      throw new Error('cannot stop');
    });
    await Promise.all([lifecycle.stop(), lifecycle.stop()]);
    await lifecycle.stop();
    expect(stopped).toEqual(['first']);
    expect(lines).toContainEqual(expect.objectContaining({ level: 50, part: 'broken', msg: 'error while stopping' }));
  });

  it('stops a part that finishes starting after the stop began (a signal during start-up), and fails its start', async () => {
    const { lifecycle } = recorder();
    const stopped: string[] = [];
    await lifecycle.started('database', () => void stopped.push('database'));
    let finishStart!: () => void;
    const starting = lifecycle.start(
      'slow part',
      () => new Promise<string>((resolve) => (finishStart = () => resolve('slow part'))),
      (part) => void stopped.push(part),
    );
    const stopping = lifecycle.stop();
    finishStart();
    await expect(starting).rejects.toBeInstanceOf(StoppedDuringStart);
    await stopping;
    expect(stopped).toEqual(['database', 'slow part']);
    await expect(lifecycle.start('late part', async () => 'late', () => undefined)).rejects.toBeInstanceOf(StoppedDuringStart);
  });
});
