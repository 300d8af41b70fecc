import type { ComponentChildren } from 'preact';
import type { Query } from '../hooks/useQuery';
import { ProblemView } from './problem';

export function Loading({ what = 'Loading' }: { what?: string }) {
  return (
    <p class="loading" role="status" aria-live="polite">
      {what}…
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>;
}

/**
 * The three states every data view has: loading (first load only), the
 * server's refusal, and the data.
 */
export function Loaded<T>({ q, children, what }: { q: Query<T>; children: (d: T) => ComponentChildren; what?: string }) {
  if (q.error && q.data === undefined) return <ProblemView error={q.error} />;
  if (q.data === undefined) return <Loading what={what} />;
  return (
    <>
      {q.error ? <ProblemView error={q.error} /> : null}
      {children(q.data)}
    </>
  );
}
