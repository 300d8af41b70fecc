import { describe, expect, it } from 'vitest';
import { seconds } from './format';

describe('seconds', () => {
  it('uses the largest unit that divides exactly', () => {
    expect(seconds(86_400)).toBe('1 d');
    expect(seconds(259_200)).toBe('3 d');
    expect(seconds(7_200)).toBe('2 h');
    expect(seconds(120)).toBe('2 min');
  });
  it('falls back to seconds', () => {
    expect(seconds(90)).toBe('90 s');
    expect(seconds(3_601)).toBe('3,601 s');
    expect(seconds(0)).toBe('0 s');
  });
});
