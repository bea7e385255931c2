import type { Knex } from 'knex';
import { databaseAnswers } from '../db/database.ts';

/** Why the process should get no traffic now; empty when it is ready. */
export type NotReadyReason = 'draining' | 'database_unreachable' | 'migrations_pending';

/**
 * Readiness (`GET /readyz`), apart from liveness (`GET /healthz`): the process takes traffic only
 * while it is not draining (SIGTERM received: it answers what is in flight, refuses nothing, but asks
 * to be taken out of rotation), its database answers, and every migration of its code is applied
 * (a replica started before the migration Job finished waits for it). Once seen applied, migrations
 * are not read again: this process's code cannot gain new ones.
 */
export class Readiness {
  readonly #db: Knex;
  #draining = false;
  #migrated = false;

  constructor(db: Knex) {
    this.#db = db;
  }

  /** From now on, not ready: the process is stopping. */
  drain(): void {
    this.#draining = true;
  }

  get draining(): boolean {
    return this.#draining;
  }

  async reasons(): Promise<NotReadyReason[]> {
    if (this.#draining) return ['draining'];
    if (!(await databaseAnswers(this.#db))) return ['database_unreachable'];
    if (!this.#migrated) {
      const [, pending] = (await this.#db.migrate.list()) as [unknown[], unknown[]];
      this.#migrated = pending.length === 0;
      if (!this.#migrated) return ['migrations_pending'];
    }
    return [];
  }
}
