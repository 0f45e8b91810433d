/**
 * Who holds the transaction horizon back. Read by the metrics (a gauge labelled with the backend) and
 * by the horizon watcher (a warning naming it); neither depends on the other.
 */
import { type Kysely, sql } from 'kysely';
import type { Database } from '../../db/database.ts';

export interface HorizonBlocker {
  pid: number;
  applicationName: string;
  /** How long its transaction has been open. */
  ageSeconds: number;
}

/** The oldest open writing transaction (the one holding the horizon back), if any. */
export async function horizonBlocker(db: Kysely<Database>): Promise<HorizonBlocker | undefined> {
  const { rows } = await sql<{ pid: number; application_name: string; age: number }>`
    select pid, application_name, extract(epoch from clock_timestamp() - xact_start)::float8 as age
    from pg_stat_activity
    where backend_xid is not null and pid <> pg_backend_pid()
    order by age(backend_xid) desc
    limit 1`.execute(db);
  const r = rows[0];
  return r ? { pid: r.pid, applicationName: r.application_name, ageSeconds: r.age } : undefined;
}
