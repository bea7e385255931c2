import { sessionOf } from '../accounts/accounts.handlers.ts';
import type { Handlers } from '../http/types.ts';
import type { DeploymentsService } from './deployments.service.ts';

type DeploymentHandlers = Pick<Handlers, 'listDeployments' | 'getDeployment' | 'createDeployment' | 'deleteDeployment'>;

export function deploymentHandlers(deps: { deployments: DeploymentsService }): DeploymentHandlers {
  const { deployments } = deps;
  return {
    listDeployments: async (context) => ({ status: 200, body: await deployments.list(sessionOf(context), context.query) }),
    getDeployment: async (context) => ({ status: 200, body: await deployments.get(sessionOf(context), context.params.deployment_id) }),
    createDeployment: async (context) => ({ status: 201, body: await deployments.create(sessionOf(context), context.body) }),
    deleteDeployment: async (context) => ({ status: 200, body: await deployments.delete(sessionOf(context), context.params.deployment_id) }),
  };
}
