import type { ApiError } from '../api/client';

/** An API refusal as the server said it: title, detail (which a validation problem's field list repeats), and each field's reason. */
export function ProblemView({ error }: { error: ApiError | undefined }) {
  if (!error) return null;
  const p = error.problem;
  return (
    <div class="problem" role="alert">
      <strong>{p.title}</strong>
      {p.status ? <span class="muted"> ({p.status})</span> : null}
      {p.detail && p.detail !== p.title && !p.type.endsWith('/validation') ? <p>{p.detail}</p> : null}
      {p.errors?.length ? (
        <ul>
          {p.errors.map((e) => (
            <li key={e.field + e.reason}>
              <code>{e.field}</code> {e.reason}
            </li>
          ))}
        </ul>
      ) : null}
      {p.request_id ? <p class="muted small">request {p.request_id}</p> : null}
    </div>
  );
}
