import { Model, snakeCaseMappers } from 'objection';

/**
 * Base of every objection model: snake_case columns map to camelCase properties, and
 * `created_at`/`updated_at` are kept by Postgres (defaults and the `set_updated_at` trigger of the
 * baseline migration), never by application clocks.
 */
export class BaseModel extends Model {
  static override get columnNameMappers() {
    return snakeCaseMappers();
  }

  static override useLimitInFirst = true;
}
