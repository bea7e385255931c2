import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.ts';
import { startServices, type Services } from '../helpers/services.ts';

/**
 * The deployment plan where the HTTP tests (test/integration/deployment-plan.test.ts) cannot put
 * it easily: billing enforcement off (the default here), an organization without a billing
 * account, and no cluster registered.
 */
let services: Services;
beforeAll(async () => {
  services = await startServices();
});
afterAll(() => services.close());

const deployments = () => services.container.deployments;

describe('the deployment plan, with billing enforcement off and no cluster', () => {
  it('does not check payment setup, as create does not', async () => {
    const owner = await services.owner();
    const plan = await deployments().plan(owner, { model_name: 'qwen2.5-instruct' });
    expect(plan.guards[0]).toEqual({
      guard: 'payment_setup',
      verdict: 'not_checked',
      code: null,
      detail: 'Billing enforcement is off: creating a deployment needs no payment setup.',
    });
    expect(plan.would_be_refused).toBeNull();
    await expect(deployments().create(owner, { model_name: 'qwen2.5-instruct' })).resolves.toMatchObject({ status: 'requested' });
  });

  it('says provisioning would fail at instance selection with no cluster registered, and shows no capacity', async () => {
    const owner = await services.owner();
    const plan = await deployments().plan(owner, { model_name: 'qwen2.5-instruct', model_size_in_billions: 7 });
    expect(plan.placement).toEqual({
      selected_instance_type: null,
      selection_reason: null,
      chosen: null,
      alternatives: [],
      failure_stage: 'instance_selection',
      failure_reason: 'No instance type has 18.8 GB of GPU memory on one instance for this model.',
    });
    expect(plan.capacity).toEqual([]);
    expect(plan.estimated_cost).toBeNull();
  });

  it('refuses payment setup without a billing account, the other guards not checked, as create refuses it', async () => {
    const owner = await services.owner();
    const organizationId = owner.organization?.id;
    await services.db('billing_accounts').where({ organization_id: organizationId }).delete();
    const plan = await deployments().plan(owner, { model_name: 'qwen2.5-instruct' });
    expect(plan.guards.map((g) => [g.guard, g.verdict])).toEqual([
      ['payment_setup', 'refused'],
      ['active_deployment_limit', 'not_checked'],
      ['spending_limit', 'not_checked'],
    ]);
    const refusal = await deployments()
      .create(owner, { model_name: 'qwen2.5-instruct' })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(refusal).toBeInstanceOf(AppError);
    const { status, code, message } = refusal as AppError;
    expect(plan.would_be_refused).toEqual({ status, code, detail: message });
    expect(plan.would_be_refused?.detail).toBe('Your organization has no billing account.');
  });
});
