import type { ApiError } from '../api/client';

/** The reason a validation problem gives for field, if it names it. */
export function fieldReason(error: ApiError | undefined, field: string): string | undefined {
  return error?.problem.errors?.find((e) => e.field === field)?.reason;
}

/**
 * An API refusal as the server said it: title, detail (which a validation
 * problem's field list repeats), and each field's reason. Fields in
 * atFields are shown beside their inputs instead (fieldReason); a
 * validation problem about those fields only shows nothing here.
 */
export function ProblemView({ error, atFields = [] }: { error: ApiError | undefined; atFields?: string[] }) {
  if (!error) return null;
  const p = error.problem;
  const errors = p.errors?.filter((e) => !atFields.includes(e.field));
  if (p.type.endsWith('/validation') && p.errors?.length && !errors?.length) return null;
  return (
    <div class="problem" role="alert">
      <strong>{p.title}</strong>
      {p.status ? <span class="muted"> ({p.status})</span> : null}
      {p.detail && p.detail !== p.title && !p.type.endsWith('/validation') ? <p>{p.detail}</p> : null}
      {errors?.length ? (
        <ul>
          {errors.map((e) => (
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
