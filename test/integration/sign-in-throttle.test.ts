import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIGN_IN_ACCOUNT_FREE_FAILURES, SIGN_IN_ACCOUNT_INTERVAL_SECONDS, SIGN_IN_ADDRESS_LIMIT, SIGN_IN_FREE_ATTEMPTS } from '../../src/rate-limit/sign-in-throttle.ts';
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
    // The attempts themselves: one on each of as many other addresses' accounts (each under its own
    // per-account limit), ten at a time; every one answered, none refused, until the limit.
    const { max } = SIGN_IN_ADDRESS_LIMIT;
    for (let done = 0; done < max; done += 10) {
      const statuses = await Promise.all(Array.from({ length: Math.min(10, max - done) }, (_, i) => statusOf(signIn(app, `nobody-${done + i}-${address}@example.com`, 'wrong password!', address))));
      expect(new Set(statuses)).toEqual(new Set([401]));
    }
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

describe('per-address limits on IPv6', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ TRUST_PROXY: 'loopback' });
  });
  afterAll(() => app.close());

  it('counts every address of one /64 as one: 5 guesses from 5 addresses of a /64 hold the account there, not at another /64', async () => {
    const { email } = await registeredUser(app);
    for (let host = 1; host <= SIGN_IN_FREE_ATTEMPTS; host++) {
      expect(await statusOf(signIn(app, email, 'wrong password!', `2001:db8:1:2::${host}`))).toBe(401);
    }
    const held = await signIn(app, email, 'wrong password!', '2001:db8:1:2:ffff:ffff:ffff:99');
    expect(held.response.status).toBe(429);
    expect(held.error).toMatchObject({ code: 'RATE_LIMITED' });
    expect(Number(held.response.headers.get('retry-after'))).toBe(60);
    expect(await statusOf(signIn(app, email, PASSWORD, '2001:db8:1:3::1'))).toBe(200);
  });

  it('judges an IPv4-mapped IPv6 address as the IPv4 address it carries', async () => {
    const { email } = await registeredUser(app);
    for (let attempt = 0; attempt < SIGN_IN_FREE_ATTEMPTS; attempt++) {
      expect(await statusOf(signIn(app, email, 'wrong password!', '::ffff:203.0.113.77'))).toBe(401);
    }
    expect(await statusOf(signIn(app, email, PASSWORD, '203.0.113.77'))).toBe(429);
  });

  it('limits registrations per /64, not per address', async () => {
    const { max, windowSeconds } = { max: 100, windowSeconds: 15 * 60 };
    // The /64's count, as 100 registrations from its addresses would have left it, set through the limiter's store.
    await app.container.limiter.store({ prefix: 'limit', points: max, seconds: windowSeconds }).set('register:address:2001:db8:5:6::/64', max, windowSeconds);
    const { response, error } = await new Browser(app.url).api.POST('/v1/user/register', {
      body: { email: uniqueEmail('v6'), password: PASSWORD, organization: 'Six' },
      headers: { 'x-forwarded-for': '2001:db8:5:6:1234::9' },
    });
    expect(response.status).toBe(429);
    expect(error).toMatchObject({ code: 'RATE_LIMITED' });
  });
});

describe('sign-in failures per account from all addresses together', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ TRUST_PROXY: 'loopback' });
  });
  afterAll(() => app.close());

  const spread = (i: number) => `2001:db8:${100 + i}::1`;

  it(`allows ${SIGN_IN_ACCOUNT_FREE_FAILURES} failures in a row from many networks, then one attempt a minute for the account, whoever makes it`, async () => {
    const { email } = await registeredUser(app);
    for (let i = 0; i < SIGN_IN_ACCOUNT_FREE_FAILURES; i++) {
      expect(await statusOf(signIn(app, email, 'wrong password!', spread(i)))).toBe(401);
    }
    // The minute's one attempt, then the account waits, from any network.
    expect(await statusOf(signIn(app, email, 'wrong password!', spread(50)))).toBe(401);
    const slowed = await signIn(app, email, 'wrong password!', spread(51));
    expect(slowed.response.status).toBe(429);
    expect(slowed.error).toMatchObject({ code: 'RATE_LIMITED' });
    const retryAfter = Number(slowed.response.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(SIGN_IN_ACCOUNT_INTERVAL_SECONDS);
    expect(await statusOf(signIn(app, email, PASSWORD, '198.51.100.250'))).toBe(429);

    // Never a lockout: once the minute has passed the owner's right password passes, and the count starts over.
    await expireRateLimit(app, `signin-account-slot:${email}`);
    expect(await statusOf(signIn(app, email, PASSWORD, '198.51.100.250'))).toBe(200);
    expect(await statusOf(signIn(app, email, 'wrong password!', spread(60)))).toBe(401);
    expect(await statusOf(signIn(app, email, 'wrong password!', spread(61)))).toBe(401);
  });
});
