import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { components } from '../../generated/api.d.ts';
import { requireVerifiedEmail, type Principal } from '../principal.ts';
import type { ClustersService } from '../clusters/clusters.service.ts';
import { maySoonServe, SERVING, type DeploymentStatus } from '../deployments/deployment-states.ts';
import { isUuid } from '../validation.ts';
import { AppError } from '../errors.ts';
import { hostedCallRefusal, loadGuardInputs, type DeploymentGuardSettings } from '../billing/deployment-guard.ts';
import { modelTraits, type ModelTraits } from '../catalog/catalog.repository.ts';
import { findHostedRoutes, type HostedRoute } from '../hosted/hosted-models.repository.ts';
import { findRoutingCandidates, type Candidate, type ReadyReplica } from './inference.repository.ts';
import { notServingYet, type ColdStarts } from './cold-start.ts';
import type { DeploymentLoad } from './deployment-load.ts';
import type { RequestNote } from './request-metrics.ts';

export type { Candidate } from './inference.repository.ts';

/** Where an inference request goes. */
export interface Target {
  /** Null for a hosted model (served on the platform's hosted cluster, metered as `hosted_tokens`). */
  deploymentId: string | null;
  organizationId: number;
  modelName: string;
  /** The deployment's replica the request goes to; null for a hosted model. */
  replicaId: string | null;
  /** The engine's id of the model the request goes to (the replica's). */
  engineModelUid: string;
  clusterId: string;
  /** The engine's base URL and the cluster credential to send it. */
  endpoint: string;
  authorization: string | undefined;
  /** The model's context length in tokens, null when unknown (the most one request can use). */
  contextLength: number | null;
  /** The model's abilities in the catalog (Xinference's): which routes it serves. */
  abilities: readonly string[];
}

/** A model the caller may call, as `GET /v1/models` lists it. */
export type ListedModel = components['schemas']['InferenceModel'];

/** Who is calling, as far as routing is concerned: a session reaches its candidates, a key its scope. */
export type Caller = { kind: 'session' } | { kind: 'apiKey'; deploymentIds: ReadonlySet<string> };

/** How long an organization's billing state (payment setup, spending limit) is trusted for hosted calls, in this process. */
const BILLING_CACHE_MS = 10_000;
/** How long the catalog's model traits (context lengths, abilities) are trusted without a lookup, in this process (they change with a migration). */
const CATALOG_CACHE_MS = 60_000;
/** How long what a caller may call is trusted without a lookup, in this process. */
const CACHE_MS = 2_000;
/** When a caller may try again a deployment whose cluster's credentials were refused. */
const CREDENTIALS_RETRY_AFTER_SECONDS = 60;

const missingModel = () =>
  new AppError('VALIDATION_FAILED', '`model` is required: a deployment id or a model name.', { inference: { code: 'missing_required_parameter', param: 'model' } });

/** Refusals after which a model name is looked up among the hosted models. */
const HOSTED_FALLBACK: ReadonlySet<string | undefined> = new Set(['model_not_found', 'model_not_in_key_scope']);

const notFound = (model: string) =>
  new AppError('NOT_FOUND', `The model \`${model}\` does not exist or you do not have access to it.`, { inference: { code: 'model_not_found', param: 'model' } });

const ambiguous = (model: string) =>
  new AppError('VALIDATION_FAILED', `Several of your running deployments serve \`${model}\`; send a deployment id as \`model\`.`, {
    inference: { code: 'model_ambiguous', param: 'model' },
  });

/** The traits of a model the catalog does not have: no context length, no ability. */
const UNKNOWN_TRAITS: ModelTraits = { contextLength: null, abilities: [] };

/**
 * The routing rule (DESIGN.md §3 Inference routing), pure: picks the deployment `model` names among
 * the candidates (the caller's organization's deployments, or for a session the user's own), or
 * throws the refusal the caller gets. `model` is a deployment id, or a model name unambiguous among
 * the caller's running deployments (a key's scoped ones). A deployment serves only while it is
 * running (with a replica ready, or held for one: `resolve`) and its cluster is usable: a cluster whose engine refused the platform's credentials
 * (in `unusableClusters`, or `credentials_invalid`) is not called at all, since every refused
 * bearer counts toward the engine's ban of the platform's address.
 */
export function chooseTarget(caller: Caller, model: unknown, candidates: readonly Candidate[], unusableClusters: ReadonlySet<string> = new Set()): Candidate {
  if (typeof model !== 'string' || !model) throw missingModel();
  const reachable = caller.kind === 'session' ? candidates : candidates.filter((c) => caller.deploymentIds.has(c.id));
  let chosen: Candidate | undefined;
  if (isUuid(model)) {
    chosen = reachable.find((c) => c.id === model);
    if (!chosen && caller.kind === 'apiKey' && candidates.some((c) => c.id === model)) {
      throw new AppError('FORBIDDEN', `This API key may not call the deployment ${model}.`, { inference: { code: 'model_not_in_key_scope', param: 'model' } });
    }
  } else {
    const running = reachable.filter((c) => c.model_name === model && c.status === SERVING);
    if (running.length > 1) throw ambiguous(model);
    chosen = running[0];
    if (!chosen && caller.kind === 'apiKey' && candidates.some((c) => c.model_name === model && c.status === SERVING)) {
      throw new AppError('FORBIDDEN', `This API key may not call \`${model}\`.`, { inference: { code: 'model_not_in_key_scope', param: 'model' } });
    }
  }
  if (!chosen) throw notFound(model);
  if (chosen.status !== SERVING || !chosen.endpoint || !chosen.cluster_id) {
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
  if (chosen.cluster_status === 'credentials_invalid' || unusableClusters.has(chosen.cluster_id)) {
    throw new AppError('SERVICE_UNAVAILABLE', `The deployment ${chosen.id} cannot be reached: its cluster refused the platform's credentials, and an operator has been alerted. Retry later.`, {
      headers: { 'Retry-After': String(CREDENTIALS_RETRY_AFTER_SECONDS) },
      inference: { code: 'engine_unavailable', param: 'model' },
    });
  }
  return chosen;
}

/**
 * The replica of a chosen deployment a request goes to: the ready one with the fewest requests in
 * flight from this process (`inFlight`), the first by ordinal among equals; undefined when none is
 * ready (scaled to zero, or its replicas being replaced: the request is held for a cold start).
 */
export function chooseReplica(chosen: Candidate, inFlight: (replicaId: string) => number = () => 0): ReadyReplica | undefined {
  let best: ReadyReplica | undefined;
  let fewest = Number.POSITIVE_INFINITY;
  for (const replica of chosen.replicas) {
    const count = inFlight(replica.id);
    if (count < fewest) [best, fewest] = [replica, count];
  }
  return best;
}

/**
 * Resolves the body's `model` to a target (see `chooseTarget`): one query per caller, cached 2 s
 * (concurrent misses share it).
 * When an engine refuses a cluster's inference credential, the cluster is marked
 * `credentials_invalid` (ClustersService: the operator is alerted) and this process stops calling
 * it at once; every other process stops when the mark's notification reaches it (`clusterChanged`,
 * through the change listener), not when its cache expires.
 */
export class InferenceRouter {
  readonly #db: Knex;
  readonly #clusters: ClustersService;
  readonly #log: Logger;
  readonly #cache = new Map<string, { at: number; rows: Candidate[] | HostedRoute[] }>();
  /** Queries under way, by caller: the requests that miss the cache together share one. */
  readonly #queries = new Map<string, Promise<Candidate[] | HostedRoute[]>>();
  /** Clusters refused here, until every cached read shows the mark in the database. */
  readonly #refused = new Map<string, { until: number }>();

  /** Each catalog model's traits, shared by every caller. */
  #modelTraits: { at: number; traits: Promise<Map<string, ModelTraits>> } | undefined;

  readonly #billing: DeploymentGuardSettings;
  /** Each organization's answer to `hostedCallRefusal`, for BILLING_CACHE_MS (concurrent misses share one read). */
  readonly #billingVerdicts = new Map<number, { at: number; refusal: Promise<AppError | undefined> }>();

  /** This process's requests by deployment and replica (the autoscaler's load), and the cold-start holds; absent in tests of routing alone. */
  readonly #load: DeploymentLoad | undefined;
  readonly #coldStarts: ColdStarts | undefined;

  constructor(deps: { db: Knex; clusters: ClustersService; log: Logger; billing?: DeploymentGuardSettings; load?: DeploymentLoad; coldStarts?: ColdStarts }) {
    this.#db = deps.db;
    this.#load = deps.load;
    this.#coldStarts = deps.coldStarts;
    this.#clusters = deps.clusters;
    this.#log = deps.log;
    this.#billing = deps.billing ?? { enforcement: false };
  }

  /**
   * The target of a call naming `model`. A deployment's request is counted in flight on the chosen
   * replica from here: the caller calls `done` with the target once its answer has ended. A running
   * deployment with no replica ready holds the request for its cold start (`ColdStarts`), at most
   * `scaleUpTimeoutSeconds` when the caller sent `X-Scale-Up-Timeout`. The chosen deployment, and
   * how long a cold start held the request, are noted on `note` (the request's metrics) as soon as
   * they are known, so that a refusal afterwards counts for the deployment too.
   */
  async resolve(principal: Principal, model: unknown, options: { scaleUpTimeoutSeconds?: number | undefined; note?: RequestNote | undefined } = {}): Promise<Target> {
    if (typeof model !== 'string' || !model) throw missingModel();
    let chosen: Candidate;
    try {
      chosen = chooseTarget(principal, model, await this.#candidates(principal), this.#unusable());
    } catch (error) {
      // A name no running deployment of the caller's serves may be a hosted model: the caller's
      // own deployment always takes precedence, and the hosted routes are one cached lookup for all.
      if (!(error instanceof AppError) || !HOSTED_FALLBACK.has(error.inference?.code) || isUuid(model)) throw error;
      return (await this.#hosted(principal, model)) ?? Promise.reject(error);
    }
    const note = options.note;
    if (note) note.metricsDeploymentId = chosen.id;
    let replica = this.#replicaOf(chosen);
    if (!replica) {
      if (!this.#coldStarts) throw notServingYet(chosen.id, 'has no replica ready');
      const heldAt = performance.now();
      try {
        await this.#coldStarts.hold(chosen.id, options.scaleUpTimeoutSeconds);
      } finally {
        if (note) note.metricsHeldMs = performance.now() - heldAt;
      }
      // Routed anew: the replica that became ready, or the refusal of what the deployment became.
      this.#cache.clear();
      chosen = chooseTarget(principal, model, await this.#candidates(principal), this.#unusable());
      replica = this.#replicaOf(chosen);
      if (!replica) throw notServingYet(chosen.id, 'has no replica ready');
    }
    this.#load?.begin(chosen.id, replica.id);
    return {
      deploymentId: chosen.id,
      organizationId: chosen.organization_id,
      modelName: chosen.model_name,
      replicaId: replica.id,
      engineModelUid: replica.engine_model_uid,
      clusterId: chosen.cluster_id as string,
      endpoint: chosen.endpoint as string,
      authorization: this.#clusters.authorizationHeader(chosen.sealed_credential),
      ...(await this.#traits(chosen.model_name)),
    };
  }

  /** The request to `target` has ended (its answer done, or it failed): it is no longer in flight. */
  done(target: Target): void {
    if (target.deploymentId && target.replicaId) this.#load?.end(target.deploymentId, target.replicaId);
  }

  /** A deployment's replicas changed (CHANGE_CHANNELS.replicas, from any process): routes are read anew, so a draining replica gets no new request. */
  replicasChanged(deploymentId: string): void {
    this.#cache.clear();
    this.#coldStarts?.replicasChanged(deploymentId);
  }

  #replicaOf(chosen: Candidate): ReadyReplica | undefined {
    const load = this.#load;
    return chooseReplica(chosen, load ? (replicaId) => load.inFlightOn(chosen.id, replicaId) : undefined);
  }

  /**
   * The engine refused the cluster's inference credential: no more calls to it from this process,
   * and the cluster is marked `credentials_invalid` for every process (retried until written).
   */
  credentialsRefused(target: Pick<Target, 'clusterId'>, reason: string): void {
    const { clusterId } = target;
    if ((this.#refused.get(clusterId)?.until ?? 0) > Date.now()) return;
    this.#refused.set(clusterId, { until: Number.POSITIVE_INFINITY });
    const mark = () => {
      this.#clusters.markCredentialsInvalid(clusterId, reason).then(
        // Cache entries are stamped when their query started: past this, every one shows the mark.
        () => this.#refused.set(clusterId, { until: Date.now() + CACHE_MS }),
        (error: unknown) => {
          this.#log.error({ err: error, cluster_id: clusterId }, 'the cluster could not be marked credentials_invalid; retrying');
          setTimeout(mark, 5_000).unref();
        },
      );
    };
    mark();
  }

  /**
   * A cluster's status changed, in this process or another (CHANGE_CHANNELS.cluster, payload
   * `<id> <status>`): a cluster whose credentials were refused is not called from here from now on,
   * though reads started before may still show it active (they expire within CACHE_MS); the cached
   * reads are dropped, so the next one shows the new status.
   */
  clusterChanged(payload: string): void {
    const [clusterId, status] = payload.split(' ');
    if (!clusterId) return;
    this.#cache.clear();
    if (status !== 'credentials_invalid') {
      this.#refused.delete(clusterId);
      return;
    }
    const until = Date.now() + CACHE_MS;
    if ((this.#refused.get(clusterId)?.until ?? 0) >= until) return;
    if (!this.#refused.has(clusterId)) this.#log.info({ cluster_id: clusterId }, 'the engine refused the cluster credentials (seen by another process): no more calls to it from this one');
    this.#refused.set(clusterId, { until });
  }

  /** Changes may have been missed (the change listener reconnected): every cached read is dropped. */
  forgetAll(): void {
    this.#cache.clear();
    this.#coldStarts?.resync();
  }

  /** The running deployments the caller may call, then the hosted models it may call, for `GET /v1/models`. */
  async models(principal: Principal): Promise<ListedModel[]> {
    const candidates = await this.#candidates(principal);
    const deployments = candidates
      .filter((c) => c.status === SERVING && (principal.kind === 'session' || principal.deploymentIds.has(c.id)))
      .map((c) => ({
        id: c.id,
        object: 'model' as const,
        created: Math.floor(c.created_at.getTime() / 1000),
        owned_by: 'organization',
        model_name: c.model_name,
        deployment_id: c.id as string | null,
      }));
    if (principal.kind === 'apiKey' && !principal.allowHostedModels) return deployments;
    const hosted = new Map<string, HostedRoute>();
    for (const route of await this.#hostedRoutes()) if (!hosted.has(route.model_name)) hosted.set(route.model_name, route);
    return [
      ...deployments,
      ...[...hosted.values()].map((route) => ({
        id: route.model_name,
        object: 'model' as const,
        created: Math.floor(route.created_at.getTime() / 1000),
        owned_by: 'system',
        model_name: route.model_name,
        deployment_id: null,
      })),
    ];
  }

  /**
   * The model `model` names, for `GET /v1/models/{model}`: the entry `models` lists for it. A
   * deployment id names its deployment; a name routes as a call's `model` does, to the caller's
   * running deployment of it (400 `model_ambiguous` when several serve it), else to the hosted
   * model. Anything the listing does not show answers 404 `model_not_found`: a deployment outside a
   * key's scope or not running, and a hosted model for a key without `allow_hosted_models`, are
   * unknown to the caller here, as at OpenAI.
   */
  async model(principal: Principal, model: string): Promise<ListedModel> {
    const listed = await this.models(principal);
    if (isUuid(model)) return listed.find((entry) => entry.deployment_id === model) ?? Promise.reject(notFound(model));
    const deployments = listed.filter((entry) => entry.deployment_id !== null && entry.model_name === model);
    if (deployments.length > 1) throw ambiguous(model);
    return deployments[0] ?? listed.find((entry) => entry.deployment_id === null && entry.id === model) ?? Promise.reject(notFound(model));
  }

  /**
   * The hosted model `model` names, as a target billed to the caller's organization; undefined when
   * no hosted model has that name. A key needs `allow_hosted_models`; a hosted model whose every
   * cluster refused the platform's credentials answers 503 as a deployment's would.
   */
  async #hosted(principal: Principal, model: string): Promise<Target | undefined> {
    const routes = (await this.#hostedRoutes()).filter((r) => r.model_name === model);
    const organizationId = principal.kind === 'session' ? principal.organization?.id : principal.organizationId;
    if (!routes.length || organizationId === undefined) return undefined;
    if (principal.kind === 'apiKey' && !principal.allowHostedModels) {
      throw new AppError('FORBIDDEN', `This API key may not call the hosted model \`${model}\`: an admin can turn on the key's \`allow_hosted_models\`.`, {
        inference: { code: 'model_not_in_key_scope', param: 'model' },
      });
    }
    // A key of an unverified account cannot exist (keys need a verified creator); a session is checked here.
    if (principal.kind === 'session') requireVerifiedEmail(principal, 'call hosted models');
    const refusal = await this.#billingRefusal(organizationId);
    if (refusal) throw refusal;
    const unusable = this.#unusable();
    const route = routes.find((r) => r.cluster_status !== 'credentials_invalid' && !unusable.has(r.cluster_id));
    if (!route) {
      throw new AppError('SERVICE_UNAVAILABLE', `The hosted model \`${model}\` cannot be reached: its cluster refused the platform's credentials, and an operator has been alerted. Retry later.`, {
        headers: { 'Retry-After': String(CREDENTIALS_RETRY_AFTER_SECONDS) },
        inference: { code: 'engine_unavailable', param: 'model' },
      });
    }
    return {
      deploymentId: null,
      organizationId,
      modelName: route.model_name,
      replicaId: null,
      engineModelUid: route.engine_model_uid,
      clusterId: route.cluster_id,
      endpoint: route.endpoint,
      authorization: this.#clusters.authorizationHeader(route.sealed_credential),
      ...(await this.#traits(route.model_name)),
    };
  }

  /**
   * Under BILLING_ENFORCEMENT, a hosted call is billed to an organization that may create a
   * deployment: payment set up and its spending limit not reached (`hostedCallRefusal`); else 429
   * `insufficient_quota`, as OpenAI answers an account with no billing. Read once per organization
   * per BILLING_CACHE_MS in this process, so a hosted call costs no extra query in between.
   */
  async #billingRefusal(organizationId: number): Promise<AppError | undefined> {
    if (!this.#billing.enforcement) return undefined;
    const now = Date.now();
    let entry = this.#billingVerdicts.get(organizationId);
    if (!entry || now - entry.at >= BILLING_CACHE_MS) {
      const refusal = loadGuardInputs(this.#db, organizationId).then((inputs) => hostedCallRefusal(inputs, this.#billing)).then((found) =>
        found
          ? new AppError(found.code, `${found.detail} Hosted models need it too.`, {
              headers: { 'Retry-After': String(BILLING_CACHE_MS / 1000), 'x-should-retry': 'false' },
              inference: { code: 'insufficient_quota', status: 429 },
            })
          : undefined,
      );
      entry = { at: now, refusal };
      this.#billingVerdicts.set(organizationId, entry);
      refusal.catch(() => this.#billingVerdicts.delete(organizationId));
    }
    return entry.refusal;
  }

  /** The running hosted models, the same for every caller: one query, cached 2 s (concurrent misses share it). */
  #hostedRoutes(): Promise<HostedRoute[]> {
    return this.#cached(HOSTED_KEY, () => findHostedRoutes(this.#db)) as Promise<HostedRoute[]>;
  }

  /** The model's context length and abilities (the catalog's, read once per CATALOG_CACHE_MS for every model). */
  async #traits(model: string): Promise<ModelTraits> {
    const now = Date.now();
    if (!this.#modelTraits || now - this.#modelTraits.at >= CATALOG_CACHE_MS) {
      const traits = modelTraits(this.#db);
      this.#modelTraits = { at: now, traits };
      traits.catch(() => (this.#modelTraits = undefined));
    }
    return (await this.#modelTraits.traits).get(model) ?? UNKNOWN_TRAITS;
  }

  #unusable(): ReadonlySet<string> {
    if (this.#refused.size === 0) return EMPTY;
    const now = Date.now();
    for (const [clusterId, { until }] of this.#refused) if (until <= now) this.#refused.delete(clusterId);
    return new Set(this.#refused.keys());
  }

  async #candidates(principal: Principal): Promise<Candidate[]> {
    const key = principal.kind === 'session' ? `s:${principal.user.id}:${principal.organization?.id}` : `k:${principal.keyId}`;
    // A key reaches the whole organization, to tell "outside the key's scope" from "unknown".
    return this.#cached(key, () =>
      findRoutingCandidates(
        this.#db,
        principal.kind === 'session' ? { userId: principal.user.id, organizationId: principal.organization?.id ?? 0 } : { organizationId: principal.organizationId },
      ),
    ) as Promise<Candidate[]>;
  }

  /** What `query` reads, trusted for CACHE_MS under `key`; the requests that miss together share one query. */
  async #cached(key: string, query: () => Promise<Candidate[] | HostedRoute[]>): Promise<Candidate[] | HostedRoute[]> {
    const cached = this.#cache.get(key);
    const started = Date.now();
    if (cached && started - cached.at < CACHE_MS) return cached.rows;
    let pending = this.#queries.get(key);
    if (!pending) {
      pending = query()
        .then((rows) => {
          this.#cache.set(key, { at: started, rows });
          return rows;
        })
        .finally(() => this.#queries.delete(key));
      this.#queries.set(key, pending);
    }
    return pending;
  }
}

const EMPTY: ReadonlySet<string> = new Set();
/** The cache key of the hosted routes (callers' keys start with `s:` or `k:`). */
const HOSTED_KEY = 'hosted';
