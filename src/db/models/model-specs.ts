import { BaseModel } from '../base-model.ts';

/** `model_specs`: a catalog model's launch combinations, as the serving engine names them. */
export class ModelSpecRow extends BaseModel {
  static override tableName = 'model_specs';
  declare id: number;
  declare deployable_model_id: string;
  declare model_format: string;
  /** numeric(8, 2): read as a string. */
  declare model_size_in_billions: string;
  declare quantizations: string[];
  declare model_engine: string;
}
