import { describe, expectTypeOf, it } from 'vitest';
import type { Principal, SessionPrincipal } from '../../src/principal.ts';
import type { AuthOf, HandlerContext } from '../../src/http/types.ts';

/** Checked by `make typecheck`: a handler's context is typed from its operation in the document. */
describe('handler context types', () => {
  it('types auth from the operation’s security: a session, a session or a key, or no caller', () => {
    expectTypeOf<AuthOf<'listDeployments'>>().toEqualTypeOf<SessionPrincipal>();
    expectTypeOf<HandlerContext<'getSession'>['auth']>().toEqualTypeOf<SessionPrincipal>();
    expectTypeOf<AuthOf<'createChatCompletion'>>().toEqualTypeOf<Principal>();
    expectTypeOf<AuthOf<'signIn'>>().toEqualTypeOf<undefined>();
  });

  it('types the body limit as a number wherever the operation documents a body', () => {
    expectTypeOf<HandlerContext<'createTranscription'>['bodyLimit']>().toEqualTypeOf<number>();
    expectTypeOf<HandlerContext<'createBillingPortalSession'>['bodyLimit']>().toEqualTypeOf<number>();
    expectTypeOf<HandlerContext<'listDeployments'>['bodyLimit']>().toEqualTypeOf<undefined>();
  });
});
