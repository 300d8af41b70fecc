// @vitest-environment node
// The verification code the Billing page shows must accept what the billing
// worker sends (billing/internal/webhook signs t + "." + body with
// HMAC-SHA256 keyed with the secret's bytes) and refuse anything else.
import { createHmac } from 'node:crypto';
import * as crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { verifySnippet } from './webhooksig';

type Verify = (secret: string, header: string, body: string, now?: number) => boolean;

/** The snippet as a function: its one import handed in, its export dropped. */
function compile(): Verify {
  const src = verifySnippet
    .replace(/^import .*$/m, 'const { createHmac, timingSafeEqual } = crypto;')
    .replace('export function', 'return function');
  return new Function('crypto', 'Buffer', src)(crypto, Buffer) as Verify;
}

const secret = 'whsec_' + 'ab'.repeat(32);
const body = '{"id":"evt_1","type":"budget.threshold_reached","data":{"percent":80}}';
const t = 1773144000;
const sign = (key: string, ts: number, b: string) => `t=${ts},v1=${createHmac('sha256', key).update(`${ts}.${b}`).digest('hex')}`;

describe('verifySnippet', () => {
  const verify = compile();
  it('accepts a delivery signed with the secret', () => {
    expect(verify(secret, sign(secret, t, body), body, t + 10)).toBe(true);
  });
  it('accepts a known header (computed apart, with openssl dgst -sha256 -hmac)', () => {
    const header = 't=1773144000,v1=508a238909e95d870daa8d8b62f0064997f53b64bbecb3fb4a389a21f1152da5';
    expect(verify(secret, header, body, t)).toBe(true);
  });
  it.each([
    ['another secret', () => verify(secret, sign(secret.replace('ab', 'cd'), t, body), body, t)],
    ['a changed body', () => verify(secret, sign(secret, t, body), body.replace('80', '100'), t)],
    ['a changed t', () => verify(secret, sign(secret, t, body).replace(`t=${t}`, `t=${t + 1}`), body, t)],
    ['a t over 5 minutes old', () => verify(secret, sign(secret, t, body), body, t + 301)],
    ['no v1', () => verify(secret, `t=${t}`, body, t)],
    ['a short v1', () => verify(secret, `t=${t},v1=abc`, body, t)],
  ])('refuses %s', (_, run) => {
    expect(run()).toBe(false);
  });
});
