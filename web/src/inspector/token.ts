import { api, must, type Schemas } from '../api/client';

/**
 * POST /v1/tenants/{tid}/inspector-token answers this: a short-lived
 * (≤ 15 min) MQTT credential scoped to the tenant, subscribe-only unless
 * asked for publish. username = the credential id, password = its JWT,
 * ws_url = the gateway's WebSocket URL for browsers (null when the API
 * was not told one).
 */
export type InspectorToken = Schemas['InspectorToken'];

/** Mints an inspector token for the tenant; throws ApiError with the server's problem. */
export async function mintInspectorToken(tid: string, publish: boolean): Promise<InspectorToken> {
  return must(api.POST('/v1/tenants/{tid}/inspector-token', { params: { path: { tid } }, body: { publish } }));
}

/**
 * How long to wait before minting the next token: 80% of the token's
 * remaining life as seen when it arrived, at least minMs (so that a clock
 * far off cannot make a busy loop).
 */
export function refreshDelay(expiresAt: string, receivedAt: number, minMs = 5_000): number {
  const exp = Date.parse(expiresAt);
  if (Number.isNaN(exp)) return minMs;
  return Math.max(minMs, Math.floor((exp - receivedAt) * 0.8));
}
