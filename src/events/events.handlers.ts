import type { DeploymentsService } from '../deployments/deployments.service.ts';
import type { Handlers } from '../http/types.ts';
import type { DeploymentEventStreams } from './event-streams.ts';

type EventHandlers = Pick<Handlers, 'streamDeploymentEvents'>;

/** The handler has written the answer itself (a stream); the dispatcher sends nothing more. */
const STREAMED = { status: 200, body: undefined } as never;

export function eventHandlers(deps: { deployments: DeploymentsService; eventStreams: DeploymentEventStreams }): EventHandlers {
  const { deployments, eventStreams } = deps;
  return {
    streamDeploymentEvents: async (context) => {
      const id = context.params.deployment_id;
      // Scoped as getDeployment: 404 for a deployment that is not the caller's.
      const deployment = await deployments.get(context.auth, id);
      const lastEventId = context.headers['last-event-id'];
      eventStreams.open(context.req, context.res, id, typeof lastEventId === 'string' ? lastEventId : undefined, deployment.status);
      return STREAMED;
    },
  };
}
