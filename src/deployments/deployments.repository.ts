import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';
import { DeploymentRow } from '../db/models/deployments.ts';

export type Deployment = components['schemas']['Deployment'];

export { DeploymentRow };

export function deploymentsOf(db: Knex | Knex.Transaction, scope: { userId: number; organizationId: number }): Knex.QueryBuilder {
  return db('deployments').where({ user_id: scope.userId, organization_id: scope.organizationId });
}

export function toDeployment(row: DeploymentRow): Deployment {
  return {
    id: row.id,
    user_id: String(row.user_id),
    organization_id: String(row.organization_id),
    cluster_id: row.cluster_id,
    instance_id: row.instance_id,
    gpu_allocation_id: row.gpu_allocation_id,
    model_name: row.model_name,
    model_format: row.model_format,
    model_size_in_billions: Number(row.model_size_in_billions),
    quantization: row.quantization,
    engine_model_uid: row.engine_model_uid,
    status: row.status,
    selected_instance_type: row.selected_instance_type,
    selection_reason: row.selection_reason,
    failure_stage: row.failure_stage,
    failure_reason: row.failure_reason,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    terminated_at: row.terminated_at?.toISOString() ?? null,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/** Hands a user's deployments in an organization to another user (the first leaves it). */
export async function transferDeployments(db: Knex | Knex.Transaction, move: { organizationId: number; fromUserId: number; toUserId: number }): Promise<void> {
  await DeploymentRow.query(db).where({ organization_id: move.organizationId, user_id: move.fromUserId }).patch({ user_id: move.toUserId });
}
