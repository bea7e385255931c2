/**
 * `make image-rehearsal`: the Dockerfile's stages replayed on this machine, then the image's three
 * process kinds started from what they produced, against a fresh database on the Postgres of
 * DATABASE_URL. No container engine runs here (docs/operating.md, "Run in production"), so this is what shows
 * that the image's own steps give a service that starts: production dependencies only, compiled
 * JavaScript, the migrations beside dist/, a non-root user that can write nothing it runs.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres node scripts/image-rehearsal.ts [Dockerfile]
 *
 * Each stage gets an empty folder standing for its filesystem root. WORKDIR, ENV, ARG, COPY (from
 * the build context or `--from` a stage), RUN (`sh -c`, in the stage's WORKDIR and ENV), USER,
 * HEALTHCHECK and CMD are followed as Docker follows them; the base image itself is not there: its
 * `node` and `npm` are this machine's Node 24 and npm, and the BuildKit cache mount of npm's cache
 * is this machine's npm cache (warm after `make install`). Then, from the last stage's folder, as
 * the USER it names and with only the image's ENV and the production settings below:
 *
 * 0. the image holds no stand-in code: no dev/ (the local stand-ins `make run` starts), and every
 *    module dist/ imports is in the image (a relative import resolves to a file of it outside dev/,
 *    a package is in its production node_modules), so nothing of dev/ is reached or missed;
 * 1. the migrations (`node dist/cli/migrate.js`) apply every migration and exit 0;
 * 2. `ROLE=api` (the CMD) answers GET /healthz and serves the document, the HEALTHCHECK command
 *    exits 0 against it, and SIGTERM stops it with exit code 0;
 * 3. `ROLE=worker` starts, and SIGTERM stops it with exit code 0.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { builtinModules } from 'node:module';
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DockerfileParser, type Copy, type JSONInstruction, type PropertyInstruction } from 'dockerfile-ast';
import pg from 'pg';
import { splitStages } from './check-dockerfile.ts';

interface StageState {
  name: string;
  /** The folder standing for the stage's filesystem root. */
  root: string;
  /** The WORKDIR, as a path inside the stage. */
  workdir: string;
  env: Record<string, string>;
  user: string | undefined;
  cmd: string[];
  healthcheck: string[];
}

const say = (line: string) => process.stdout.write(`image-rehearsal: ${line}\n`);

/**
 * The base image's /usr/local/bin: this machine's Node 24, copied into the rehearsal's folder, so
 * that the image's user (uid 1000) can run it whatever the checkout's folder lets it reach.
 */
let baseBin = '';

function inside(state: StageState, target: string): string {
  return path.join(state.root, path.posix.isAbsolute(target) ? target : path.posix.join(state.workdir, target));
}

function jsonWords(instruction: JSONInstruction): string[] {
  return instruction.getJSONStrings().map((word) => word.getJSONValue());
}

/** Replays every stage; returns the last one's state. */
function build(dockerfilePath: string, context: string, workspace: string): StageState {
  const npmCache = spawnSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8' }).stdout.trim();
  const parsed = DockerfileParser.parse(readFileSync(dockerfilePath, 'utf8'));
  const globalArgs: Record<string, string> = {};
  for (const arg of parsed.getInitialARGs()) for (const property of arg.getProperties()) globalArgs[property.getName()] = property.getValue() ?? '';
  const states = new Map<string, StageState>();
  let state: StageState | undefined;
  for (const [index, stage] of splitStages(parsed.getInstructions()).entries()) {
    const name = stage.name ?? String(index);
    const base = stage.from.getImage() ?? '';
    const parent = states.get(base);
    const root = path.join(workspace, name);
    mkdirSync(root, { recursive: true });
    if (parent) cpSync(parent.root, root, { recursive: true });
    state = parent ? { ...structuredClone(parent), name, root } : { name, root, workdir: '/', env: {}, user: undefined, cmd: [], healthcheck: [] };
    states.set(name, state);
    say(`stage ${name} (FROM ${base.replace(/\$\{(\w+)\}/g, (_, arg: string) => globalArgs[arg] ?? '')}: this machine's Node ${process.version} and npm stand for it)`);
    for (const instruction of stage.instructions) {
      const keyword = instruction.getKeyword();
      switch (keyword) {
        case 'WORKDIR':
          state.workdir = path.posix.resolve(state.workdir, instruction.getArgumentsContent() ?? '/');
          mkdirSync(inside(state, '.'), { recursive: true });
          break;
        case 'ENV':
          for (const property of (instruction as PropertyInstruction).getProperties()) state.env[property.getName()] = property.getValue() ?? '';
          break;
        case 'USER':
          state.user = instruction.getArgumentsContent()?.trim();
          break;
        case 'CMD':
          state.cmd = jsonWords(instruction as JSONInstruction);
          break;
        case 'HEALTHCHECK': {
          const words = (instruction.getArgumentsContent() ?? '').replace(/\\\n/g, ' ').match(/CMD\s*(\[.*\])\s*$/s)?.[1];
          state.healthcheck = words ? (JSON.parse(words) as string[]) : [];
          break;
        }
        case 'COPY':
          copy(instruction as Copy, state, context, states);
          break;
        case 'RUN': {
          const command = (instruction.getArgumentsContent() ?? '').replace(/\\\n/g, ' ');
          say(`  RUN ${command}`);
          // The base image's PATH: its node and npm (this machine's), nothing of the checkout's
          // node_modules; this machine's network settings (its CA, proxies), as a builder has them.
          const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${baseBin}:/usr/local/bin:/usr/bin:/bin`, ...state.env };
          for (const key of Object.keys(env)) if (/^(npm_|MAKE|MFLAGS)/i.test(key) || key === 'NODE_OPTIONS') Reflect.deleteProperty(env, key);
          for (const mount of (instruction as unknown as { getFlags(): { getName(): string; getValue(): string | null }[] }).getFlags()) {
            if (mount.getName() !== 'mount') continue;
            const options = Object.fromEntries((mount.getValue() ?? '').split(',').map((option) => option.split('=') as [string, string]));
            // A cache mount of npm's cache: this machine's npm cache stands for BuildKit's (both outlive a build).
            if (options.type === 'cache' && options.target?.endsWith('/.npm')) env.npm_config_cache = npmCache;
            else throw new Error(`stage ${name}: RUN --mount=${mount.getValue()} is not replayed by scripts/image-rehearsal.ts`);
          }
          const result = spawnSync('sh', ['-c', command], { cwd: inside(state, '.'), env, stdio: ['ignore', 'ignore', 'inherit'] });
          if (result.status !== 0) throw new Error(`stage ${name}: RUN ${command} exited ${result.status ?? result.signal}`);
          break;
        }
        case 'ARG':
        case 'EXPOSE':
        case 'STOPSIGNAL':
          break;
        default:
          throw new Error(`stage ${name}: ${keyword} is not replayed by scripts/image-rehearsal.ts`);
      }
    }
  }
  if (!state) throw new Error('no stage');
  return state;
}

function copy(instruction: Copy, state: StageState, context: string, states: Map<string, StageState>): void {
  const from = instruction.getFlags().find((flag) => flag.getName() === 'from')?.getValue();
  const words = instruction.getArguments().map((argument) => argument.getValue());
  const destination = words.at(-1) ?? '.';
  const sources = words.slice(0, -1);
  const origin = from ? states.get(from) : undefined;
  if (from && !origin) throw new Error(`COPY --from=${from}: no such stage`);
  for (const source of sources) {
    const sourcePath = origin ? path.join(origin.root, path.posix.resolve('/', source)) : path.join(context, source);
    if (!existsSync(sourcePath)) throw new Error(`COPY ${source}: not found`);
    const target = inside(state, destination);
    const intoFolder = destination.endsWith('/') || sources.length > 1;
    const finalTarget = statSync(sourcePath).isDirectory() || !intoFolder ? target : path.join(target, path.basename(sourcePath));
    mkdirSync(path.dirname(finalTarget), { recursive: true });
    cpSync(sourcePath, finalTarget, { recursive: true });
  }
}

/** `import … from '…'`, `export … from '…'`, `import '…'`, `import('…')` and `import.meta.resolve('…')` of compiled JavaScript. */
const IMPORT = /(?:\bimport|\bexport)\s[^'";]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)|\bimport\.meta\.resolve\(\s*['"]([^'"]+)['"]\s*\)/g;

/** Every file under `folder`, as paths relative to it. */
function filesUnder(folder: string): string[] {
  return readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(folder, path.join(entry.parentPath, entry.name)));
}

/**
 * What of the local stand-ins an image's application folder (its WORKDIR) holds: a dev/ folder, or
 * an import of dist/ that the image cannot satisfy (a relative one outside its files or into dev/, a
 * package its node_modules lacks, such as a devDependency a stand-in uses). One line each.
 */
export function standInProblems(app: string): string[] {
  const problems: string[] = [];
  if (existsSync(path.join(app, 'dev'))) problems.push('dev/ is in the image: the local stand-ins of make run never belong there');
  if (!existsSync(path.join(app, 'dist'))) return [...problems, 'no dist/ in the image'];
  const builtins = new Set(builtinModules);
  for (const file of filesUnder(path.join(app, 'dist')).filter((name) => name.endsWith('.js'))) {
    const source = path.join(app, 'dist', file);
    for (const match of readFileSync(source, 'utf8').matchAll(IMPORT)) {
      const specifier = match.slice(1).find(Boolean) ?? '';
      if (specifier.startsWith('.')) {
        const target = path.relative(app, path.resolve(path.dirname(source), specifier));
        if (target.startsWith('..') || /^dev(\/|$)/.test(target) || !existsSync(path.join(app, target))) problems.push(`dist/${file} imports ${specifier}, which the image does not hold`);
      } else if (!specifier.startsWith('node:') && !builtins.has(specifier)) {
        const name = specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/');
        if (!existsSync(path.join(app, 'node_modules', name, 'package.json'))) problems.push(`dist/${file} imports ${specifier}, a package the image's node_modules lacks`);
      }
    }
  }
  return problems;
}

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  return typeof address === 'object' && address ? address.port : 0;
}

/** A process of the image: its CMD or another command, from the image's WORKDIR, as its USER. */
function run(image: StageState, command: string[], env: Record<string, string>): ChildProcess & { output: () => string } {
  const [uid, gid] = (image.user ?? '0').split(':').map(Number);
  const [program = 'node', ...args] = command;
  const child = spawn(program === 'node' ? path.join(baseBin, 'node') : program, args, {
    cwd: inside(image, '.'),
    env: { PATH: `${baseBin}:/usr/bin:/bin`, ...image.env, ...env },
    uid,
    gid: gid ?? uid,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return Object.assign(child, { output: () => output });
}

async function exitOf(child: ChildProcess, seconds: number): Promise<number | string> {
  if (child.exitCode !== null) return child.exitCode;
  const timer = setTimeout(() => child.kill('SIGKILL'), seconds * 1000);
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  clearTimeout(timer);
  return code ?? signal ?? 'unknown';
}

async function until(what: string, seconds: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${seconds} s`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function stop(child: ChildProcess & { output: () => string }, what: string): Promise<void> {
  child.kill('SIGTERM');
  const code = await exitOf(child, 40);
  if (code !== 0) throw new Error(`${what}: SIGTERM ended it with ${code}\n${child.output()}`);
  say(`${what}: stopped by SIGTERM, exit code 0`);
}

async function main(): Promise<void> {
  const dockerfile = process.argv[2] ?? 'Dockerfile';
  const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const workspace = mkdtempSync(path.join(tmpdir(), 'image-rehearsal-'));
  chmodSync(workspace, 0o755);
  baseBin = path.join(workspace, 'base-bin');
  mkdirSync(baseBin);
  copyFileSync(process.execPath, path.join(baseBin, 'node'));
  chmodSync(path.join(baseBin, 'node'), 0o755);
  const database = `image_rehearsal_${process.pid}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  const children: ChildProcess[] = [];
  try {
    const image = build(dockerfile, path.dirname(path.resolve(dockerfile)), workspace);
    if (!image.user || /^(0|root)(:|$)/.test(image.user)) throw new Error(`the image runs as ${image.user ?? 'root'}`);
    const standIns = standInProblems(inside(image, '.'));
    if (standIns.length) throw new Error(`stand-in code in the image:\n  ${standIns.join('\n  ')}`);
    say(`no stand-in code: no dev/, and every import of its ${filesUnder(inside(image, 'dist')).filter((name) => name.endsWith('.js')).length} files of dist/ is in the image`);
    await admin.query(`create database ${database}`);
    const url = new URL(serverUrl);
    url.pathname = `/${database}`;
    const port = await freePort();
    const env = {
      DATABASE_URL: url.toString(),
      APP_SECRET: randomBytes(24).toString('base64url'),
      SMTP_URL: 'smtp://127.0.0.1:9',
      PUBLIC_URL: 'https://api.rehearsal.example',
      HOST: '127.0.0.1',
      PORT: String(port),
      MIGRATE_ON_START: 'false',
      LOG_LEVEL: 'info',
    };

    const migrate = run(image, ['node', 'dist/cli/migrate.js'], env);
    children.push(migrate);
    const migrated = await exitOf(migrate, 120);
    if (migrated !== 0) throw new Error(`migrations exited ${migrated}\n${migrate.output()}`);
    const check = new pg.Client({ connectionString: url.toString() });
    await check.connect();
    const { rows } = await check.query<{ count: string }>('select count(*) from knex_migrations');
    await check.end();
    const files = existsSync(inside(image, 'migrations')) ? spawnSync('ls', [inside(image, 'migrations')], { encoding: 'utf8' }).stdout.split('\n').filter((file) => file.endsWith('.ts')) : [];
    if (!files.length || Number(rows[0]?.count) !== files.length) throw new Error(`${rows[0]?.count} migrations applied, ${files.length} in the image`);
    say(`migrations (node dist/cli/migrate.js, as user ${image.user}): ${files.length} applied, exit code 0`);

    const api = run(image, image.cmd, { ...env, ROLE: 'api' });
    children.push(api);
    await until('ROLE=api answering /healthz', 60, async () => {
      if (api.exitCode !== null) throw new Error(`ROLE=api exited ${api.exitCode}\n${api.output()}`);
      return fetch(`http://127.0.0.1:${port}/healthz`).then((answer) => answer.ok, () => false);
    });
    const document = await fetch(`http://127.0.0.1:${port}/openapi.json`).then((answer) => answer.json() as Promise<{ openapi?: string }>);
    if (!document.openapi) throw new Error('ROLE=api does not serve the OpenAPI document');
    say(`ROLE=api (${image.cmd.join(' ')}): /healthz 200, /openapi.json served`);
    const healthcheck = run(image, image.healthcheck, { ...env, ROLE: 'api' });
    const healthy = await exitOf(healthcheck, 30);
    if (healthy !== 0) throw new Error(`HEALTHCHECK ${image.healthcheck.join(' ')} exited ${healthy}\n${healthcheck.output()}`);
    say(`HEALTHCHECK (${image.healthcheck.join(' ')}): exit code 0`);
    await stop(api, 'ROLE=api');

    const worker = run(image, image.cmd, { ...env, ROLE: 'worker' });
    children.push(worker);
    await until('ROLE=worker started', 60, async () => {
      if (worker.exitCode !== null) throw new Error(`ROLE=worker exited ${worker.exitCode}\n${worker.output()}`);
      return worker.output().includes('"msg":"started"');
    });
    say('ROLE=worker: started');
    await stop(worker, 'ROLE=worker');
    say(`the image's stages, migrations, api and worker: all as the Dockerfile says (${dockerfile})`);
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await admin.query(`drop database if exists ${database} with (force)`).catch(() => undefined);
    await admin.end();
    rmSync(workspace, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  try {
    await main();
  } catch (error) {
    process.stderr.write(`image-rehearsal failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  }
}
