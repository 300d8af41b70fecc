// How a receiver verifies a budget webhook delivery (docs/billing.md,
// "Budget webhooks"): Berth-Signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256 keyed with the secret over t + "." + the raw body>. The
// dashboard shows this code next to the webhook; webhooksig.test.ts runs it.

/** The signature scheme in one line. */
export const signatureScheme = 'Berth-Signature: t=<unix seconds>,v1=HEX(HMAC-SHA256(secret, t + "." + body))';

/** A Node.js receiver's check, as the dashboard shows it (copyable). */
export const verifySnippet = `// ${signatureScheme}
// The key is the secret as written (whsec_ included); body is the raw request body.
import { createHmac, timingSafeEqual } from 'node:crypto';

export function verifyBerthSignature(secret, header, body, now = Date.now() / 1000) {
  const { t, v1 } = Object.fromEntries(header.split(',').map((kv) => kv.split('=')));
  if (!t || !v1 || Math.abs(now - Number(t)) > 300) return false; // 5 minutes
  const mac = createHmac('sha256', secret).update(t + '.' + body).digest('hex');
  return mac.length === v1.length && timingSafeEqual(Buffer.from(mac), Buffer.from(v1));
}
`;
