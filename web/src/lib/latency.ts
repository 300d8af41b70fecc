// Latency views over sampled traces: percentiles per time bucket and a
// duration histogram on log-scaled buckets.
import { percentile } from './usage';

export interface Sample {
  t: number; // ms since the epoch
  ns: number;
}

/** p50 and p99 per step between from and to; NaN where a step has no sample. */
export function percentilesOverTime(samples: Sample[], from: number, to: number, stepMs: number): { x: number[]; p50: number[]; p99: number[] } {
  const n = Math.max(1, Math.round((to - from) / stepMs));
  const buckets: number[][] = Array.from({ length: n }, () => []);
  for (const s of samples) {
    const i = Math.floor((s.t - from) / stepMs);
    if (i >= 0 && i < n) buckets[i].push(s.ns);
  }
  return {
    x: buckets.map((_, i) => (from + i * stepMs) / 1000),
    p50: buckets.map((b) => percentile(b, 50)),
    p99: buckets.map((b) => percentile(b, 99)),
  };
}

/** Buckets of durations whose edges double, from 1 µs up: [lowerNs, upperNs, count]. */
export function histogram(ns: number[]): { lo: number; hi: number; n: number }[] {
  if (ns.length === 0) return [];
  let lo = 1000;
  const max = Math.max(...ns);
  const out: { lo: number; hi: number; n: number }[] = [];
  while (lo <= max || out.length === 0) {
    out.push({ lo, hi: lo * 2, n: 0 });
    lo *= 2;
  }
  for (const v of ns) {
    let i = v < 1000 ? 0 : Math.floor(Math.log2(v / 1000));
    i = Math.min(Math.max(i, 0), out.length - 1);
    out[i].n++;
  }
  return out;
}
