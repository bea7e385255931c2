import { Model } from 'objection';

/**
 * Base of every objection model (`src/db/models/`, one per table). A model's properties are its
 * table's columns under their own snake_case names, as the interface spells its fields, so a query's
 * `where`, the object it writes and the row it reads name a column the same way. `created_at` and
 * `updated_at` are kept by Postgres (defaults and the `set_updated_at` trigger of the baseline
 * migration), never by application clocks. No JSON columns: arrays are Postgres arrays.
 *
 * Queries always name their connection (`Model.query(db)` with the caller's knex or transaction);
 * no model is bound to a global knex.
 */
export class BaseModel extends Model {
  static override useLimitInFirst = true;
  static override jsonAttributes: string[] = [];
}
