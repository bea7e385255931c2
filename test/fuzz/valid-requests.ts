import { randomUUID } from 'node:crypto';
import { uniqueEmail } from '../factories/accounts.ts';
import { APP_ORIGIN } from '../helpers/app.ts';
import type { Browser } from '../helpers/browser.ts';
import { HOSTED_MODEL, SSO_PROVIDER, type FuzzWorld } from './world.ts';

export const ACTORS = ['nobody', 'super_admin', 'admin', 'member', 'viewer', 'api_key'] as const;
export type Actor = (typeof ACTORS)[number];

/**
 * A request its operation should answer with success: who sends it, the path and query values,
 * fields laid over the document's example body (or over a body generated from the schema), or a
 * body sent as is (a signed payload, a form).
 */
export interface ValidRequest {
  /** A caller of the team, the API key, nobody, or the browser of someone the case made. */
  caller?: Actor | Browser;
  path?: Record<string, string>;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  fields?: Record<string, unknown>;
  raw?: string;
  form?: FormData;
}

const RETURN_URL = `${APP_ORIGIN}/settings/billing`;
const STRONG_PASSWORD = 'a new horse battery staple';

/** A signed event of the processor: the document's example under a new id. */
function signedEvent(world: FuzzWorld, example: unknown, secret: 'STRIPE_WEBHOOK_SECRET' | 'STRIPE_EVENT_DESTINATION_SECRET'): ValidRequest {
  const raw = JSON.stringify({ ...(example as object), id: `evt_fuzz_${randomUUID().replaceAll('-', '')}` });
  return { caller: 'nobody', raw, headers: { 'stripe-signature': world.signed(raw, secret) } };
}

/** Someone new, invited to the organization, answering from their own session, by the invitation's token or id. */
async function inviteeAnswers(world: FuzzWorld, by: 'token' | 'id'): Promise<ValidRequest> {
  const user = await world.newUser();
  const invitation = await world.invitation(user);
  return { caller: user.browser, path: by === 'token' ? { token: invitation.token } : { invitation_id: invitation.id } };
}

/**
 * What each operation needs beyond the document's example to succeed, for the fuzz's valid cases
 * (valid often enough to pass validation and reach the handler's own logic). An
 * operation that is not listed is sent by the super_admin (the API key on inference, nobody where
 * the document asks no credentials) with the example body and the world's ids. Whatever a case
 * uses up is made fresh for it.
 */
export const VALID_REQUESTS: Record<string, (world: FuzzWorld, variant: number, example: unknown) => Promise<ValidRequest>> = {
  deleteDeployment: async (world) => ({ path: { deployment_id: await world.deploymentId() } }),

  createChatCompletion: async (world, variant) => ({ fields: { model: variant % 2 ? HOSTED_MODEL : world.deployments.chat.id } }),
  // The hosted model chats only: completions go to the deployment of a `generate` model.
  createCompletion: async (world) => ({ fields: { model: world.deployments.completion.id } }),
  retrieveModel: async (world, variant) => ({ path: { model: variant % 2 ? HOSTED_MODEL : world.deployments.chat.id } }),
  createEmbedding: async (world) => ({ fields: { model: world.deployments.embedding.id } }),
  createImage: async (world) => ({ fields: { model: world.deployments.image.id } }),
  createRerank: async (world) => ({ fields: { model: world.deployments.rerank.id } }),
  createTranscription: async (world) => {
    const form = new FormData();
    form.set('model', world.deployments.audio.id);
    form.set('file', new Blob([Buffer.from('RIFF$\0\0\0WAVEfmt ')], { type: 'audio/wav' }), 'hello.wav');
    return { caller: 'api_key', form };
  },

  requestPasswordReset: async () => ({ caller: 'nobody', fields: { email: uniqueEmail('reset') } }),
  confirmPasswordReset: async (world) => ({ caller: 'nobody', fields: { token: await world.resetToken(), password: STRONG_PASSWORD } }),
  confirmEmailVerification: async (world) => ({ caller: 'nobody', fields: { token: await world.verificationToken() } }),
  resendEmailVerification: async (world) => ({ caller: (await world.newUser({ verified: false })).browser }),
  registerUser: async () => ({ caller: 'nobody', fields: { email: uniqueEmail('register') } }),
  signIn: async (world) => {
    const user = await world.newUser();
    return { caller: 'nobody', fields: { email: user.email, password: 'correct horse battery staple' } };
  },
  revokeSession: async (world) => {
    const { browser, otherSessionId } = await world.userWithTwoSessions();
    return { caller: browser, path: { session_id: otherSessionId } };
  },
  // The example completes the profile of someone without an organization; a member renames theirs with PATCH /v1/organization.
  updateProfile: async (world, variant) => (variant % 2 ? { caller: (await world.newUser()).browser } : { fields: { organization: undefined } }),
  completeSsoLogin: async (world) => {
    const { query, browser } = await world.ssoCallback();
    return { caller: browser, path: { provider: SSO_PROVIDER }, query };
  },

  createCheckoutSetupSession: async () => ({ fields: { return_url: RETURN_URL, purpose: 'payment_method_setup' } }),
  createBillingPortalSession: async () => ({ fields: { return_url: RETURN_URL } }),
  setDefaultPaymentMethod: async (world) => ({ fields: { processor_default_payment_method_id: await world.defaultCard() } }),
  activatePostpaidSubscription: async (world) => ({ fields: { processor_payment_method_id: await world.defaultCard() } }),
  detachPaymentMethod: async (world) => ({ path: { payment_method_id: await world.extraCard() } }),
  handleBillingWebhook: async (world, _variant, example) => signedEvent(world, example, 'STRIPE_WEBHOOK_SECRET'),
  handleBillingEventNotification: async (world, _variant, example) => signedEvent(world, example, 'STRIPE_EVENT_DESTINATION_SECRET'),

  previewInvitation: async (world) => ({ caller: 'nobody', path: { token: (await world.invitation()).token } }),
  registerWithInvitation: async (world) => ({ caller: 'nobody', fields: { token: (await world.invitation()).token } }),
  startInvitationSso: async (world) => ({ caller: 'nobody', path: { provider: SSO_PROVIDER }, fields: { token: (await world.invitation()).token } }),
  acceptInvitationByToken: (world) => inviteeAnswers(world, 'token'),
  rejectInvitationByToken: (world) => inviteeAnswers(world, 'token'),
  acceptInvitation: (world) => inviteeAnswers(world, 'id'),
  rejectInvitation: (world) => inviteeAnswers(world, 'id'),
  createInvitation: async () => ({ fields: { email: uniqueEmail('invited') } }),
  revokeInvitation: async (world) => ({ path: { invitation_id: (await world.invitation()).id } }),
  resendInvitation: async (world) => ({ path: { invitation_id: (await world.invitation()).id } }),
  updateMemberRole: async (world) => ({ path: { user_id: String((await world.newUser({ joins: 'member' })).id) } }),
  removeMember: async (world) => ({ path: { user_id: String((await world.newUser({ joins: 'member' })).id) } }),

  createApiKey: async (world) => ({ fields: { deployment_ids: [world.deployments.chat.id] } }),
  updateApiKey: async (world) => ({ path: { api_key_id: await world.apiKeyId() } }),
  revokeApiKey: async (world) => ({ path: { api_key_id: await world.apiKeyId() } }),
  getApiKeyUsage: async (world) => ({ path: { api_key_id: await world.apiKeyId() } }),
  createWebhookEndpoint: async (world) => {
    await world.roomForWebhookEndpoint();
    return { fields: { url: 'http://127.0.0.1:9/hooks' } };
  },
  deleteWebhookEndpoint: async (world) => ({ path: { webhook_endpoint_id: await world.webhookEndpoint() } }),
};
