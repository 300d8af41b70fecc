import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api/client';

export interface Query<T> {
  data: T | undefined;
  error: ApiError | undefined;
  loading: boolean;
  reload: () => void;
}

/**
 * Loads fn() when deps change (and every pollMs while the page is visible),
 * keeping the last data while a reload runs so that nothing flickers.
 */
export function useQuery<T>(fn: () => Promise<T>, deps: unknown[], pollMs = 0): Query<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<ApiError>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const reload = useCallback(() => setTick((t) => t + 1), []);

  useEffect(() => {
    let live = true;
    setLoading(true);
    fnRef
      .current()
      .then((d) => {
        if (!live) return;
        setData(d);
        setError(undefined);
      })
      .catch((e: unknown) => {
        if (!live) return;
        setError(e instanceof ApiError ? e : new ApiError(0, { type: 'about:blank', title: 'Error', status: 0, detail: String(e) }));
      })
      .finally(() => live && setLoading(false));
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);

  useEffect(() => {
    if (!pollMs) return;
    const id = setInterval(() => document.visibilityState === 'visible' && reload(), pollMs);
    return () => clearInterval(id);
  }, [pollMs, reload]);

  // A new deps set starts empty, not with the previous tenant's data.
  const depsKey = JSON.stringify(deps);
  const lastKey = useRef(depsKey);
  if (lastKey.current !== depsKey) {
    lastKey.current = depsKey;
    setData(undefined);
  }
  return { data, error, loading, reload };
}

/** Runs an action, keeping its pending state and its refusal for the form to show. */
export function useAction<A extends unknown[], R>(fn: (...a: A) => Promise<R>) {
  const [pending, setPending] = useState(false);
  const [error, setError] = useState<ApiError>();
  const run = useCallback(
    async (...a: A): Promise<R | undefined> => {
      setPending(true);
      setError(undefined);
      try {
        return await fn(...a);
      } catch (e) {
        setError(e instanceof ApiError ? e : new ApiError(0, { type: 'about:blank', title: 'Error', status: 0, detail: String(e) }));
        return undefined;
      } finally {
        setPending(false);
      }
    },
    [fn],
  );
  return { run, pending, error, clear: () => setError(undefined) };
}
