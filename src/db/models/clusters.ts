import { BaseModel } from '../base-model.ts';

/**
 * `clusters`: a GPU cluster running the serving engine. Its credentials are sealed with the server
 * key: the inference API key (`sealed_credential`) and the management user.
 */
export class ClusterRow extends BaseModel {
  static override tableName = 'clusters';
  declare id: string;
  declare name: string;
  declare provider: string;
  declare region: string;
  /** The engine supervisor's base URL, without a trailing slash. */
  declare endpoint: string;
  declare auth_mode: 'advanced' | 'none';
  declare sealed_credential: string | null;
  declare sealed_management_credential: string | null;
  /** `credentials_invalid`: the engine refused a credential; the cluster's calls are stopped. */
  declare status: 'active' | 'disabled' | 'credentials_invalid';
  declare status_reason: string | null;
  declare status_changed_at: Date;
  declare engine_version: string | null;
  /** Whether the engine has Xinference 3.2's replica API (scale-ups), as last detected; null before the first detection. */
  declare replica_api: boolean | null;
  /** The platform's shared cluster for hosted models. */
  declare hosted: boolean;
  declare last_synced_at: Date | null;
  declare created_at: Date;
  declare updated_at: Date;
}
