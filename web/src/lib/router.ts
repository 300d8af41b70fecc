// A router of a few lines: the path is the state, history.pushState moves
// it, and every link is a real <a href> so the browser's own affordances
// (open in a new tab, copy link) work.
import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();

export function navigate(to: string, replace = false) {
  if (to === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  listeners.forEach((f) => f());
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const f = () => setPath(location.pathname);
    listeners.add(f);
    addEventListener('popstate', f);
    return () => {
      listeners.delete(f);
      removeEventListener('popstate', f);
    };
  }, []);
  return path;
}

/** Sends same-origin clicks on plain links through navigate. */
export function interceptLinks(e: MouseEvent) {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = (e.target as Element | null)?.closest?.('a');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/v1/')) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
}

export interface Route {
  tid?: string;
  page: string;
  rest: string[];
}

/** /tenants/{tid}/{page}/{rest...}, /login, /signup, or / */
export function parseRoute(path: string): Route {
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'tenants' && parts[1]) return { tid: parts[1], page: parts[2] ?? 'overview', rest: parts.slice(3) };
  return { page: parts[0] ?? '', rest: parts.slice(1) };
}

export function tenantPath(tid: string, page: string, ...rest: string[]): string {
  return ['', 'tenants', tid, page, ...rest].map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join('/');
}
