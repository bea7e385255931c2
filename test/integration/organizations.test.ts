import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredUser } from '../factories/accounts.ts';
import { team, type Team } from '../factories/organizations.ts';
import { startTestApp, type TestApp } from '../helpers/app.ts';
import type { Api } from '../helpers/browser.ts';
import { unchecked } from '../helpers/http.ts';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp();
});
afterAll(() => app.close());

describe('the organization', () => {
  it('is the caller’s current one, with their role', async () => {
    const { api } = await registeredUser(app, { organization: 'Difference Engines' });
    const { data, response } = await api.GET('/v1/organization');
    expect(response.status).toBe(200);
    expect(data).toMatchObject({
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
    const slugs = await Promise.all([first, second].map(async ({ api }) => (await api.GET('/v1/organization')).data?.slug));
    expect(new Set(slugs).size).toBe(2);
  });

  it('is renamed and described by an admin; null clears the description; the slug stays', async () => {
    const { api } = await registeredUser(app, { organization: 'Old Name' });
    const renamed = await api.PATCH('/v1/organization', { body: { name: '  New Name ', description: 'We build engines.' } });
    expect(renamed.response.status).toBe(200);
    expect(renamed.data).toMatchObject({ name: 'New Name', description: 'We build engines.', slug: 'old-name' });
    const cleared = await api.PATCH('/v1/organization', { body: { description: null } });
    expect(cleared.data).toMatchObject({ name: 'New Name', description: null });
  });

  it.each([
    [{ name: '   ' }, 'body/name'],
    [{ name: '' }, 'body/name'],
    [{ name: 'x'.repeat(256) }, 'body/name'],
    [{ slug: 'mine' }, 'body/slug'],
  ])('refuses %o with 422', async (body, location) => {
    const { api } = await registeredUser(app);
    const { error, response } = await api.PATCH('/v1/organization', { body: unchecked(body) });
    expect(response.status).toBe(422);
    expect(error?.errors?.map((e) => e.location)).toContain(location);
  });

  it('lists its members oldest first with their roles', async () => {
    const members = await team(app);
    const { data: list = [], response } = await members.viewer.api.GET('/v1/organization/members');
    expect(response.status).toBe(200);
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
  let members: Team;
  beforeAll(async () => {
    members = await team(app);
  });

  const routes = [
    { name: 'get the organization', minimum: 'viewer', call: (api: Api) => api.GET('/v1/organization') },
    { name: 'list members', minimum: 'viewer', call: (api: Api) => api.GET('/v1/organization/members') },
    { name: 'rename the organization', minimum: 'admin', call: (api: Api) => api.PATCH('/v1/organization', { body: { description: 'x' } }) },
    { name: 'list invitations', minimum: 'admin', call: (api: Api) => api.GET('/v1/organization/invitations') },
    {
      name: 'invite a member',
      minimum: 'admin',
      call: (api: Api) => api.POST('/v1/organization/invitations', { body: { email: `r-${Math.random()}@example.com` } }),
    },
    {
      name: 'invite an admin',
      minimum: 'super_admin',
      call: (api: Api) => api.POST('/v1/organization/invitations', { body: { email: `a-${Math.random()}@example.com`, role: 'admin' } }),
    },
  ] as const;
  const order = ['viewer', 'member', 'admin', 'super_admin'] as const;

  for (const route of routes) {
    for (const role of order) {
      const allowed = order.indexOf(role) >= order.indexOf(route.minimum);
      it(`${allowed ? 'lets' : 'refuses'} a ${role} ${route.name}`, async () => {
        const { error, response } = await route.call(members[role].api);
        if (allowed) {
          expect(response.status, JSON.stringify(error)).toBeLessThan(300);
        } else {
          expect(response.status).toBe(403);
          expect(error).toMatchObject({ code: 'FORBIDDEN' });
        }
      });
    }
  }
});
