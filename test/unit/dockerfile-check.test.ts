import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { checkDockerfile, type Problem } from '../../scripts/check-dockerfile.ts';

const dockerfile = readFileSync('Dockerfile', 'utf8');
const dockerignore = readFileSync('.dockerignore', 'utf8');

/** The rules reported for the Dockerfile with one change. */
function rulesBroken(from: string | RegExp, to: string, ignore = dockerignore): Problem['rule'][] {
  const changed = dockerfile.replace(from, to);
  expect(changed).not.toBe(dockerfile);
  return [...new Set(checkDockerfile(changed, ignore).map((problem) => problem.rule))];
}

describe('the Dockerfile check (make image-check)', () => {
  it('passes the project Dockerfile and .dockerignore', () => {
    expect(checkDockerfile(dockerfile, dockerignore)).toEqual([]);
  });

  it('refuses an unpinned, latest or other base image', () => {
    expect(rulesBroken('node:24.21.0-bookworm-slim\n', 'node:24-slim\n')).toEqual(['pinned']);
    expect(rulesBroken('node:24.21.0-bookworm-slim\n', 'node:latest\n')).toEqual(['pinned', 'node24Slim']);
    expect(rulesBroken('node:24.21.0-bookworm-slim\n', 'node:22.11.0-bookworm-slim\n')).toEqual(['node24Slim']);
    expect(rulesBroken('node:24.21.0-bookworm-slim\n', `node:24-bookworm-slim@sha256:${'a'.repeat(64)}\n`)).toEqual([]);
  });

  it('refuses root, a user by name, or no USER', () => {
    expect(rulesBroken('USER 1000:1000', 'USER root')).toEqual(['nonRoot']);
    expect(rulesBroken('USER 1000:1000', 'USER node')).toEqual(['nonRoot']);
    expect(rulesBroken('USER 1000:1000\n', '')).toEqual(['nonRoot']);
  });

  it('refuses a missing HEALTHCHECK, or one in shell form', () => {
    expect(rulesBroken(/HEALTHCHECK [^\n]*\\\n[^\n]*\n/, '')).toEqual(['healthcheck']);
    expect(rulesBroken('CMD ["node", "scripts/healthcheck.ts"]', 'CMD node scripts/healthcheck.ts')).toEqual(['execForm']);
  });

  it('refuses npm install, and production modules not installed with --omit=dev', () => {
    expect(rulesBroken('npm ci --no-audit --no-fund --ignore-scripts', 'npm install')).toEqual(['npmCi']);
    expect(rulesBroken('npm ci --omit=dev', 'npm ci')).toEqual(['npmCi']);
  });

  it('refuses a secret in ENV or ARG, by name or by value', () => {
    expect(rulesBroken('PORT=8080', 'PORT=8080 APP_SECRET=abc')).toEqual(['noSecrets']);
    expect(rulesBroken('PORT=8080', 'PORT=8080 STRIPE=sk_live_abc')).toEqual(['noSecrets']);
    expect(rulesBroken('ARG NODE_IMAGE', 'ARG DATABASE_URL\nARG NODE_IMAGE')).toEqual(['noSecrets']);
  });

  it('refuses the local stand-ins of make run (dev/) in a stage or in the build context', () => {
    const allowingDev = dockerignore.replace('!src/\n', '!src/\n!dev/\n');
    expect(rulesBroken('COPY src/ ./src/\n', 'COPY src/ ./src/\nCOPY dev/ ./dev/\n', allowingDev)).toEqual(['noStandIns']);
    expect(rulesBroken('COPY src/ ./src/\n', 'COPY src/ ./src/\nCOPY dev/web-app/ ./dev/web-app/\n')).toEqual(['noStandIns', 'dockerignore']);
    expect(checkDockerfile(dockerfile, allowingDev).map((problem) => problem.rule)).toEqual(['noStandIns']);
  });

  it('refuses a COPY into the final stage without --chown or owned by the runtime user', () => {
    expect(rulesBroken('COPY --chown=root:root package.json', 'COPY package.json')).toEqual(['chown']);
    expect(rulesBroken('COPY --chown=root:root package.json', 'COPY --chown=1000:1000 package.json')).toEqual(['chown']);
  });

  it('refuses ADD, cd, a shell-form CMD, TypeScript sources or another entry point in the final stage', () => {
    expect(rulesBroken('COPY --chown=root:root package.json', 'ADD --chown=root:root package.json')).toContain('noAdd');
    expect(rulesBroken("WORKDIR /app/src\nRUN find", 'RUN cd src && find')).toEqual(['noCd']);
    expect(rulesBroken('CMD ["node", "--max-semi-space-size=16", "--heap-growing-percent=50", "dist/main.js"]', 'CMD node dist/main.js')).toEqual(['execForm', 'compiledOnly']);
    expect(rulesBroken('CMD ["node", "--max-semi-space-size=16", "--heap-growing-percent=50", "dist/main.js"]', 'CMD ["node", "src/main.ts"]')).toEqual(['compiledOnly']);
    expect(rulesBroken('COPY --chown=root:root migrations/', 'COPY --chown=root:root src/ ./src/\nCOPY --chown=root:root migrations/')).toEqual(['compiledOnly']);
  });

  it('refuses a CMD that is not `npm start` word for word (the Node flags production runs with, in one place)', () => {
    const { scripts } = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: { start: string } };
    expect(checkDockerfile(dockerfile, dockerignore, scripts.start)).toEqual([]);
    const otherFlags = dockerfile.replace(/^CMD \[.*\]$/m, 'CMD ["node", "--max-semi-space-size=64", "dist/main.js"]');
    expect(checkDockerfile(otherFlags, dockerignore, scripts.start).map((problem) => problem.rule)).toEqual(['sameAsStart']);
  });

  it('refuses a production image without NODE_ENV=production', () => {
    expect(rulesBroken('NODE_ENV=production', 'NODE_ENV=development')).toEqual(['productionEnv']);
  });

  it('refuses a .dockerignore that is no allow-list, lets .env through, or keeps out what COPY needs', () => {
    const ignoreBroken = (from: string | RegExp, to: string) => {
      const changed = dockerignore.replace(from, to);
      expect(changed).not.toBe(dockerignore);
      return checkDockerfile(dockerfile, changed).map((problem) => problem.message);
    };
    expect(ignoreBroken(/^\*$/m, '.git')).toEqual(['.dockerignore does not start with `*` (an allow-list)']);
    expect(ignoreBroken('**/.env\n', '')).toEqual(['.dockerignore does not exclude .env']);
    expect(ignoreBroken('!migrations/\n', '')).toEqual(['COPY migrations/: .dockerignore keeps it out of the build context']);
    expect(checkDockerfile(dockerfile, undefined).map((problem) => problem.rule)).toEqual(['dockerignore']);
  });

  it('reports syntax errors from the dockerfile-utils validator', () => {
    expect(rulesBroken('WORKDIR /app\nCOPY package.json', 'WORKDIR app\nCOPY package.json')).toContain('syntax');
    expect(rulesBroken('EXPOSE 8080', 'EXPOSE 8080\nFOO bar')).toContain('syntax');
  });
});
