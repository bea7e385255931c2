import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { Logger } from 'pino';
import type { components } from '../../generated/api.d.ts';
import { requireOrganization, type SessionPrincipal } from '../principal.ts';
import { deploymentGuardVerdicts, firstRefusal, loadGuardInputs, lockGuardInputs, type DeploymentGuardSettings } from '../billing/deployment-guard.ts';
import type { CatalogModel, CatalogService } from '../catalog/catalog.service.ts';
import type { Keyring } from '../crypto.ts';
import type { DeploymentRow } from '../db/models/deployments.ts';
import { AppError } from '../errors.ts';
import { enqueue } from '../jobs/queue.ts';
import { SERVING, transition, type DeploymentStatus } from './deployment-states.ts';
import { toDeploymentPlan, type DeploymentPlan } from './deployment-plan.ts';
import {
  countActiveDeployments,
  findDeploymentOf,
  gpuServicePrices,
  listDeploymentsOf,
  NO_REPLICAS,
  readPlacementCandidates,
  replicaCosts,
  replicaCountsOf,
  toCandidate,
  toDeployment,
  updateScaling,
  type Deployment,
  type PlacementOption,
  type Scope,
} from './deployments.repository.ts';
import { insertDeployment, moveDeployment, recordScale } from './deployment-changes.ts';
import { capacityOf, offeredInstanceTypes, planPlacement, replicasThatFit, requiredGpuMemoryGb } from './instance-selection.ts';
import { checkFixedFields, desiredWithin, initialReplicas, settingsOnCreate, settingsOnUpdate, settingsScaleMessage } from './scaling-settings.ts';
import { requestScale, wakeAutoscaler } from './scaling.ts';
import { resolveLaunch, type ResolvedLaunch } from './launch-spec.ts';
import { ListCursors } from './list-cursor.ts';
import { PROVISION_QUEUE, TERMINATE_QUEUE } from './provisioning.ts';
import { readOnlySnapshot } from '../db/query.ts';
import { deploymentSeries } from '../metrics/metric-series.ts';
import type { MetricsQuery } from '../metrics/metrics-window.ts';

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];
type UpdateDeploymentRequest = components['schemas']['UpdateDeploymentRequest'];
type DeploymentMetrics = components['schemas']['DeploymentMetrics'];

export interface Page<T> {
  items: T[];
  total: number;
  limit: number;
  offset: number;
}

/** A page that also says where the next one starts (null on the last page). */
export interface CursorPage<T> extends Page<T> {
  next_cursor: string | null;
}

/**
 * Deployments as the API offers them, scoped to the caller (their own, in their current
 * organization). Creating stores a `requested` deployment and enqueues its provisioning in the same
 * transaction; planning answers what creating would do, writing nothing; updating changes its
 * scaling settings and asks for its replicas to follow; deleting moves it to `terminating` and
 * enqueues the cleanup.
 */
export class DeploymentsService {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #catalog: CatalogService;
  readonly #billing: DeploymentGuardSettings;
  readonly #cursors: ListCursors;

  readonly #log: Logger;

  constructor(deps: { db: Knex; boss: PgBoss; catalog: CatalogService; billing: DeploymentGuardSettings; keyring: Keyring; log: Logger }) {
    this.#log = deps.log;
    this.#db = deps.db;
    this.#cursors = new ListCursors(deps.keyring);
    this.#boss = deps.boss;
    this.#catalog = deps.catalog;
    this.#billing = deps.billing;
  }

  /**
   * A page of the caller's deployments, newest first: `offset` items in, or after the position an
   * opaque cursor (`after`, a previous page's `next_cursor`) carries; never both. `next_cursor`
   * points after this page's last item, null on the last page. `total` is exact whatever the page.
   */
  async list(principal: SessionPrincipal, page: { limit?: number; offset?: number; after?: string }): Promise<CursorPage<Deployment>> {
    const limit = page.limit ?? 100;
    const offset = page.offset ?? 0;
    const scope = this.#scope(principal);
    if (page.after !== undefined && offset !== 0) {
      throw new AppError('VALIDATION_FAILED', 'Send either `after` or `offset`, not both: a cursor already says where the page starts.', {
        errors: [{ location: 'query/offset', message: 'must be 0 or absent when `after` is given' }],
      });
    }
    const after = page.after === undefined ? undefined : this.#cursors.read(scope, page.after);
    const { rows, total, next } = await listDeploymentsOf(this.#db, scope, { limit, offset, after });
    return { items: rows.map((row) => toDeployment(row)), total, limit, offset, next_cursor: next ? this.#cursors.write(scope, next) : null };
  }

  async get(principal: SessionPrincipal, id: string): Promise<Deployment> {
    return this.#shown(this.#db, await this.#find(this.#db, principal, id));
  }

  /** The deployment's request metrics over the query's range (src/metrics/metric-series.ts), scoped as `get`. */
  async metrics(principal: SessionPrincipal, id: string, query: MetricsQuery): Promise<DeploymentMetrics> {
    const row = await this.#find(this.#db, principal, id);
    return { deployment_id: row.id, ...(await deploymentSeries(this.#db, row.id, query)) };
  }

  async create(principal: SessionPrincipal, input: CreateDeploymentRequest): Promise<Deployment> {
    const organization = requireOrganization(principal);
    const { model, launch } = await this.#resolve(principal, input);
    const settings = settingsOnCreate(input);
    if (input.instance_type !== undefined) checkInstanceType(input.instance_type, await readPlacementCandidates(this.#db));

    const created = await this.#db.transaction(async (trx) => {
      // The billing account is locked before the count: concurrent creates are checked one after the other.
      const inputs = await lockGuardInputs(trx, organization.id);
      const refusal = firstRefusal(deploymentGuardVerdicts(inputs, await countActiveDeployments(trx, organization.id), this.#billing));
      if (refusal) throw new AppError(refusal.code, refusal.detail);
      const deployment = await insertDeployment(trx, {
        user_id: principal.user.id,
        organization_id: organization.id,
        deployable_model_id: model.id,
        model_name: model.model_name,
        model_format: launch.modelFormat,
        model_size_in_billions: String(launch.modelSizeInBillions),
        quantization: launch.quantization,
        model_engine: launch.modelEngine,
        ...settings,
        instance_type: input.instance_type ?? null,
        desired_replicas: initialReplicas(settings),
      });
      await enqueue(this.#boss, trx, PROVISION_QUEUE, { deploymentId: deployment.id }, { singletonKey: deployment.id });
      return toDeployment(deployment, NO_REPLICAS);
    });
    await wakeAutoscaler(this.#boss, created, this.#log);
    return created;
  }

  /**
   * What `create` would do, decided by the same functions, with nothing written: the launch it would
   * store, each billing guard's verdict (the first refusal is create's 409), and the placement
   * provisioning would choose now, its alternatives, prices and the clusters' free GPUs. One
   * read-only snapshot (repeatable read), so the guards and the placement see the same moment.
   */
  async plan(principal: SessionPrincipal, input: CreateDeploymentRequest): Promise<DeploymentPlan> {
    const organization = requireOrganization(principal);
    const { model, launch } = await this.#resolve(principal, input);
    const settings = settingsOnCreate(input);
    const requiredGb = requiredGpuMemoryGb(launch.modelSizeInBillions, launch.quantization);

    return readOnlySnapshot(this.#db, async (trx) => {
      const rows = await readPlacementCandidates(trx);
      if (input.instance_type !== undefined) checkInstanceType(input.instance_type, rows);
      const guards = deploymentGuardVerdicts(await loadGuardInputs(trx, organization.id), await countActiveDeployments(trx, organization.id), this.#billing);
      const candidates = rows.map(toCandidate);
      const placement = planPlacement(candidates, requiredGb, input.instance_type);
      const prices = await gpuServicePrices(trx, placement.choices);
      const refusal = firstRefusal(guards);
      const chosen = placement.selection.ok ? placement.selection.placement : undefined;
      const replicas = [settings.min_replicas, settings.max_replicas];
      return toDeploymentPlan({
        launch: { ...launch, modelName: model.model_name, requiredGb },
        placement,
        prices,
        scaling: {
          minReplicas: settings.min_replicas,
          maxReplicas: settings.max_replicas,
          costs: chosen ? await replicaCosts(trx, chosen, replicas) : null,
          fitting: chosen ? replicasThatFit(candidates, { clusterId: chosen.clusterId, instanceType: chosen.instanceType.name, gpuCount: chosen.gpuCount }) : 0,
        },
        capacity: capacityOf(candidates),
        clusters: rows,
        guards,
        refusal,
      });
    });
  }

  /**
   * Changes the deployment's scaling settings, under its row lock: the fields fixed at creation may
   * only be repeated, the bounds hold with the stored values, and the desired replicas move into
   * them (a `deployment.scaled` event with reason `settings` when they do). A running deployment's
   * replicas are asked to follow (the scale job, in the same transaction). 409 while a cleanup runs
   * (as delete), 422 for a failed or terminated deployment, which never serves again.
   */
  async update(principal: SessionPrincipal, id: string, input: UpdateDeploymentRequest): Promise<Deployment> {
    const updated = await this.#db.transaction(async (trx) => {
      const deployment = await this.#find(trx, principal, id, true);
      checkUpdatable(deployment.status);
      checkFixedFields(deployment, input);
      const settings = settingsOnUpdate(deployment, input);
      const from = deployment.desired_replicas;
      const to = desiredWithin(from, settings);
      await updateScaling(trx, id, { ...settings, desired_replicas: to });
      if (to !== from) {
        await recordScale(trx, id, { status: deployment.status, scale: { from, to, reason: 'settings' }, message: settingsScaleMessage(from, to, settings) });
      }
      if (deployment.status === SERVING) await requestScale(this.#boss, trx, id);
      return this.#shown(trx, await this.#find(trx, principal, id));
    });
    await wakeAutoscaler(this.#boss, updated, this.#log);
    return updated;
  }

  /** Starts termination (the state machine's `delete`); 409 while a cleanup runs; a terminated deployment is returned as it is. */
  async delete(principal: SessionPrincipal, id: string): Promise<Deployment> {
    return this.#db.transaction(async (trx) => {
      const deployment = await this.#find(trx, principal, id, true);
      const to = transition(deployment.status, 'delete');
      if (!to) {
        throw new AppError('DEPLOYMENT_DELETION_PENDING', 'The cleanup of this deployment is still running; try again when it has finished.');
      }
      if (to === deployment.status) return this.#shown(trx, deployment);
      await moveDeployment(trx, id, { from: deployment.status, to });
      await enqueue(this.#boss, trx, TERMINATE_QUEUE, { deploymentId: id }, { singletonKey: id });
      return this.#shown(trx, await this.#find(trx, principal, id));
    });
  }

  /** The catalog model and launch combination a create request names; 422 `MODEL_NOT_DEPLOYABLE` when none. */
  async #resolve(principal: SessionPrincipal, input: CreateDeploymentRequest): Promise<{ model: CatalogModel; launch: ResolvedLaunch }> {
    const model = await this.#catalog.findByName(principal, input.model_name);
    if (!model) {
      throw new AppError('MODEL_NOT_DEPLOYABLE', `${input.model_name} is not in the catalog, is disabled, or is not available to your organization.`);
    }
    const resolution = resolveLaunch(model.launchSpecs, {
      modelFormat: input.model_format,
      modelSizeInBillions: input.model_size_in_billions,
      quantization: input.quantization,
    });
    if (!resolution.ok) throw new AppError('MODEL_NOT_DEPLOYABLE', `${input.model_name} cannot be deployed that way: ${resolution.reason}.`);
    return { model, launch: resolution.launch };
  }

  /** The deployment as the API shows it, with its replicas' counts. */
  async #shown(db: Knex | Knex.Transaction, row: DeploymentRow): Promise<Deployment> {
    return toDeployment(row, await replicaCountsOf(db, row.id));
  }

  #scope(principal: SessionPrincipal): Scope {
    return { userId: principal.user.id, organizationId: requireOrganization(principal).id };
  }

  async #find(db: Knex | Knex.Transaction, principal: SessionPrincipal, id: string, forUpdate = false): Promise<DeploymentRow> {
    const row = await findDeploymentOf(db, this.#scope(principal), id, { forUpdate });
    if (!row) throw new AppError('NOT_FOUND', `Deployment ${id} was not found.`);
    return row;
  }
}

/**
 * 422 `VALIDATION_FAILED` at `body/instance_type` unless `name` is an instance type of the
 * registered clusters' available instances (those the plan lists), naming them.
 */
function checkInstanceType(name: string, rows: readonly PlacementOption[]): void {
  const offered = offeredInstanceTypes(rows.map(toCandidate));
  if (offered.includes(name)) return;
  const options = offered.length ? `one of ${offered.join(', ')}` : 'none: no cluster offers an instance now';
  throw new AppError('VALIDATION_FAILED', `No registered cluster offers the instance type ${name}; the instance types offered now are ${options}.`, {
    errors: [{ location: 'body/instance_type', message: `must be one of the instance types offered now: ${offered.join(', ') || '(none)'}` }],
  });
}

/** A deployment's settings change until it stops for good: 409 while its cleanup runs, 422 once failed or terminated. */
function checkUpdatable(status: DeploymentStatus): void {
  if (status === 'terminating') {
    throw new AppError('DEPLOYMENT_DELETION_PENDING', 'The deployment is being deleted: its settings no longer change.');
  }
  if (status === 'failed' || status === 'terminated') {
    throw new AppError('VALIDATION_FAILED', `The deployment is ${status} and never serves again: its settings no longer change; create a new deployment.`, {
      errors: [{ location: 'path/deployment_id', message: `is ${status}: its settings no longer change` }],
    });
  }
}
