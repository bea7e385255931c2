import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIGN_IN_ADDRESS_LIMIT, SIGN_IN_FREE_ATTEMPTS } from '../../src/rate-limit/sign-in-throttle.ts';
import { PASSWORD, registeredUser, uniqueEmail } from '../factories/accounts.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { Browser } from '../helpers/browser.ts';
import { statusOf } from '../helpers/http.ts';
import { expireRateLimit } from '../helpers/time-travel.ts';

let addressCounter = 0;
/** A client address of its own for each test (the per-address limit is shared by every account). */
const newAddress = () => `198.51.100.${++addressCounter}`;

function signIn(app: TestApp, email: string, password: string, address?: string) {
  return new Browser(app.url).api.POST('/v1/user/signin', { body: { email, password }, headers: address ? { 'x-forwarded-for': address } : {} });
}

describe('sign-in throttling behind a trusted proxy', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ TRUST_PROXY: 'loopback' });
  });
  afterAll(() => app.close());

  const failFreeAttempts = async (email: string, address: string) => {
    for (let attempt = 0; attempt < SIGN_IN_FREE_ATTEMPTS; attempt++) {
      expect(await statusOf(signIn(app, email, 'wrong password!', address))).toBe(401);
    }
  };

  it(`checks at most ${SIGN_IN_FREE_ATTEMPTS} of 30 parallel wrong guesses for one account from one address`, async () => {
    const { email } = await registeredUser(app);
    const address = newAddress();
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => signIn(app, email, `wrong guess ${i}`, address)));
    const statuses = answers.map((a) => a.response.status);
    expect(statuses.filter((s) => s === 401)).toHaveLength(SIGN_IN_FREE_ATTEMPTS);
    expect(statuses.filter((s) => s === 429)).toHaveLength(30 - SIGN_IN_FREE_ATTEMPTS);
    const refused = answers.find((a) => a.response.status === 429);
    expect(Number(refused?.response.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(refused?.error).toMatchObject({ code: 'RATE_LIMITED' });
  });

  it('never locks the account for everyone: the owner signs in from another address while the guesser is held', async () => {
    const { email } = await registeredUser(app);
    const attacker = newAddress();
    await failFreeAttempts(email, attacker);
    const held = await signIn(app, email, PASSWORD, attacker);
    expect(held.response.status).toBe(429);
    expect(Number(held.response.headers.get('retry-after'))).toBe(60);

    const owner = await signIn(app, email, PASSWORD, newAddress());
    expect(owner.response.status).toBe(200);
    expect(owner.data).toMatchObject({ authenticated: true, user: { email } });
  });

  it('lets the right password through from the held address once the delay has passed', async () => {
    const { email } = await registeredUser(app);
    const address = newAddress();
    await failFreeAttempts(email, address);
    expect(await statusOf(signIn(app, email, PASSWORD, address))).toBe(429);

    await expireRateLimit(app, `signin-attempts:${address}|${email}`);
    expect(await statusOf(signIn(app, email, PASSWORD, address))).toBe(200);
  });

  it('doubles the delay at each further hold of the same account and address', async () => {
    const email = uniqueEmail('guessed');
    const address = newAddress();
    await failFreeAttempts(email, address);
    expect((await signIn(app, email, 'wrong password!', address)).response.headers.get('retry-after')).toBe('60');
    await expireRateLimit(app, `signin-attempts:${address}|${email}`);
    await failFreeAttempts(email, address);
    expect((await signIn(app, email, 'wrong password!', address)).response.headers.get('retry-after')).toBe('120');
  });

  it('starts the count over after a success', async () => {
    const { email } = await registeredUser(app);
    const address = newAddress();
    for (let attempt = 1; attempt < SIGN_IN_FREE_ATTEMPTS; attempt++) {
      expect(await statusOf(signIn(app, email, 'wrong password!', address))).toBe(401);
    }
    expect(await statusOf(signIn(app, email, PASSWORD, address))).toBe(200);
    await failFreeAttempts(email, address);
  });

  it(`refuses an address after ${SIGN_IN_ADDRESS_LIMIT.max} attempts in 15 minutes, whatever the accounts`, async () => {
    const { email } = await registeredUser(app);
    const address = newAddress();
    // The address's count, as 100 attempts on 100 other accounts would have left it, set through the limiter's store.
    const { max, windowSeconds } = SIGN_IN_ADDRESS_LIMIT;
    await app.container.limiter.store({ prefix: 'limit', points: max, seconds: windowSeconds }).set(`signin:address:${address}`, max, windowSeconds);
    const { response } = await signIn(app, email, PASSWORD, address);
    expect(response.status).toBe(429);
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(SIGN_IN_ADDRESS_LIMIT.windowSeconds - 60);
    expect(await statusOf(signIn(app, email, PASSWORD, newAddress()))).toBe(200);
  });
});

describe('sign-in throttling without a trusted proxy', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(() => app.close());

  it('ignores X-Forwarded-For: guesses that claim other addresses all count against the real one', async () => {
    const { email } = await registeredUser(app);
    for (let attempt = 0; attempt < SIGN_IN_FREE_ATTEMPTS; attempt++) {
      expect(await statusOf(signIn(app, email, 'wrong password!', newAddress()))).toBe(401);
    }
    expect(await statusOf(signIn(app, email, PASSWORD, newAddress()))).toBe(429);
    expect(await app.db('rate_limit_points').where('key', 'like', `signin-attempts:%|${email}`).pluck('key')).toEqual([
      `signin-attempts:127.0.0.1|${email}`,
    ]);
  });
});
