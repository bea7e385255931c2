import type { components } from '../../../generated/api.d.ts';
import { BaseModel } from '../base-model.ts';

/** `deployable_models`: the catalog; `allowed_organization_ids` restricts a model to some organizations. */
export class DeployableModelRow extends BaseModel {
  static override tableName = 'deployable_models';
  declare id: string;
  declare model_name: string;
  declare display_name: string;
  declare provider: string;
  declare family: string;
  declare model_type: components['schemas']['DeployableModelType'];
  declare description: string;
  declare tags: string[];
  declare enabled: boolean;
  declare hosted: boolean;
  declare sort_order: number;
  /** A language model's context length in tokens (Xinference's model family); null for other models. */
  declare context_length: number | null;
  /** Xinference's `model_ability` of the model (`chat`, `generate`, `audio2text`, …); embedding and rerank models state none. */
  declare abilities: string[];
  /** Null: every organization sees the model. */
  declare allowed_organization_ids: number[] | null;
  /** Generated full-text search vector (name, family, provider, tags, description). */
  declare search: string;
  declare created_at: Date;
  declare updated_at: Date;
}
