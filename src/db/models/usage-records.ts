import { BaseModel } from '../base-model.ts';

/**
 * `usage_records`: what each inference request the engine answered used, one row per `usage_id` (a
 * server-made id; `request_id` is only a label). See docs/decisions/2026-11-23-usage-records.md.
 */
export class UsageRecordRow extends BaseModel {
  static override tableName = 'usage_records';
  declare id: string;
  declare usage_id: string;
  declare request_id: string;
  declare organization_id: number;
  declare deployment_id: string | null;
  declare api_key_id: number | null;
  declare user_id: number | null;
  /** The route template, e.g. `POST /v1/chat/completions`. */
  declare route: string;
  declare model: string;
  declare prompt_tokens: number;
  declare completion_tokens: number;
  declare total_tokens: number;
  declare unit: 'token' | 'image' | 'request';
  /** bigint: read as a string. */
  declare quantity: string;
  declare outcome: 'completed' | 'aborted';
  declare estimated: boolean;
  declare created_at: Date;
}
