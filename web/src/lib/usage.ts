// Usage queries shared by Overview and Usage.
import { api, must, type Schemas } from '../api/client';
import type { Window } from './timerange';

export type UsagePoint = NonNullable<Schemas['Usage']['points']>[number];

export async function usageIn(tid: string, w: Window): Promise<UsagePoint[]> {
  // Without group_by the answer is the tenant's series (Usage).
  const u = (await must(
    api.GET('/v1/tenants/{tid}/usage', {
      params: { path: { tid }, query: { from: w.from.toISOString(), to: w.to.toISOString(), step: w.step } },
    }),
  )) as Schemas['Usage'];
  return u.points ?? [];
}

export function sum(points: UsagePoint[], meter: keyof UsagePoint): number {
  let s = 0;
  for (const p of points) {
    const v = p[meter];
    if (typeof v === 'number') s += v;
  }
  return s;
}

/** The first instant of the current calendar month, UTC. */
export function monthStart(now: number): Date {
  const d = new Date(now);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
}

/** Percentile (0..100) of a list of numbers by nearest rank; NaN when empty. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * s.length);
  return s[Math.min(s.length, Math.max(1, rank)) - 1];
}

/** Points as CSV, one row per step, every meter a column. */
export function toCSV(points: UsagePoint[]): string {
  const cols = ['messages_in', 'messages_accepted', 'messages_out', 'bytes_in', 'bytes_out', 'connection_seconds', 'stored_bytes'] as const;
  const drops = new Set<string>();
  for (const p of points) for (const k of Object.keys(p.drops ?? {})) drops.add(k);
  const dropCols = [...drops].sort();
  const head = ['time', ...cols, ...dropCols.map((d) => `drops_${d}`)].join(',');
  const rows = points.map((p) => [p.t ?? '', ...cols.map((c) => String(p[c] ?? 0)), ...dropCols.map((d) => String(p.drops?.[d] ?? 0))].join(','));
  return [head, ...rows].join('\n') + '\n';
}

/** The tenant's latency series for one metric over a window (the server merges buckets; it never averages percentiles). */
export async function latencyIn(tid: string, w: Window, metric: 'delivery' | 'ack' | 'connect') {
  return must(
    api.GET('/v1/tenants/{tid}/latency', {
      params: { path: { tid }, query: { metric, from: w.from.toISOString(), to: w.to.toISOString(), step: w.step } },
    }),
  );
}
