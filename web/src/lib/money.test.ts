import { describe, expect, it } from 'vitest';
import { dollarsField, money, parseDollars } from './money';

describe('money', () => {
  it('formats integer cents', () => {
    expect(money(0)).toBe('$0.00');
    expect(money(1234)).toBe('$12.34');
    expect(money(490000)).toBe('$4,900.00');
    expect(money(1_000_000_000, 'usd')).toBe('$10,000,000.00');
    expect(money(305, 'eur')).toBe('EUR 3.05');
  });
  it('marks a credit with a minus sign', () => {
    expect(money(-500)).toBe('−$5.00');
    expect(money(-7, 'USD')).toBe('−$0.07');
  });
});

describe('parseDollars', () => {
  it('turns dollars into exact cents', () => {
    expect(parseDollars('250')).toEqual({ cents: 25_000 });
    expect(parseDollars(' 99.5 ')).toEqual({ cents: 9_950 });
    expect(parseDollars('0.01')).toEqual({ cents: 1 });
    expect(parseDollars('$1,250.07')).toEqual({ cents: 125_007 });
    expect(parseDollars('10000000')).toEqual({ cents: 1_000_000_000 });
    expect(parseDollars('0.29')).toEqual({ cents: 29 }); // 0.29 * 100 is 28.999… in floating point
    expect(parseDollars('1.')).toEqual({ cents: 100 });
    expect(parseDollars('007')).toEqual({ cents: 700 });
  });
  it('refuses what is not a positive amount of whole cents', () => {
    for (const bad of ['', ' ', '0', '0.00', '-5', '−5', 'abc', '1e3', '12,34', '1,2345', '5.001', '.5', '1.2.3', '99999999999999']) {
      expect(parseDollars(bad).error, bad).toBeTruthy();
    }
  });
  it('leaves the upper bound to the API', () => {
    // Above the API's $10,000,000.00: parsed, and the API's 422 is shown at the field.
    expect(parseDollars('10000000.01')).toEqual({ cents: 1_000_000_001 });
  });
});

describe('dollarsField', () => {
  it('writes cents back as the field takes them', () => {
    expect(dollarsField(125_007)).toBe('1250.07');
    expect(dollarsField(1)).toBe('0.01');
    expect(parseDollars(dollarsField(987_654_321)).cents).toBe(987_654_321);
  });
});
