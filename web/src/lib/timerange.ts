// Time ranges for the charts: each range has a fixed server-side step, so a
// 30-day chart asks for 120 points, never 43,200 minutes, and buckets start
// on step boundaries (UTC) so that two loads of the same range agree.

export type RangeKey = '1h' | '24h' | '7d' | '30d';

const minute = 60_000;
const hour = 60 * minute;
const day = 24 * hour;

export const ranges: Record<RangeKey, { label: string; spanMs: number; stepMs: number }> = {
  '1h': { label: '1 hour', spanMs: hour, stepMs: minute },
  '24h': { label: '24 hours', spanMs: day, stepMs: 10 * minute },
  '7d': { label: '7 days', spanMs: 7 * day, stepMs: hour },
  '30d': { label: '30 days', spanMs: 30 * day, stepMs: 6 * hour },
};

export interface Window {
  from: Date;
  to: Date;
  stepMs: number;
  /** The step as the API's duration syntax, e.g. "10m" or "6h". */
  step: string;
}

/** A Go-style duration for a whole number of minutes or hours. */
export function durationParam(ms: number): string {
  if (ms % hour === 0) return `${ms / hour}h`;
  if (ms % minute === 0) return `${ms / minute}m`;
  return `${Math.round(ms / 1000)}s`;
}

/**
 * The window that ends at the first step boundary at or after now, and the
 * one before it (the previous period, for comparison).
 */
export function windows(key: RangeKey, now: number): { current: Window; previous: Window } {
  const r = ranges[key];
  const to = Math.ceil(now / r.stepMs) * r.stepMs;
  const from = to - r.spanMs;
  const step = durationParam(r.stepMs);
  return {
    current: { from: new Date(from), to: new Date(to), stepMs: r.stepMs, step },
    previous: { from: new Date(from - r.spanMs), to: new Date(from), stepMs: r.stepMs, step },
  };
}

/** How many points a window holds. */
export function pointCount(w: Window): number {
  return Math.round((w.to.getTime() - w.from.getTime()) / w.stepMs);
}

export interface Point {
  t?: string;
}

/**
 * Places the server's points on every step of the window, zero where a step
 * has none, so charts of the current and previous period line up.
 */
export function densify(w: Window, points: Point[], meter: string): number[] {
  const n = pointCount(w);
  const out = new Array<number>(n).fill(0);
  const start = w.from.getTime();
  for (const p of points) {
    const i = Math.floor((Date.parse(p.t ?? '') - start) / w.stepMs);
    const v = (p as Record<string, unknown>)[meter];
    if (i >= 0 && i < n && typeof v === 'number') out[i] += v;
  }
  return out;
}
