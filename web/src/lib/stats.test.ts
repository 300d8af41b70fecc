import { describe, expect, it } from 'vitest';
import { bytes, durationNs, payload, percent } from './format';
import { histogram } from './latency';
import { overBounds } from './quotas';
import { splitAddr } from './snippets';
import { monthStart, percentile, toCSV } from './usage';

describe('percentile', () => {
  it('matches nearest rank on a brute-force list', () => {
    const v = Array.from({ length: 100 }, (_, i) => 100 - i); // 100..1
    expect(percentile(v, 50)).toBe(50);
    expect(percentile(v, 99)).toBe(99);
    expect(percentile(v, 100)).toBe(100);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });
});

describe('latency views', () => {
  it('puts every duration in a doubling bucket', () => {
    const h = histogram([500, 1_000, 1_999, 2_000, 1_000_000]);
    expect(h[0]).toEqual({ lo: 1000, hi: 2000, n: 3 });
    expect(h[1].n).toBe(1);
    expect(h.reduce((n, b) => n + b.n, 0)).toBe(5);
    expect(h[h.length - 1].hi).toBeGreaterThan(1_000_000);
  });
});

describe('format', () => {
  it('bytes, durations and percent', () => {
    expect(bytes(512)).toBe('512 B');
    expect(bytes(1536)).toBe('1.5 KiB');
    expect(durationNs(1_500)).toBe('1.5 µs');
    expect(durationNs(2_500_000)).toBe('2.50 ms');
    expect(percent(50, 200)).toBe(25);
    expect(percent(500, 200)).toBe(100);
    expect(percent(1, 0)).toBe(0);
  });
  it('payload views', () => {
    const b = new TextEncoder().encode('{"a":1}');
    expect(payload(b, 'text')).toBe('{"a":1}');
    expect(payload(b, 'json')).toBe('{\n  "a": 1\n}');
    expect(payload(b, 'hex')).toBe('000000  7b 22 61 22 3a 31 7d');
    expect(payload(new Uint8Array([0xff]), 'json')).toContain('not valid JSON');
  });
});

describe('usage helpers', () => {
  it('month start is UTC', () => {
    expect(monthStart(Date.parse('2026-12-31T23:59:59Z')).toISOString()).toBe('2026-12-01T00:00:00.000Z');
  });
  it('CSV has a column per meter and per drop reason', () => {
    const csv = toCSV([{ t: '2026-12-01T00:00:00Z', messages_in: 2, drops: { quota: 1 } }, { t: '2026-12-02T00:00:00Z', messages_in: 3, messages_accepted: 2 }]);
    expect(csv.split('\n')[0]).toBe('time,messages_in,messages_accepted,messages_out,bytes_in,bytes_out,connection_seconds,stored_bytes,drops_quota');
    expect(csv.split('\n')[2]).toBe('2026-12-02T00:00:00Z,3,2,0,0,0,0,0,0');
  });
  it('quota bounds', () => {
    expect(overBounds({ max_connections: 10, monthly_messages: 5 }, { max_connections: 5, monthly_messages: 0 })).toEqual(['max_connections']);
  });
  it('splits addresses', () => {
    expect(splitAddr('127.0.0.1:1884')).toEqual({ host: '127.0.0.1', port: 1884 });
    expect(splitAddr('t.mqtt.example.com')).toEqual({ host: 't.mqtt.example.com', port: 1883 });
    expect(splitAddr('[::1]:1883')).toEqual({ host: '::1', port: 1883 });
  });
});

describe('latencyOnSteps', () => {
  it('places µs percentiles as ns on their step and leaves gaps as null', async () => {
    const { latencyOnSteps } = await import('./latency');
    const from = Date.parse('2026-12-01T00:00:00Z');
    const r = latencyOnSteps(from, 60_000, 3, [
      { t: '2026-12-01T00:01:00Z', count: 4, p50_us: 12.5, p99_us: 80 },
      { t: '2026-12-01T00:02:00Z', count: 0, p50_us: null, p99_us: null },
      { t: '2026-11-30T00:00:00Z', count: 9, p50_us: 1, p99_us: 1 },
    ]);
    expect(r.p50[0]).toBeNull();
    expect(r.p50[1]).toBe(12_500);
    expect(r.p99[1]).toBe(80_000);
    expect(r.p50[2]).toBeNull();
    expect(r.count).toBe(4);
  });
});
