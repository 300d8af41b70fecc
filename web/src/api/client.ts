// The one typed door to the REST API. Paths, parameters and bodies are
// checked against types generated from the API's own OpenAPI document
// (schema.d.ts, `npm run gen:api`), so the dashboard cannot drift from the
// server. The session travels in the API's HttpOnly cookies; a 401 refreshes
// the session once and retries, then sends the user to the login page.
import createClient from 'openapi-fetch';
import type { components, paths } from './schema';

export type Schemas = components['schemas'];
export type Problem = Schemas['Problem'];

/** An API refusal, carrying its RFC 9457 problem body. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(problem.detail || problem.title || `HTTP ${status}`);
  }
}

/** Called when the session is gone for good (the app shows the login page). */
let onSignedOut: () => void = () => {};
export function setSignedOutHandler(f: () => void) {
  onSignedOut = f;
}

let refreshing: Promise<boolean> | null = null;
function refreshSession(): Promise<boolean> {
  refreshing ??= fetch('/v1/refresh', { method: 'POST', credentials: 'same-origin' })
    .then((r) => r.ok)
    .catch(() => false)
    .finally(() => setTimeout(() => (refreshing = null), 0));
  return refreshing;
}

const authedFetch = async (input: Request): Promise<Response> => {
  const retry = input.clone();
  const res = await fetch(input);
  if (res.status !== 401 || new URL(input.url).pathname.startsWith('/v1/log')) return res;
  if (await refreshSession()) {
    const again = await fetch(retry);
    if (again.status !== 401) return again;
  }
  onSignedOut();
  return res;
};

export const api = createClient<paths>({ baseUrl: '', credentials: 'same-origin', fetch: authedFetch });

async function problemOf(res: Response, error: unknown): Promise<ApiError> {
  if (error && typeof error === 'object' && 'title' in error) return new ApiError(res.status, error as Problem);
  const text = typeof error === 'string' ? error : '';
  return new ApiError(res.status, { type: 'about:blank', title: res.statusText || `HTTP ${res.status}`, status: res.status, detail: text });
}

/**
 * Unwraps an openapi-fetch answer: the data, or an ApiError with the
 * server's problem. Network failures become a problem too, so every page
 * shows one kind of error.
 */
export async function must<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  let r: { data?: T; error?: unknown; response: Response };
  try {
    r = await p;
  } catch (e) {
    throw new ApiError(0, { type: 'about:blank', title: 'The API cannot be reached', status: 0, detail: String(e) });
  }
  if (!r.response.ok) throw await problemOf(r.response, r.error);
  return r.data as T;
}
