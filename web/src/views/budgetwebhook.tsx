import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { when } from '../lib/format';
import { signatureScheme, verifySnippet } from '../lib/webhooksig';
import { ConfirmButton } from '../ui/confirm';
import { CopyButton, Snippet } from '../ui/copy';
import { ProblemView, fieldReason } from '../ui/problem';
import { Loaded } from '../ui/states';
import { Table } from '../ui/table';

const deliveryStates: Record<string, string> = { pending: 'retrying', delivered: 'delivered', failed: 'failed' };

/**
 * The account's budget webhook (docs/billing.md, "Budget webhooks"): set,
 * replace or remove the URL the billing worker POSTs budget notices to,
 * rotate its signing secret, and see the latest deliveries. The secret is
 * shown once, in the answer to the PUT that made it (first set, or
 * rotation), with the code that verifies a delivery.
 */
export function BudgetNotifications() {
  const hook = useQuery(async () => {
    try {
      return await must(api.GET('/v1/billing/budget/webhook'));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    }
  }, []);
  const current = hook.data ?? null;
  const [url, setUrl] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  const [saved, setSaved] = useState('');
  // The field starts as the saved URL, and follows it after each change.
  useEffect(() => setUrl(current?.url ?? ''), [current?.url]);

  const put = useAction(async (to: string, rotate: boolean) => {
    const had = !!current;
    const h = await must(api.PUT('/v1/billing/budget/webhook', { body: { url: to, ...(rotate ? { rotate_secret: true } : {}) } }));
    // The API answers the secret only to the PUT that made it (the first, or a rotation).
    setSecret(h.secret ?? null);
    setSaved(rotate ? 'A new signing secret: the old one no longer verifies.' : had ? 'URL replaced; the signing secret is unchanged.' : 'Webhook set.');
    hook.reload();
  });
  const remove = useAction(async () => {
    await must(api.DELETE('/v1/billing/budget/webhook'));
    setSecret(null);
    setSaved('Webhook removed: notices are still recorded and shown here, and no longer POSTed.');
    hook.reload();
  });
  const urlError = fieldReason(put.error, 'url');

  return (
    <>
      <h2>Budget notifications</h2>
      <p class="muted small">
        At 80 % and 100 % of the monthly budget Berth records a notice, shown above. With a webhook it also POSTs each notice to your URL as JSON (type{' '}
        <code>budget.threshold_reached</code>), signed with the webhook's secret, and retries for about 6 hours until your endpoint answers 2xx.
      </p>
      <Loaded q={hook} what="Loading the budget webhook">
        {() => (
          <div class="panel stack" data-testid="budget-webhook">
            <p>
              {current ? (
                <>
                  Notices are POSTed to <code>{current.url}</code> (set {when(current.created_at)}, changed {when(current.updated_at)}).
                </>
              ) : (
                'No webhook: notices are only shown here.'
              )}
            </p>
            <form
              id="budget-webhook-form"
              aria-label="Budget webhook"
              noValidate
              onSubmit={(e) => {
                e.preventDefault();
                setSaved('');
                put.run(url.trim(), false);
              }}
            >
              <label>
                Webhook URL
                <input
                  type="url"
                  value={url}
                  onInput={(e) => setUrl((e.target as HTMLInputElement).value)}
                  placeholder="https://hooks.example.com/berth"
                  maxLength={2048}
                  autocomplete="off"
                  spellcheck={false}
                  aria-invalid={!!urlError}
                  aria-describedby={urlError ? 'budget-webhook-url-error' : undefined}
                />
                {urlError ? (
                  <span id="budget-webhook-url-error" class="field-error">
                    {urlError}
                  </span>
                ) : null}
              </label>
            </form>
            {/* The dialogs' own forms cannot nest in the form above: its submit button joins it by id. */}
            <div class="row">
              <button form="budget-webhook-form" disabled={put.pending}>{current ? 'Replace URL' : 'Set webhook'}</button>
              {current ? (
                <>
                  <ConfirmButton
                    label="Rotate signing secret"
                    danger={false}
                    disabled={put.pending}
                    question={<>Make a new signing secret? Deliveries are signed with the new one from now on; the current one stops verifying.</>}
                    confirm="Rotate secret"
                    onConfirm={() => {
                      setSaved('');
                      put.run(current.url, true);
                    }}
                  />
                  <ConfirmButton
                    label="Remove webhook"
                    disabled={remove.pending}
                    question={<>Stop POSTing budget notices to {current.url}? Deliveries not yet made are dropped.</>}
                    confirm="Remove webhook"
                    onConfirm={() => {
                      setSaved('');
                      remove.run();
                    }}
                  />
                </>
              ) : null}
            </div>
            <ProblemView error={put.error} atFields={['url']} />
            <ProblemView error={remove.error} />
            {saved ? (
              <p class="ok" role="status">
                {saved}
              </p>
            ) : null}
            {secret ? <SecretNotice secret={secret} onDone={() => setSecret(null)} /> : current ? <p class="muted small">The signing secret (ending in <code>{current.secret_last4}</code>) was shown when it was made; rotate it to get a new one.</p> : null}
            {current ? (
              <>
                <p class="small">
                  To check that a delivery comes from Berth: <code>{signatureScheme}</code>. Refuse a <code>t</code> more than 5 minutes from your clock, and
                  de-duplicate on the event's <code>id</code>.
                </p>
                <Snippet label="Verify a delivery (Node.js)" code={verifySnippet} />
                <Deliveries items={current.deliveries} />
              </>
            ) : null}
          </div>
        )}
      </Loaded>
    </>
  );
}

/** The new signing secret, shown this once. */
function SecretNotice({ secret, onDone }: { secret: string; onDone: () => void }) {
  return (
    <div class="notice stack" role="status">
      <p>The signing secret, shown this once: give it to the receiver that verifies the deliveries.</p>
      <p class="secret" data-testid="budget-webhook-secret">
        {secret}
      </p>
      <div class="row">
        <CopyButton text={secret} label="Copy secret" />
        <button type="button" class="secondary small" onClick={onDone}>
          I have stored it
        </button>
      </div>
    </div>
  );
}

function Deliveries({ items }: { items: Schemas['BudgetWebhookDelivery'][] }) {
  if (!items.length) return <p class="muted small">No deliveries yet.</p>;
  return (
    <Table caption="Latest deliveries" columns={['Event', 'Notice', 'State', { label: 'Attempts', num: true }, 'Last answer']}>
      {items.map((d) => (
        <tr key={d.event_id}>
          <td>
            <code>{d.event_id}</code>
          </td>
          <td>
            {d.percent} % of {d.month.slice(0, 7)}
          </td>
          <td class={d.state === 'failed' ? 'bad' : d.state === 'delivered' ? 'ok' : ''}>
            {deliveryStates[d.state]}
            {d.delivered_at ? ` ${when(d.delivered_at)}` : ''}
          </td>
          <td class="num">{d.attempts}</td>
          <td>{d.last_status != null ? `HTTP ${d.last_status}` : (d.last_error ?? '—')}</td>
        </tr>
      ))}
    </Table>
  );
}
