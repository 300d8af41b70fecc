import { describe, expect, it } from 'vitest';
import { labelPlace, layout, parseNs } from './waterfall';

describe('parseNs', () => {
  it('keeps nanoseconds beyond the millisecond', () => {
    expect(parseNs('2026-12-01T00:00:00.123456789Z')).toEqual({ ms: Date.parse('2026-12-01T00:00:00.123Z'), subMsNs: 456789 });
    expect(parseNs('2026-12-01T00:00:00Z').subMsNs).toBe(0);
  });
});

describe('layout', () => {
  const spans = [
    { span_id: 'c2', parent_span_id: 'root', name: 'route', start: '2026-12-01T00:00:00.000600Z', duration_ns: 400_000 },
    { span_id: 'root', parent_span_id: null, name: 'mqtt.connect', start: '2026-12-01T00:00:00Z', duration_ns: 1_000_000 },
    { span_id: 'c1', parent_span_id: 'root', name: 'auth', start: '2026-12-01T00:00:00.000100Z', duration_ns: 200_000 },
    { span_id: 'g1', parent_span_id: 'c1', name: 'jwks', start: '2026-12-01T00:00:00.000150Z', duration_ns: 50_000 },
  ];
  it('orders parents before children, siblings by start', () => {
    const { rows, totalNs } = layout(spans);
    expect(rows.map((r) => [r.span.name, r.depth])).toEqual([
      ['mqtt.connect', 0],
      ['auth', 1],
      ['jwks', 2],
      ['route', 1],
    ]);
    expect(totalNs).toBe(1_000_000);
  });
  it('places bars as fractions of the whole', () => {
    const { rows } = layout(spans);
    const route = rows.find((r) => r.span.name === 'route')!;
    expect(route.left).toBeCloseTo(0.6);
    expect(route.width).toBeCloseTo(0.4);
    expect(route.offsetNs).toBe(600_000);
  });
  it('treats a span whose parent is elsewhere as a root, and survives cycles', () => {
    const { rows } = layout([
      { span_id: 'a', parent_span_id: 'b', name: 'a', start: '2026-12-01T00:00:00Z', duration_ns: 1 },
      { span_id: 'b', parent_span_id: 'a', name: 'b', start: '2026-12-01T00:00:00Z', duration_ns: 1 },
      { span_id: 'x', parent_span_id: 'remote', name: 'x', start: '2026-12-01T00:00:00Z', duration_ns: 1 },
    ]);
    expect(rows).toHaveLength(3);
    expect(rows.find((r) => r.span.name === 'x')!.depth).toBe(0);
  });
  it('is empty for no spans', () => {
    expect(layout([])).toEqual({ rows: [], totalNs: 0 });
  });
});

describe('labelPlace', () => {
  it('keeps every label inside the track', () => {
    expect(labelPlace(0.1, 0.2)).toEqual({ left: '30.5%' });
    expect(labelPlace(0.7, 0.3).right).toBe('30.5%');
    expect(labelPlace(0, 1)).toEqual({ left: '0.5%', color: 'var(--accent-text)' }); // the root span: inside its bar
  });
});
