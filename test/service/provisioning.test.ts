import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionPrincipal } from '../../src/principal.ts';
import { findDeployment } from '../../src/deployments/deployments.repository.ts';
import { engineModelUid, PROVISION_QUEUE } from '../../src/deployments/provisioning.ts';
import { waitUntil } from '../helpers/net.ts';
import { runningDeployment, startServices, type Services } from '../helpers/services.ts';

/**
 * The deployment state machine as the provisioner applies it: each step acts only from the states
 * the machine allows it in, whatever order the jobs arrive in. Steps run here one at a time, as a
 * duplicated, late or resumed job would run them; HTTP tests (provisioning.test.ts) cover the
 * steps as the workers chain them.
 */
let services: Services;
let owner: SessionPrincipal;
beforeAll(async () => {
  services = await startServices({ DEPLOYMENT_STUCK_AFTER_SECONDS: '0', MAX_ACTIVE_RESOURCES: '50' }, { cluster: { modelLoadMs: 50 } });
  owner = await services.owner();
});
afterAll(() => services.close());

const provisioner = () => services.container.provisioner;
const simulator = () => {
  if (!services.simulator) throw new Error('no simulator');
  return services.simulator;
};
const statusOf = async (id: string) => (await findDeployment(services.db, id))?.status;
const activeAllocations = (id: string) => services.db('gpu_allocations').where({ deployment_id: id, status: 'active' });
const launchesOf = (id: string) => simulator().launches.filter((launch) => launch.modelUid === engineModelUid(id));

const requested = async (model_name = 'qwen2.5-instruct') => (await services.container.deployments.create(owner, { model_name })).id;

const running = (model_name?: string) => runningDeployment(services, owner, model_name);

describe('the provisioner applies the deployment state machine', () => {
  it('places and launches nothing for a deployment deleted before its provision step ran', async () => {
    const id = await requested();
    await services.container.deployments.delete(owner, id);
    await provisioner().provision(id, services.log, false);
    expect(await statusOf(id)).toBe('terminating');
    expect(await activeAllocations(id)).toEqual([]);
    expect(launchesOf(id)).toEqual([]);
  });

  it('launches once when the provision step runs again (a retried or duplicated job)', async () => {
    const id = await requested();
    await provisioner().provision(id, services.log, false);
    await provisioner().provision(id, services.log, false);
    expect(await statusOf(id)).toBe('starting');
    expect(launchesOf(id)).toHaveLength(1);
    expect(await activeAllocations(id)).toHaveLength(1);
  });

  it('does not mark running a deployment deleted while its model loaded', async () => {
    const id = await requested('mistral-instruct-v0.3');
    await provisioner().provision(id, services.log, false);
    await services.container.deployments.delete(owner, id);
    const uid = engineModelUid(id);
    await waitUntil(async () => simulator().running().includes(uid), 'the engine to finish loading the model');
    await provisioner().awaitReady(id, services.log);
    expect(await statusOf(id)).toBe('terminating');
    await provisioner().terminate(id, services.log);
    expect(await statusOf(id)).toBe('terminated');
    expect(simulator().running()).not.toContain(uid);
    expect(await activeAllocations(id)).toEqual([]);
  });

  it('leaves a running deployment, its model and its GPUs alone when a cleanup step arrives for it', async () => {
    const id = await running('glm4-chat');
    await provisioner().terminate(id, services.log);
    expect(await statusOf(id)).toBe('running');
    expect(simulator().running()).toContain(engineModelUid(id));
    expect(await activeAllocations(id)).toHaveLength(1);
  });

  it('changes nothing when a failure is reported for a terminated deployment', async () => {
    const id = await running('Yi-1.5-chat');
    await services.container.deployments.delete(owner, id);
    await provisioner().terminate(id, services.log);
    expect(await statusOf(id)).toBe('terminated');
    await provisioner().fail(id, 'health_check', 'a late report', services.log);
    expect(await findDeployment(services.db, id)).toMatchObject({ status: 'terminated', failure_stage: null, failure_reason: null });
  });

  it('resumes the step of a deployment whose worker took the job and died', async () => {
    const id = await requested('phi-3-mini-128k-instruct');
    const boss = services.container.boss;
    // A worker takes the queued provision job, then dies before moving the deployment on.
    const taken = await boss.fetch<{ deploymentId: string }>(PROVISION_QUEUE, { batchSize: 100 });
    expect(taken.map((job) => job.data.deploymentId)).toContain(id);
    await provisioner().reconcile(services.log);
    const resumed = await boss.fetch<{ deploymentId: string }>(PROVISION_QUEUE, { batchSize: 100 });
    expect(resumed.map((job) => job.data.deploymentId)).toContain(id);
    expect(await statusOf(id)).toBe('requested');
  });
});
