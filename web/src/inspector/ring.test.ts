import { describe, expect, it } from 'vitest';
import { Ring } from './ring';

describe('Ring', () => {
  it('keeps the newest, newest first', () => {
    const r = new Ring<number>(3);
    expect(r.newest()).toEqual([]);
    r.push(1);
    r.push(2);
    expect(r.newest()).toEqual([2, 1]);
    r.push(3);
    r.push(4);
    r.push(5);
    expect(r.size).toBe(3);
    expect(r.newest()).toEqual([5, 4, 3]);
    expect(r.newest(2)).toEqual([5, 4]);
    expect(r.newest(10)).toEqual([5, 4, 3]);
    expect(r.newest(0)).toEqual([]);
  });

  it('pushAll keeps order and only the last capacity', () => {
    const r = new Ring<number>(4);
    r.pushAll([1, 2]);
    r.pushAll(Array.from({ length: 10 }, (_, i) => i + 10));
    expect(r.newest()).toEqual([19, 18, 17, 16]);
    r.pushAll([]);
    expect(r.size).toBe(4);
  });

  it('wraps many times', () => {
    const r = new Ring<number>(1000);
    for (let i = 0; i < 12_345; i++) r.push(i);
    const n = r.newest();
    expect(n.length).toBe(1000);
    expect(n[0]).toBe(12_344);
    expect(n[999]).toBe(11_345);
  });

  it('clears', () => {
    const r = new Ring<string>(2);
    r.pushAll(['a', 'b', 'c']);
    r.clear();
    expect(r.size).toBe(0);
    expect(r.newest()).toEqual([]);
    r.push('d');
    expect(r.newest()).toEqual(['d']);
  });

  it('refuses a bad capacity', () => {
    expect(() => new Ring(0)).toThrow(RangeError);
    expect(() => new Ring(1.5)).toThrow(RangeError);
  });
});
