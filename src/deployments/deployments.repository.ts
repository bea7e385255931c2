import type { Knex } from 'knex';
import type { components } from '../../generated/api.d.ts';

export type Deployment = components['schemas']['Deployment'];

export interface DeploymentRow {
  id: string;
  user_id: number;
  organization_id: number;
  deployable_model_id: string;
  model_name: string;
  model_format: string;
  model_size_in_billions: string;
  quantization: string;
  model_engine: string;
  status: Deployment['status'];
  cluster_id: string | null;
  instance_id: string | null;
  gpu_allocation_id: string | null;
  engine_model_uid: string | null;
  selected_instance_type: string | null;
  selection_reason: string | null;
  failure_stage: Deployment['failure_stage'];
  failure_reason: string | null;
  status_changed_at: Date;
  /** When the engine first reported this running model not ready (auto-recovery); null when healthy. */
  engine_unhealthy_since: Date | null;
  created_at: Date;
  updated_at: Date;
  terminated_at: Date | null;
}

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
