import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { standInProblems } from '../../scripts/image-rehearsal.ts';

/** An image's application folder with `files` (path: text), as the rehearsal's last stage leaves it. */
function image(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'image-stand-ins-'));
  folders.push(root);
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    writeFileSync(path.join(root, name), text);
  }
  return root;
}
const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

const production = {
  'node_modules/pino/package.json': '{}',
  'node_modules/@node-rs/argon2/package.json': '{}',
  'dist/main.js': "import { pino } from 'pino';\nimport { hash } from '@node-rs/argon2';\nimport { readFile } from 'node:fs/promises';\nimport path from 'path';\nimport { startRuntime } from './runtime.js';\n",
  'dist/runtime.js': "export const startRuntime = () => import('./db/database.js');\n",
  'dist/db/database.js': 'export {};\n',
};

describe('the image rehearsal\'s look for stand-in code (make image-rehearsal)', () => {
  it('finds none in an image of dist/ whose every import it holds', () => {
    expect(standInProblems(image(production))).toEqual([]);
  });

  it('finds dev/, an import reaching outside dist/ or into dev/, and a package production does not install', () => {
    const problems = standInProblems(
      image({
        ...production,
        'dev/main.js': 'export {};\n',
        'dist/main.js': "import { startMailDev } from '../dev/maildev.js';\nexport { x } from './missing.js';\n",
        'dist/local.js': "const bin = import.meta.resolve('maildev');\n",
      }),
    );
    expect(problems.toSorted()).toEqual([
      'dev/ is in the image: the local stand-ins of make run never belong there',
      "dist/local.js imports maildev, a package the image's node_modules lacks",
      'dist/main.js imports ../dev/maildev.js, which the image does not hold',
      'dist/main.js imports ./missing.js, which the image does not hold',
    ]);
  });
});
