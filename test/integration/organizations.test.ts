import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser } from '../factories/accounts.ts';
import { team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import { jsonOf, type Problem } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

describe('the organization', () => {
  it('is the caller’s current one, with their role', async () => {
    const { browser } = await registeredUser(app, { organization: 'Difference Engines' });
    const response = await browser.get('/v1/organization');
    expect(response.status).toBe(200);
    expect(await jsonOf(response)).toMatchObject({
      id: expect.any(Number),
      name: 'Difference Engines',
      slug: 'difference-engines',
      description: null,
      status: 'active',
      role: 'super_admin',
    });
  });

  it('gets a unique slug when the name is taken', async () => {
    const first = await registeredUser(app, { organization: 'Same Name' });
    const second = await registeredUser(app, { organization: 'Same Name' });
    const slugs = await Promise.all([first, second].map(async ({ browser }) => (await jsonOf(await browser.get('/v1/organization'))).slug));
    expect(new Set(slugs).size).toBe(2);
  });

  it('is renamed and described by an admin; null clears the description; the slug stays', async () => {
    const { browser } = await registeredUser(app, { organization: 'Old Name' });
    const renamed = await browser.patch('/v1/organization', { name: '  New Name ', description: 'We build engines.' });
    expect(renamed.status).toBe(200);
    expect(await jsonOf(renamed)).toMatchObject({ name: 'New Name', description: 'We build engines.', slug: 'old-name' });
    const cleared = await browser.patch('/v1/organization', { description: null });
    expect(await jsonOf(cleared)).toMatchObject({ name: 'New Name', description: null });
  });

  it.each([
    [{ name: '   ' }, 'body/name'],
    [{ name: '' }, 'body/name'],
    [{ name: 'x'.repeat(256) }, 'body/name'],
    [{ slug: 'mine' }, 'body/slug'],
  ])('refuses %o with 422', async (body, location) => {
    const { browser } = await registeredUser(app);
    const response = await browser.patch('/v1/organization', body);
    expect(response.status).toBe(422);
    expect((await jsonOf<Problem>(response)).errors?.map((e) => e.location)).toContain(location);
  });

  it('lists its members oldest first with their roles', async () => {
    const members = await team(app);
    const response = await members.viewer.browser.get('/v1/organization/members');
    expect(response.status).toBe(200);
    const list = await jsonOf<Array<{ email: string; role: string; joined_at: string }>>(response);
    expect(list[0]).toMatchObject({ email: members.super_admin.email, role: 'super_admin' });
    expect(list.map((m) => [m.email, m.role]).sort()).toEqual(
      [
        [members.super_admin.email, 'super_admin'],
        [members.admin.email, 'admin'],
        [members.member.email, 'member'],
        [members.viewer.email, 'viewer'],
      ].sort(),
    );
  });
});

describe('roles on organization routes', () => {
  let members: Awaited<ReturnType<typeof team>>;
  beforeAll(async () => {
    members = await team(app);
  });

  const routes = [
    { name: 'get the organization', minimum: 'viewer', call: (b: (typeof members)['admin']['browser']) => b.get('/v1/organization') },
    { name: 'list members', minimum: 'viewer', call: (b: (typeof members)['admin']['browser']) => b.get('/v1/organization/members') },
    { name: 'rename the organization', minimum: 'admin', call: (b: (typeof members)['admin']['browser']) => b.patch('/v1/organization', { description: 'x' }) },
    { name: 'list invitations', minimum: 'admin', call: (b: (typeof members)['admin']['browser']) => b.get('/v1/organization/invitations') },
    {
      name: 'invite a member',
      minimum: 'admin',
      call: (b: (typeof members)['admin']['browser']) => b.post('/v1/organization/invitations', { email: `r-${Math.random()}@example.com` }),
    },
    {
      name: 'invite an admin',
      minimum: 'super_admin',
      call: (b: (typeof members)['admin']['browser']) => b.post('/v1/organization/invitations', { email: `a-${Math.random()}@example.com`, role: 'admin' }),
    },
  ] as const;
  const order = ['viewer', 'member', 'admin', 'super_admin'] as const;

  for (const route of routes) {
    for (const role of order) {
      const allowed = order.indexOf(role) >= order.indexOf(route.minimum);
      it(`${allowed ? 'lets' : 'refuses'} a ${role} ${route.name}`, async () => {
        const response = await route.call(members[role].browser);
        if (allowed) {
          expect(response.status, await response.clone().text()).toBeLessThan(300);
        } else {
          expect(response.status).toBe(403);
          expect(await jsonOf<Problem>(response)).toMatchObject({ code: 'FORBIDDEN' });
        }
      });
    }
  }
});
