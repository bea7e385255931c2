import type { Knex } from 'knex';
import type { PgBoss } from 'pg-boss';
import type { components } from '../../generated/api.d.ts';
import { requireOrganization, type SessionPrincipal } from '../principal.ts';
import { deploymentGuardVerdicts, firstRefusal, loadGuardInputs, lockGuardInputs, type DeploymentGuardSettings } from '../billing/deployment-guard.ts';
import type { CatalogModel, CatalogService } from '../catalog/catalog.service.ts';
import type { Keyring } from '../crypto.ts';
import type { DeploymentRow } from '../db/models/deployments.ts';
import { AppError } from '../errors.ts';
import { enqueue } from '../jobs/queue.ts';
import { transition } from './deployment-states.ts';
import { toDeploymentPlan, type DeploymentPlan } from './deployment-plan.ts';
import {
  countActiveDeployments,
  findDeploymentOf,
  gpuServicePrices,
  listDeploymentsOf,
  readPlacementCandidates,
  toCandidate,
  toDeployment,
  type Deployment,
  type Scope,
} from './deployments.repository.ts';
import { insertDeployment, moveDeployment } from './deployment-changes.ts';
import { capacityOf, planPlacement, requiredGpuMemoryGb } from './instance-selection.ts';
import { resolveLaunch, type ResolvedLaunch } from './launch-spec.ts';
import { ListCursors } from './list-cursor.ts';
import { PROVISION_QUEUE, TERMINATE_QUEUE } from './provisioning.ts';
import { readOnlySnapshot } from '../db/query.ts';

type CreateDeploymentRequest = components['schemas']['CreateDeploymentRequest'];

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
 * transaction; planning answers what creating would do, writing nothing; deleting moves it to
 * `terminating` and enqueues the cleanup.
 */
export class DeploymentsService {
  readonly #db: Knex;
  readonly #boss: PgBoss;
  readonly #catalog: CatalogService;
  readonly #billing: DeploymentGuardSettings;
  readonly #cursors: ListCursors;

  constructor(deps: { db: Knex; boss: PgBoss; catalog: CatalogService; billing: DeploymentGuardSettings; keyring: Keyring }) {
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
    return { items: rows.map(toDeployment), total, limit, offset, next_cursor: next ? this.#cursors.write(scope, next) : null };
  }

  async get(principal: SessionPrincipal, id: string): Promise<Deployment> {
    return toDeployment(await this.#find(this.#db, principal, id));
  }

  async create(principal: SessionPrincipal, input: CreateDeploymentRequest): Promise<Deployment> {
    const organization = requireOrganization(principal);
    const { model, launch } = await this.#resolve(principal, input);

    return this.#db.transaction(async (trx) => {
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
      });
      await enqueue(this.#boss, trx, PROVISION_QUEUE, { deploymentId: deployment.id }, { singletonKey: deployment.id });
      return toDeployment(deployment);
    });
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
    const requiredGb = requiredGpuMemoryGb(launch.modelSizeInBillions, launch.quantization);

    return readOnlySnapshot(this.#db, async (trx) => {
      const guards = deploymentGuardVerdicts(await loadGuardInputs(trx, organization.id), await countActiveDeployments(trx, organization.id), this.#billing);
      const rows = await readPlacementCandidates(trx);
      const candidates = rows.map(toCandidate);
      const placement = planPlacement(candidates, requiredGb);
      const prices = await gpuServicePrices(trx, placement.choices);
      const refusal = firstRefusal(guards);
      return toDeploymentPlan({
        launch: { ...launch, modelName: model.model_name, requiredGb },
        placement,
        prices,
        capacity: capacityOf(candidates),
        clusters: rows,
        guards,
        refusal,
      });
    });
  }

  /** Starts termination (the state machine's `delete`); 409 while a cleanup runs; a terminated deployment is returned as it is. */
  async delete(principal: SessionPrincipal, id: string): Promise<Deployment> {
    return this.#db.transaction(async (trx) => {
      const deployment = await this.#find(trx, principal, id, true);
      const to = transition(deployment.status, 'delete');
      if (!to) {
        throw new AppError('DEPLOYMENT_DELETION_PENDING', 'The cleanup of this deployment is still running; try again when it has finished.');
      }
      if (to === deployment.status) return toDeployment(deployment);
      await moveDeployment(trx, id, { from: deployment.status, to });
      await enqueue(this.#boss, trx, TERMINATE_QUEUE, { deploymentId: id }, { singletonKey: id });
      return toDeployment(await this.#find(trx, principal, id));
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

  #scope(principal: SessionPrincipal): Scope {
    return { userId: principal.user.id, organizationId: requireOrganization(principal).id };
  }

  async #find(db: Knex | Knex.Transaction, principal: SessionPrincipal, id: string, forUpdate = false): Promise<DeploymentRow> {
    const row = await findDeploymentOf(db, this.#scope(principal), id, { forUpdate });
    if (!row) throw new AppError('NOT_FOUND', `Deployment ${id} was not found.`);
    return row;
  }
}
