import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

/** Debian's chromium (`apt-get install -y chromium`; .ci/run installs it when missing). */
export const CHROMIUM = '/usr/bin/chromium';

/** Headless, and without the background connections this machine's closed network refuses. */
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** For a suite's title: empty when Chromium is here, else why the suite is skipped. */
export const chromiumMissing = existsSync(CHROMIUM) ? '' : ` (SKIPPED: ${CHROMIUM} is missing; apt-get install -y chromium, as .ci/run does)`;

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: ARGS });
}

/**
 * Records what a page must not do: CSP violations (events and console reports), script errors,
 * and requests to a URL `allowed` refuses. Call before the page loads anything.
 */
export async function watchPage(page: Page, allowed: (url: string) => boolean): Promise<string[]> {
  const problems: string[] = [];
  await page.exposeFunction('reportViolation', (text: string) => problems.push(text));
  await page.addInitScript(() => {
    // Runs in the page (this project compiles without the DOM types).
    interface Violation {
      violatedDirective: string;
      blockedURI: string;
    }
    const page = globalThis as unknown as {
      document: { addEventListener(type: 'securitypolicyviolation', listener: (event: Violation) => void): void };
      reportViolation(text: string): void;
    };
    page.document.addEventListener('securitypolicyviolation', (event) => page.reportViolation(`CSP: ${event.violatedDirective} blocked ${event.blockedURI}`));
  });
  page.on('console', (message) => {
    if (/Content[- ]Security[- ]Policy|Refused to/i.test(message.text())) problems.push(`console: ${message.text()}`);
  });
  page.on('pageerror', (error) => problems.push(`script error: ${error.message}`));
  page.on('request', (request) => {
    if (!allowed(request.url())) problems.push(`request elsewhere: ${request.url()}`);
  });
  return problems;
}
