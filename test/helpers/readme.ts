import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The walkthroughs of README.md that run as tests: each block marked `<!-- readme-test: NAME -->`
 * (or `<!-- readme-test: NAME file=F -->`, a file the walkthrough writes before it runs) right above
 * its fence belongs to walkthrough NAME, in the README's order. Shell blocks run in one bash, as a
 * reader pastes them into one terminal; each `# ⇒ TEXT` line of a shell block is a documented
 * outcome: the block's output must have a line that starts with TEXT, in that order.
 */
export interface ReadmeBlock {
  walkthrough: string;
  language: string;
  /** For a block marked with `file=`: the file it is written to. */
  file?: string;
  code: string;
  /** The `# ⇒` lines of a shell block. */
  expected: string[];
  /** Its line in README.md, for messages. */
  line: number;
}

const MARKER = /^<!-- readme-test: (\S+)(?: file=(\S+))? -->$/;
const EXPECTED = /^# ⇒ (.*)$/;

export async function readmeBlocks(walkthrough: string, readme = path.resolve('README.md')): Promise<ReadmeBlock[]> {
  const lines = (await readFile(readme, 'utf8')).split('\n');
  const blocks: ReadmeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const marker = MARKER.exec(lines[i] ?? '');
    if (!marker || marker[1] !== walkthrough) continue;
    const fence = /^```(\w+)$/.exec(lines[i + 1] ?? '');
    if (!fence) throw new Error(`README.md:${i + 1}: a readme-test marker must be right above a fenced block with a language`);
    const end = lines.indexOf('```', i + 2);
    if (end < 0) throw new Error(`README.md:${i + 2}: the fenced block never closes`);
    const code = lines.slice(i + 2, end);
    blocks.push({
      walkthrough,
      language: fence[1] as string,
      file: marker[2],
      code: `${code.join('\n')}\n`,
      expected: code.flatMap((line) => EXPECTED.exec(line)?.[1] ?? []),
      line: i + 3,
    });
    i = end;
  }
  if (blocks.length === 0) throw new Error(`README.md has no block of the walkthrough ${walkthrough}`);
  return blocks;
}

export interface BlockRun {
  block: ReadmeBlock;
  output: string;
}

/** Marks the end of a block's output in the one bash that runs them all. */
const END = '::readme-block-end::';

/**
 * Runs a walkthrough's shell blocks in one `bash -euo pipefail` in `cwd` (after writing its file
 * blocks there), with `env`; resolves with each shell block's output and the exit code.
 */
export async function runWalkthrough(
  blocks: readonly ReadmeBlock[],
  options: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number; writeFile: (name: string, text: string) => Promise<void> },
): Promise<{ code: number | null; runs: BlockRun[]; stderr: string }> {
  for (const block of blocks) if (block.file) await options.writeFile(block.file, block.code);
  const shell = blocks.filter((block) => !block.file);
  for (const block of shell) if (block.language !== 'sh') throw new Error(`README.md:${block.line}: a ${block.language} block needs file= to run`);
  const script = shell.map((block) => `${block.code}echo '${END}'\n`).join('');
  const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  clearTimeout(timer);
  const outputs = stdout.split(`${END}\n`);
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
