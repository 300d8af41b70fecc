// Latency views: the API's per-message latency series placed on chart
// steps, and a histogram of sampled trace durations on log-scaled buckets.

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

export type LatencyMetric = 'delivery' | 'ack' | 'connect';

export const latencyMetrics: { key: LatencyMetric; label: string }[] = [
  { key: 'delivery', label: 'Publish → delivery' },
  { key: 'ack', label: 'Publish → acknowledgement' },
  { key: 'connect', label: 'Connect' },
];

export interface LatencyPoint {
  t: string;
  count: number;
  p50_us: number | null;
  p99_us: number | null;
}

/**
 * The p50 and p99 of a latency series (µs, as the API answers) placed on
 * every step of the window, null where a step has no sample, so the chart
 * draws a gap rather than a zero (uPlot takes null as a gap; NaN would
 * poison its scale).
 */
export function latencyOnSteps(from: number, stepMs: number, n: number, points: LatencyPoint[]): { p50: (number | null)[]; p99: (number | null)[]; count: number } {
  const p50 = new Array<number | null>(n).fill(null);
  const p99 = new Array<number | null>(n).fill(null);
  let count = 0;
  for (const p of points) {
    const i = Math.floor((Date.parse(p.t) - from) / stepMs);
    if (i < 0 || i >= n) continue;
    count += p.count;
    if (p.p50_us != null) p50[i] = p.p50_us * 1000;
    if (p.p99_us != null) p99[i] = p.p99_us * 1000;
  }
  return { p50, p99, count };
}
