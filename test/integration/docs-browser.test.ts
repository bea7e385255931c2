import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { chromiumMissing as missing, launchChromium, watchPage } from '../helpers/chromium.ts';

/**
 * The documentation pages in a real browser, under their Content-Security-Policy: they must render
 * the operations, Swagger UI's "Try it out" must reach the service that serves the page, and the
 * browser must report no CSP violation and no script error.
 */
describe.skipIf(missing !== '')(`the documentation pages in headless Chromium${missing}`, () => {
  let app: TestApp;
  let browser: Browser;
  beforeAll(async () => {
    // On a random port, with a database: the page's origin is not the document's default server.
    app = await startTestApp();
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  /** Opens a page, recording CSP violations (events and console reports), script errors and requests elsewhere. */
  async function open(path: string): Promise<{ page: Page; problems: string[] }> {
    const page = await browser.newPage();
    const problems = await watchPage(page, (url) => url.startsWith(app.url) || /^(data|blob):/.test(url));
    const response = await page.goto(`${app.url}${path}`, { waitUntil: 'load' });
    expect(response?.status()).toBe(200);
    return { page, problems };
  }

  it('renders Swagger UI with its operations and no CSP violation', async () => {
    const { page, problems } = await open('/docs');
    await page.locator('.opblock-summary-description', { hasText: 'List my sessions' }).first().waitFor({ state: 'visible', timeout: 30_000 });
    expect(await page.locator('.opblock').count()).toBeGreaterThan(50);
    expect(problems).toEqual([]);
    await page.close();
  });

  it("sends Swagger UI's Try it out to the page's own origin: GET /healthz answers 200 in the page", async () => {
    const { page, problems } = await open('/docs');
    const operation = page.locator('#operations-Platform-getHealth');
    await operation.locator('.opblock-summary').click();
    await operation.locator('button.try-out__btn').click();
    await operation.locator('button.execute').click();
    const status = operation.locator('.live-responses-table .response .response-col_status');
    await status.waitFor({ state: 'visible', timeout: 30_000 });
    expect(problems).toEqual([]);
    expect(await operation.locator('.request-url pre').textContent()).toBe(`${app.url}/healthz`);
    expect((await status.textContent())?.trim()).toBe('200');
    await page.close();
  });

  it('renders ReDoc with its operations and no CSP violation', async () => {
    const { page, problems } = await open('/redoc');
    await page.locator('h2', { hasText: 'List my sessions' }).waitFor({ state: 'visible', timeout: 30_000 });
    expect(await page.locator('h2', { hasText: 'Check service health' }).count()).toBe(1);
    // The search box works only when ReDoc's worker (created from a blob: URL) could start.
    await page.getByPlaceholder('Search...').fill('sessions');
    await page.locator('[data-role="search:results"] li', { hasText: 'End my other sessions' }).waitFor({ state: 'visible', timeout: 30_000 });
    expect(problems).toEqual([]);
    await page.close();
  });
});
