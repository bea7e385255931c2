/**
 * `make image-check`: lints the Dockerfile and .dockerignore, since no image can be built on the
 * machines this project's CI runs on (no container engine runs there and the base image's registry is
 * not reachable; docs/operating.md, "Run in production").
 *
 *   node scripts/check-dockerfile.ts [Dockerfile] [.dockerignore]
 *
 * Two layers. First dockerfile-utils' validator (the linter of the VS Code Docker language server, on
 * the dockerfile-ast parser): syntax, unknown instructions and flags, JSON-form mistakes, casing,
 * relative WORKDIR, repeated CMD/ENTRYPOINT/HEALTHCHECK. Then the rules below, each named after the
 * hadolint rule it follows where there is one (https://github.com/hadolint/hadolint#rules), plus this
 * service's own. Exit 1 with one line per problem.
 */
import { readFileSync } from 'node:fs';
import { DockerfileParser, type Copy, type From, type Instruction, type JSONInstruction, type PropertyInstruction } from 'dockerfile-ast';
import { validate, ValidationSeverity } from 'dockerfile-utils';

export const RULES = {
  pinned: 'DL3006/DL3007: every base image has an exact version tag (x.y.z) or a digest, never latest',
  node24Slim: 'the base image is Node 24 on a Debian slim image',
  nonRoot: 'DL3002: the final stage sets USER to a non-root user, by number (Kubernetes checks runAsNonRoot on a number)',
  healthcheck: 'the final stage has a HEALTHCHECK',
  npmCi: 'DL3016-like: dependencies come from the lockfile with `npm ci` (never `npm install`); the final stage\'s node_modules from a stage that ran `npm ci --omit=dev`',
  noSecrets: 'DL3044-like: no ENV or ARG names or holds a secret (settings come from the environment at run time)',
  chown: 'every COPY of the final stage states its owner with --chown, and not the runtime user (the code is read-only to the process)',
  noAdd: 'DL3020: COPY, not ADD',
  execForm: 'DL3025: CMD, ENTRYPOINT and HEALTHCHECK in JSON (exec) form, so node is PID 1 and receives SIGTERM',
  compiledOnly: 'the final stage runs compiled JavaScript (dist/main.js) and copies no src/',
  sameAsStart: 'the final stage\'s CMD is package.json\'s `npm start`, word for word (the Node flags production runs with, measured by make bench, in one place)',
  productionEnv: 'the final stage sets NODE_ENV=production',
  noCd: 'DL3003: WORKDIR, not cd, to change directory',
  apt: 'DL3015/DL3009: apt-get install with --no-install-recommends and the package lists removed in the same RUN',
  dockerignore: '.dockerignore is an allow-list (starts with `*`) that lets through every path COPY takes from the context, and no .env',
  noStandIns: 'nothing of dev/ (the local stand-ins `make run` starts) is copied into a stage or let into the build context',
} as const;

export interface Problem {
  line: number;
  rule: keyof typeof RULES | 'syntax';
  message: string;
}

export interface Stage {
  from: From;
  name: string | undefined;
  instructions: Instruction[];
}

/** Every problem of a Dockerfile (and its .dockerignore), in line order. */
export function checkDockerfile(dockerfile: string, dockerignore: string | undefined, startScript?: string): Problem[] {
  const problems: Problem[] = [];
  const report = (instruction: Instruction | undefined, rule: Problem['rule'], message: string) =>
    problems.push({ line: (instruction?.getRange().start.line ?? -1) + 1, rule, message });

  for (const diagnostic of validate(dockerfile, { instructionCasing: ValidationSeverity.ERROR, instructionWorkdirRelative: ValidationSeverity.ERROR })) {
    problems.push({ line: diagnostic.range.start.line + 1, rule: 'syntax', message: typeof diagnostic.message === 'string' ? diagnostic.message : diagnostic.message.value });
  }

  const parsed = DockerfileParser.parse(dockerfile);
  const globalArgs = new Map<string, string>();
  for (const arg of parsed.getInitialARGs()) {
    for (const property of arg.getProperties()) globalArgs.set(property.getName(), property.getValue() ?? '');
  }
  function checkProperties(instruction: PropertyInstruction, keyword: string): void {
    for (const property of instruction.getProperties()) {
      if (SECRET_NAME.test(property.getName()) || SECRET_VALUE.test(property.getValue() ?? '')) {
        report(instruction, 'noSecrets', `${keyword} ${property.getName()}: a secret must come from the environment at run time, not the image`);
      }
    }
  }
  const stages = splitStages(parsed.getInstructions());
  const final = stages.at(-1);
  if (!final) return [{ line: 1, rule: 'syntax', message: 'no FROM' }];
  const stageNames = new Set(stages.map((stage) => stage.name).filter(Boolean));

  // Base images.
  for (const stage of stages) {
    const image = expand(stage.from.getImage() ?? '', globalArgs);
    if (stageNames.has(image)) continue;
    const [reference = '', digest] = image.split('@');
    const tag = reference.includes(':') ? reference.slice(reference.lastIndexOf(':') + 1) : '';
    if (tag === 'latest' || (!digest && !/^\d+\.\d+\.\d+/.test(tag))) {
      report(stage.from, 'pinned', `FROM ${image}: pin an exact version tag (x.y.z) or a digest`);
    }
    if (digest && !/^sha256:[0-9a-f]{64}$/.test(digest)) report(stage.from, 'pinned', `FROM ${image}: malformed digest`);
    if (!/^(docker\.io\/(library\/)?)?node:24(\.\d+\.\d+)?-([a-z]+-)?slim$/.test(reference)) {
      report(stage.from, 'node24Slim', `FROM ${image}: not a Node 24 slim image (node:24.x.y-<debian>-slim)`);
    }
  }

  // Every stage, and the ARGs before the first.
  for (const arg of parsed.getInitialARGs()) checkProperties(arg, 'ARG');
  for (const stage of stages) {
    for (const instruction of stage.instructions) {
      const keyword = instruction.getKeyword();
      const text = instruction.getArgumentsContent() ?? '';
      if (keyword === 'ADD') report(instruction, 'noAdd', 'ADD: use COPY');
      if (keyword === 'ENV' || keyword === 'ARG') checkProperties(instruction as PropertyInstruction, keyword);
      if (keyword === 'RUN') {
        if (/\bnpm\s+(install|i|add)\b/.test(text)) report(instruction, 'npmCi', 'RUN npm install: use npm ci (the lockfile)');
        if (/(^|&&|;|\|\|)\s*cd\s/.test(text)) report(instruction, 'noCd', 'RUN cd …: use WORKDIR');
        if (/\bapt-get\s+install\b/.test(text) && (!text.includes('--no-install-recommends') || !/rm -rf \/var\/lib\/apt\/lists/.test(text))) {
          report(instruction, 'apt', 'apt-get install without --no-install-recommends, or lists not removed in the same RUN');
        }
      }
      if ((keyword === 'CMD' || keyword === 'ENTRYPOINT') && !isJsonForm(instruction)) report(instruction, 'execForm', `${keyword} in shell form`);
      if (keyword === 'HEALTHCHECK' && !/^\s*NONE\s*$/i.test(text) && !/\bCMD\s*\[/.test(text)) report(instruction, 'execForm', 'HEALTHCHECK CMD in shell form');
    }
  }

  // The final stage.
  const finalOf = (keyword: string) => final.instructions.filter((instruction) => instruction.getKeyword() === keyword);
  const user = finalOf('USER').at(-1);
  const runtimeUser = user?.getArgumentsContent()?.trim() ?? '';
  if (!user) report(final.from, 'nonRoot', 'the final stage has no USER: it would run as root');
  else if (/^(root|0)(:|$)/.test(runtimeUser)) report(user, 'nonRoot', `USER ${runtimeUser} is root`);
  else if (!/^\d+(:\d+)?$/.test(runtimeUser)) report(user, 'nonRoot', `USER ${runtimeUser}: name the user by number (uid[:gid])`);
  const healthchecks = finalOf('HEALTHCHECK');
  if (!healthchecks.length || healthchecks.some((instruction) => /^\s*NONE\s*$/i.test(instruction.getArgumentsContent() ?? ''))) {
    report(final.from, 'healthcheck', 'the final stage has no HEALTHCHECK');
  }
  if (!finalOf('ENV').some((instruction) => (instruction as PropertyInstruction).getProperties().some((p) => p.getName() === 'NODE_ENV' && p.getValue() === 'production'))) {
    report(final.from, 'productionEnv', 'the final stage does not set NODE_ENV=production');
  }
  const cmd = finalOf('CMD').at(-1);
  const cmdWords = cmd && isJsonForm(cmd) ? (cmd as JSONInstruction).getJSONStrings().map((word) => word.getJSONValue()) : [];
  if (!cmdWords.includes('dist/main.js')) report(cmd ?? final.from, 'compiledOnly', 'the final stage\'s CMD does not run dist/main.js');
  if (startScript !== undefined && cmdWords.join(' ') !== startScript.trim().split(/\s+/).join(' ')) {
    report(cmd ?? final.from, 'sameAsStart', `the final stage's CMD runs \`${cmdWords.join(' ')}\`, npm start \`${startScript}\``);
  }

  const copies = finalOf('COPY') as Copy[];
  let modulesFromOmitDev = false;
  for (const copy of copies) {
    const chown = copy.getFlags().find((flag) => flag.getName() === 'chown')?.getValue();
    if (!chown) report(copy, 'chown', 'COPY without --chown');
    else if (['node', '1000', ...(owner(runtimeUser) === 'root' ? [] : [owner(runtimeUser)])].includes(owner(chown))) {
      report(copy, 'chown', `COPY --chown=${chown}: the runtime user would own (and could rewrite) its code`);
    }
    const from = copy.getFlags().find((flag) => flag.getName() === 'from')?.getValue();
    const sources = copySources(copy);
    if (!from && sources.some((source) => /^(\.\/)?src(\/|$)/.test(source))) report(copy, 'compiledOnly', 'COPY src/ into the final stage: copy the compiled dist/');
    if (from && sources.some((source) => /node_modules\/?$/.test(source))) {
      const origin = stages.find((stage) => stage.name === from);
      modulesFromOmitDev ||= Boolean(origin?.instructions.some((i) => i.getKeyword() === 'RUN' && /\bnpm\s+ci\b[^&;|]*--omit=dev/.test(i.getArgumentsContent() ?? '')));
    }
  }
  if (!modulesFromOmitDev) report(final.from, 'npmCi', 'the final stage\'s node_modules do not come from a stage that ran npm ci --omit=dev');

  // The local stand-ins stay out of every stage: the build compiles src/ alone, which imports none of them.
  for (const stage of stages) {
    for (const copy of stage.instructions.filter((i) => i.getKeyword() === 'COPY') as Copy[]) {
      if (copy.getFlags().some((flag) => flag.getName() === 'from')) continue;
      for (const source of copySources(copy).filter((path) => STAND_INS.test(path.replace(/^\.?\//, '')))) {
        report(copy, 'noStandIns', `COPY ${source}: the local stand-ins of make run never reach an image`);
      }
    }
  }

  // .dockerignore against what COPY takes from the context.
  if (dockerignore === undefined) {
    report(undefined, 'dockerignore', 'no .dockerignore');
  } else {
    const patterns = dockerignore.split('\n').map((line) => line.trim()).filter((line) => line && !line.startsWith('#'));
    if (patterns[0] !== '*') report(undefined, 'dockerignore', '.dockerignore does not start with `*` (an allow-list)');
    if (!patterns.some((pattern) => /^(\*\*\/)?\.env$/.test(pattern))) report(undefined, 'dockerignore', '.dockerignore does not exclude .env');
    const allowed = patterns.filter((pattern) => pattern.startsWith('!')).map((pattern) => pattern.slice(1).replace(/^\.?\//, '').replace(/\/$/, ''));
    for (const entry of allowed.filter((pattern) => STAND_INS.test(pattern))) report(undefined, 'noStandIns', `.dockerignore lets ${entry} into the build context`);
    for (const stage of stages) {
      for (const copy of stage.instructions.filter((i) => i.getKeyword() === 'COPY') as Copy[]) {
        if (copy.getFlags().some((flag) => flag.getName() === 'from')) continue;
        for (const source of copySources(copy)) {
          const path = source.replace(/^\.?\//, '').replace(/\/$/, '');
          if (!allowed.some((entry) => path === entry || path.startsWith(`${entry}/`))) {
            report(copy, 'dockerignore', `COPY ${source}: .dockerignore keeps it out of the build context`);
          }
        }
      }
    }
  }
  return problems.sort((a, b) => a.line - b.line);
}

/** dev/ and what is in it, as a path of the build context. */
const STAND_INS = /^dev(\/|$)/;
const SECRET_NAME = /(SECRET|PASSWORD|PASSWD|TOKEN|API_KEY|PRIVATE_KEY|CREDENTIAL|DATABASE_URL|SMTP_URL)/i;
const SECRET_VALUE = /(sk_(live|test)_|rk_(live|test)_|whsec_|-----BEGIN|:\/\/[^/\s:@]+:[^/\s@]+@)/;

/** The stages of a parsed Dockerfile, each with its FROM and its instructions. */
export function splitStages(instructions: Instruction[]): Stage[] {
  const stages: Stage[] = [];
  for (const instruction of instructions) {
    if (instruction.getKeyword() === 'FROM') {
      const from = instruction as From;
      stages.push({ from, name: from.getBuildStage() ?? undefined, instructions: [] });
    } else {
      stages.at(-1)?.instructions.push(instruction);
    }
  }
  return stages;
}

/** `${NAME}` and `$NAME` replaced by the global ARG defaults. */
function expand(value: string, args: Map<string, string>): string {
  return value.replace(/\$\{(\w+)\}|\$(\w+)/g, (match, braced: string | undefined, bare: string | undefined) => args.get(braced ?? bare ?? '') ?? match);
}

function isJsonForm(instruction: Instruction): boolean {
  return /^\s*\[/.test(instruction.getArgumentsContent() ?? '');
}

function copySources(copy: Copy): string[] {
  const words = isJsonForm(copy)
    ? (copy as unknown as JSONInstruction).getJSONStrings().map((word) => word.getJSONValue())
    : copy.getArguments().map((argument) => argument.getValue());
  return words.slice(0, -1);
}

function owner(chown: string): string {
  return chown.split(':')[0] ?? '';
}

if (import.meta.main) {
  const dockerfilePath = process.argv[2] ?? 'Dockerfile';
  const ignorePath = process.argv[3] ?? '.dockerignore';
  let ignore: string | undefined;
  try {
    ignore = readFileSync(ignorePath, 'utf8');
  } catch {
    ignore = undefined;
  }
  const { scripts } = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: { start: string } };
  const problems = checkDockerfile(readFileSync(dockerfilePath, 'utf8'), ignore, scripts.start);
  for (const problem of problems) {
    process.stderr.write(`${dockerfilePath}:${problem.line}: [${problem.rule}] ${problem.message}${problem.rule === 'syntax' ? '' : ` (${RULES[problem.rule]})`}\n`);
  }
  if (problems.length) process.exit(1);
  process.stdout.write(`${dockerfilePath}: ${Object.keys(RULES).length} rules and the dockerfile-utils validator, no problem\n`);
}
