import pg from 'pg';
import { inject } from 'vitest';

/** `url` with its database name replaced. */
export function withDatabase(url: string, database: string): string {
  const target = new URL(url);
  target.pathname = `/${database}`;
  return target.toString();
}

async function admin<T>(serverUrl: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: withDatabase(serverUrl, 'postgres') });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

export async function dropDatabase(serverUrl: string, database: string): Promise<void> {
  await admin(serverUrl, (client) => client.query(`drop database if exists ${client.escapeIdentifier(database)} with (force)`));
}

let copies = 0;

/** A fresh database of this test file, copied from the run's migrated template. */
export async function createTestDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const templateUrl = inject('templateDatabaseUrl');
  const template = new URL(templateUrl).pathname.slice(1);
  const name = `${template}_${process.pid}_${++copies}`;
  await admin(templateUrl, (client) =>
    client.query(`create database ${client.escapeIdentifier(name)} template ${client.escapeIdentifier(template)}`),
  );
  return { url: withDatabase(templateUrl, name), drop: () => dropDatabase(templateUrl, name) };
}
