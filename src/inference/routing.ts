import type { Knex } from 'knex';
import type { Principal } from '../accounts/principal.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { maySoonServe, type DeploymentStatus } from '../deployments/deployment-states.ts';
import { isUuid } from '../deployments/deployments.repository.ts';
import { AppError } from '../errors.ts';

/** Where an inference request goes. */
export interface Target {
  deploymentId: string;
  organizationId: number;
  modelName: string;
  engineModelUid: string;
  /** The engine's base URL and the cluster credential to send it. */
  endpoint: string;
  authorization: string | undefined;
}

interface Candidate {
  id: string;
  organization_id: number;
  user_id: number;
  model_name: string;
  status: string;
  engine_model_uid: string | null;
  cluster_id: string | null;
  endpoint: string | null;
  sealed_credential: string | null;
  created_at: Date;
}

/** How long what a caller may call is trusted without a lookup, in this process. */
const CACHE_MS = 2_000;

const notFound = (model: string) =>
  new AppError('NOT_FOUND', `The model \`${model}\` does not exist or you do not have access to it.`, { inference: { code: 'model_not_found', param: 'model' } });

/**
 * Resolves the body's `model` (DESIGN.md §3 Inference routing): a deployment id, or a model name
 * unambiguous among the caller's running deployments: for a session, the user's own in their
 * current organization; for a key, its scoped deployments. One query per caller, cached 2 s.
 */
export class InferenceRouter {
  readonly #db: Knex;
  readonly #clusters: ClustersService;
  readonly #cache = new Map<string, { at: number; candidates: Candidate[] }>();

  constructor(deps: { db: Knex; clusters: ClustersService }) {
    this.#db = deps.db;
    this.#clusters = deps.clusters;
  }

  async resolve(principal: Principal, model: unknown): Promise<Target> {
    if (typeof model !== 'string' || !model) {
      throw new AppError('VALIDATION_FAILED', '`model` is required: a deployment id or a model name.', {
        inference: { code: 'missing_required_parameter', param: 'model' },
      });
    }
    const candidates = await this.#candidates(principal);
    const reachable = candidates.filter((c) => principal.kind === 'session' || principal.deploymentIds.has(c.id));
    let chosen: Candidate | undefined;
    if (isUuid(model)) {
      chosen = reachable.find((c) => c.id === model);
      if (!chosen && principal.kind === 'apiKey' && candidates.some((c) => c.id === model)) {
        throw new AppError('FORBIDDEN', `This API key may not call the deployment ${model}.`, { inference: { code: 'model_not_in_key_scope', param: 'model' } });
      }
    } else {
      const running = reachable.filter((c) => c.model_name === model && c.status === 'running');
      if (running.length > 1) {
        throw new AppError('VALIDATION_FAILED', `Several of your running deployments serve \`${model}\`; send a deployment id as \`model\`.`, {
          inference: { code: 'model_ambiguous', param: 'model' },
        });
      }
      chosen = running[0];
      if (!chosen && principal.kind === 'apiKey' && candidates.some((c) => c.model_name === model && c.status === 'running')) {
        throw new AppError('FORBIDDEN', `This API key may not call \`${model}\`.`, { inference: { code: 'model_not_in_key_scope', param: 'model' } });
      }
    }
    if (!chosen) throw notFound(model);
    if (chosen.status !== 'running' || !chosen.endpoint || !chosen.engine_model_uid) {
      if (!maySoonServe(chosen.status as DeploymentStatus)) {
        throw new AppError('NOT_FOUND', `The deployment ${chosen.id} is ${chosen.status} and will not serve again; deploy anew.`, {
          inference: { code: 'deployment_stopped', param: 'model' },
        });
      }
      throw new AppError('SERVICE_UNAVAILABLE', `The deployment ${chosen.id} is ${chosen.status}, not running yet; retry shortly.`, {
        headers: { 'Retry-After': '10' },
        inference: { code: 'deployment_not_running', param: 'model' },
      });
    }
    return {
      deploymentId: chosen.id,
      organizationId: chosen.organization_id,
      modelName: chosen.model_name,
      engineModelUid: chosen.engine_model_uid,
      endpoint: chosen.endpoint,
      authorization: this.#clusters.authorizationHeader(chosen.sealed_credential),
    };
  }

  /** The running deployments the caller may call, for `GET /v1/models`. */
  async models(principal: Principal) {
    const candidates = await this.#candidates(principal);
    return candidates
      .filter((c) => c.status === 'running' && (principal.kind === 'session' || principal.deploymentIds.has(c.id)))
      .map((c) => ({
        id: c.id,
        object: 'model' as const,
        created: Math.floor(c.created_at.getTime() / 1000),
        owned_by: 'organization',
        model_name: c.model_name,
        deployment_id: c.id,
      }));
  }

  async #candidates(principal: Principal): Promise<Candidate[]> {
    const key = principal.kind === 'session' ? `s:${principal.user.id}:${principal.organization?.id}` : `k:${principal.keyId}`;
    const cached = this.#cache.get(key);
    if (cached && Date.now() - cached.at < CACHE_MS) return cached.candidates;
    const query = this.#db('deployments as d')
      .leftJoin('clusters as c', 'c.id', 'd.cluster_id')
      .whereNot('d.status', 'terminated')
      .select('d.id', 'd.organization_id', 'd.user_id', 'd.model_name', 'd.status', 'd.engine_model_uid', 'd.cluster_id', 'd.created_at', 'c.endpoint', 'c.sealed_credential')
      .orderBy('d.created_at', 'desc');
    if (principal.kind === 'session') {
      query.where({ 'd.user_id': principal.user.id, 'd.organization_id': principal.organization?.id ?? 0 });
    } else {
      // The whole organization, to tell "outside the key's scope" from "unknown".
      query.where('d.organization_id', principal.organizationId);
    }
    const candidates: Candidate[] = await query;
    this.#cache.set(key, { at: Date.now(), candidates });
    return candidates;
  }
}
