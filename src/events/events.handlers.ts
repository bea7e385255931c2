import type { SessionStore } from '../accounts/sessions.ts';
import type { DeploymentsService } from '../deployments/deployments.service.ts';
import { AppError } from '../errors.ts';
import type { Handlers } from '../http/types.ts';
import type { DeploymentEventStreams } from './event-streams.ts';
import { STREAMED } from '../http/operation-call.ts';

type EventHandlers = Pick<Handlers, 'streamDeploymentEvents'>;


export function eventHandlers(deps: { deployments: DeploymentsService; eventStreams: DeploymentEventStreams; sessions: SessionStore }): EventHandlers {
  const { deployments, eventStreams, sessions } = deps;
  return {
    streamDeploymentEvents: async (context) => {
      const id = context.params.deployment_id;
      const principal = context.auth;
      // Scoped as getDeployment: 404 for a deployment that is not the caller's.
      const deployment = await deployments.get(principal, id);
      const lastEventId = context.headers['last-event-id'];
      eventStreams.open(context.req, context.res, {
        deploymentId: id,
        lastEventId: typeof lastEventId === 'string' ? lastEventId : undefined,
        status: deployment.status,
        owner: {
          userId: principal.user.id,
          // The session still exists and, as it is now, still reaches the deployment (same rule as at open).
          stillAllowed: async () => {
            const now = await sessions.load(principal.sessionId);
            if (!now) return false;
            return deployments.get(now, id).then(
              () => true,
              (error: unknown) => {
                if (error instanceof AppError) return false;
                throw error;
              },
            );
          },
        },
      });
      return STREAMED;
    },
  };
}
