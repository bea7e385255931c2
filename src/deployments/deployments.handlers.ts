import type { Handlers } from '../http/types.ts';
import type { DeploymentsService } from './deployments.service.ts';

type DeploymentHandlers = Pick<Handlers, 'listDeployments' | 'getDeployment' | 'getDeploymentMetrics' | 'createDeployment' | 'planDeployment' | 'updateDeployment' | 'deleteDeployment'>;

export function deploymentHandlers(deps: { deployments: DeploymentsService }): DeploymentHandlers {
  const { deployments } = deps;
  return {
    listDeployments: async (context) => ({ status: 200, body: await deployments.list(context.auth, context.query) }),
    getDeployment: async (context) => ({ status: 200, body: await deployments.get(context.auth, context.params.deployment_id) }),
    getDeploymentMetrics: async (context) => ({ status: 200, body: await deployments.metrics(context.auth, context.params.deployment_id, context.query) }),
    createDeployment: async (context) => ({ status: 201, body: await deployments.create(context.auth, context.body) }),
    planDeployment: async (context) => ({ status: 200, body: await deployments.plan(context.auth, context.body) }),
    updateDeployment: async (context) => ({ status: 200, body: await deployments.update(context.auth, context.params.deployment_id, context.body) }),
    deleteDeployment: async (context) => ({ status: 200, body: await deployments.delete(context.auth, context.params.deployment_id) }),
  };
}
