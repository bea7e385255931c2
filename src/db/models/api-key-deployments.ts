import { BaseModel } from '../base-model.ts';

/** `api_key_deployments`: the deployments a key may call (its scope). */
export class ApiKeyDeploymentRow extends BaseModel {
  static override tableName = 'api_key_deployments';
  static override idColumn = ['api_key_id', 'deployment_id'];
  declare api_key_id: number;
  declare deployment_id: string;
}
