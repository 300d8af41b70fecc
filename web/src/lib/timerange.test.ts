import { describe, expect, it } from 'vitest';
import { densify, durationParam, pointCount, ranges, windows, type RangeKey } from './timerange';

const now = Date.parse('2026-12-01T11:37:42.123Z');

describe('windows', () => {
  it('ends on the first step boundary after now and spans the range', () => {
    const { current, previous } = windows('24h', now);
    expect(current.to.toISOString()).toBe('2026-12-01T11:40:00.000Z');
    expect(current.from.toISOString()).toBe('2026-11-30T11:40:00.000Z');
    expect(previous.to.getTime()).toBe(current.from.getTime());
    expect(previous.from.toISOString()).toBe('2026-11-29T11:40:00.000Z');
    expect(current.step).toBe('10m');
  });
  it('never asks for more than 720 points, 30 days included', () => {
    for (const k of Object.keys(ranges) as RangeKey[]) {
      const w = windows(k, now).current;
      expect(pointCount(w)).toBeLessThanOrEqual(720);
      expect(pointCount(w)).toBeGreaterThanOrEqual(60);
      expect(w.from.getTime() % w.stepMs).toBe(0);
    }
    expect(pointCount(windows('30d', now).current)).toBe(120);
  });
  it('is stable on a boundary', () => {
    const at = Date.parse('2026-12-01T12:00:00Z');
    expect(windows('1h', at).current.to.getTime()).toBe(at);
  });
});

describe('durationParam', () => {
  it('uses the largest whole unit', () => {
    expect(durationParam(60_000)).toBe('1m');
    expect(durationParam(600_000)).toBe('10m');
    expect(durationParam(6 * 3_600_000)).toBe('6h');
    expect(durationParam(90_000)).toBe('90s');
  });
});

describe('densify', () => {
  it('places points on their step and fills gaps with zero', () => {
    const w = windows('1h', Date.parse('2026-12-01T12:00:00Z')).current;
    const v = densify(w, [{ t: '2026-12-01T11:00:00Z', messages_in: 3 } as never, { t: '2026-12-01T11:59:00Z', messages_in: 5 } as never, { t: '2026-12-01T10:00:00Z', messages_in: 99 } as never], 'messages_in');
    expect(v).toHaveLength(60);
    expect(v[0]).toBe(3);
    expect(v[59]).toBe(5);
    expect(v.reduce((a, b) => a + b, 0)).toBe(8);
  });
});
