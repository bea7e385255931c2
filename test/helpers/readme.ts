import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The walkthroughs of README.md that run as tests: each block marked `<!-- readme-test: NAME -->`
 * right above its fence belongs to walkthrough NAME; all of them run in the README's order, as one
 * reader goes through it in one terminal (a later walkthrough uses what the quick start made).
 * Options after the name: `file=F`, a file written before the run (not run itself); `then=STEP`, a
 * step the reader does outside the terminal after the block (opening a page), which the test does.
 * Each `# ⇒ TEXT` line of a shell block is a documented outcome: the block's output must have a
 * line that starts with TEXT, in that order.
 */
export interface ReadmeBlock {
  walkthrough: string;
  language: string;
  /** For a block marked with `file=`: the file it is written to. */
  file?: string;
  /** For a block marked with `then=`: what the reader does after it, outside the terminal. */
  then?: string;
  code: string;
  /** The `# ⇒` lines of a shell block. */
  expected: string[];
  /** Its line in README.md, for messages. */
  line: number;
}

const MARKER = /^<!-- readme-test: (\S+)((?: \w+=\S+)*) -->$/;
const EXPECTED = /^# ⇒ (.*)$/;

/** Every marked block of README.md, in its order. */
export async function readmeBlocks(readme = path.resolve('README.md')): Promise<ReadmeBlock[]> {
  const lines = (await readFile(readme, 'utf8')).split('\n');
  const blocks: ReadmeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const marker = MARKER.exec(lines[i] ?? '');
    if (!marker) continue;
    const options = Object.fromEntries((marker[2] ?? '').trim().split(' ').filter(Boolean).map((option) => option.split('=') as [string, string]));
    const fence = /^```(\w+)$/.exec(lines[i + 1] ?? '');
    if (!fence) throw new Error(`README.md:${i + 1}: a readme-test marker must be right above a fenced block with a language`);
    const end = lines.indexOf('```', i + 2);
    if (end < 0) throw new Error(`README.md:${i + 2}: the fenced block never closes`);
    const code = lines.slice(i + 2, end);
    blocks.push({
      walkthrough: marker[1] as string,
      language: fence[1] as string,
      file: options.file,
      then: options.then,
      code: `${code.join('\n')}\n`,
      expected: code.flatMap((line) => EXPECTED.exec(line)?.[1] ?? []),
      line: i + 3,
    });
    i = end;
  }
  return blocks;
}

export interface BlockRun {
  block: ReadmeBlock;
  output: string;
}

/** Marks the end of a block's output in the one bash that runs them all. */
const END = '::readme-block-end::';
/** Marks a block after which the reader does a step outside the terminal; bash waits for a line on stdin. */
const PAUSE = '::readme-step::';

/**
 * Runs the shell blocks in one `bash -euo pipefail` in `cwd` (after writing the file blocks there),
 * with `env`; after a block with `then=STEP`, bash waits while `steps[STEP]` runs with that block's
 * output. Resolves with each shell block's output and the exit code.
 */
export async function runWalkthrough(
  blocks: readonly ReadmeBlock[],
  options: {
    cwd: string;
    env: NodeJS.ProcessEnv;
    timeoutMs: number;
    writeFile: (name: string, text: string) => Promise<void>;
    steps?: Record<string, (output: string) => Promise<void>>;
  },
): Promise<{ code: number | null; runs: BlockRun[]; stderr: string }> {
  for (const block of blocks) if (block.file) await options.writeFile(block.file, block.code);
  const shell = blocks.filter((block) => !block.file);
  for (const block of shell) {
    if (block.language !== 'sh') throw new Error(`README.md:${block.line}: a ${block.language} block needs file= to run`);
    if (block.then && !options.steps?.[block.then]) throw new Error(`README.md:${block.line}: no step ${block.then} for then=`);
  }
  const script = shell.map((block) => `${block.code}echo '${END}'\n${block.then ? `echo '${PAUSE}'; read -r _\n` : ''}`).join('');
  const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd: options.cwd, env: options.env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let paused = 0;
  const failures: unknown[] = [];
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    // A pause: the step of the block that just ended, then bash goes on.
    while (stdout.split(`${PAUSE}\n`).length - 1 > paused) {
      const outputs = stdout.split(`${END}\n`);
      const block = shell.filter((b) => b.then)[paused];
      paused += 1;
      const step = block?.then ? options.steps?.[block.then] : undefined;
      void (step ? step(outputs[outputs.length - 2] ?? '') : Promise.resolve()).then(
        () => child.stdin.write('\n'),
        (error: unknown) => {
          failures.push(error);
          child.kill('SIGKILL');
        },
      );
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  clearTimeout(timer);
  if (failures.length) throw failures[0];
  const outputs = stdout.replaceAll(`${PAUSE}\n`, '').split(`${END}\n`);
  return { code, stderr, runs: shell.map((block, i) => ({ block, output: outputs[i] ?? '' })) };
}

/** The documented outcomes a block's output lacks (each must start a line, in order). */
export function missingOutcomes(run: BlockRun): string[] {
  const lines = run.output.split('\n');
  let from = 0;
  const missing: string[] = [];
  for (const expected of run.block.expected) {
    const at = lines.findIndex((line, i) => i >= from && line.startsWith(expected));
    if (at < 0) missing.push(expected);
    else from = at + 1;
  }
  return missing;
}
