// Money on the dashboard is integer cents, as the API sends it: formatted
// and parsed with integer and string arithmetic, never through floating
// point (docs/billing.md).

/** Integer cents as money, e.g. "$1,234.50", "−$5.00" (a credit), "EUR 3.00". */
export function money(cents: number, currency = 'usd'): string {
  const sign = cents < 0 ? '−' : '';
  const abs = Math.abs(cents);
  const whole = Math.floor(abs / 100).toLocaleString('en-US');
  const unit = currency.toLowerCase() === 'usd' ? '$' : currency.toUpperCase() + ' ';
  return `${sign}${unit}${whole}.${String(abs % 100).padStart(2, '0')}`;
}

/** The largest whole-dollar part parseDollars takes: its cents stay an exact integer. */
const maxWholeDigits = 13;

/** A dollar amount typed by a user: its cents, or why it is not one. */
export type Parsed = { cents: number; error?: undefined } | { cents?: undefined; error: string };

/**
 * Parses a positive dollar amount ("250", "99.5", "1,250.00", "$40") into
 * integer cents, digit by digit. Zero, negative amounts, fractions of a
 * cent and anything else are refused with a reason for the field.
 */
export function parseDollars(input: string): Parsed {
  const s = input.trim().replace(/^\$\s*/, '');
  if (s === '') return { error: 'Enter an amount in dollars, e.g. 250 or 99.50.' };
  if (s.startsWith('-') || s.startsWith('−')) return { error: 'Must be more than $0.00.' };
  const m = /^(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d*))?$/.exec(s);
  if (!m) return { error: 'Enter an amount in dollars, e.g. 250 or 99.50 (digits, a decimal point, thousands commas).' };
  const whole = m[1].replace(/,/g, '').replace(/^0+(?=\d)/, '');
  const frac = m[2] ?? '';
  if (frac.length > 2) return { error: 'At most two decimals: a budget is whole cents.' };
  if (whole.length > maxWholeDigits) return { error: 'Too large an amount.' };
  const cents = Number(whole) * 100 + Number(frac.padEnd(2, '0'));
  if (cents <= 0) return { error: 'Must be more than $0.00.' };
  return { cents };
}

/** Cents as the editor's field shows them: "1250.5" → "1250.50", no thousands commas. */
export function dollarsField(cents: number): string {
  return `${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, '0')}`;
}
