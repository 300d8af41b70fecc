import { ApiError, api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { quotaFields } from '../lib/quotas';
import { tenantPath } from '../lib/router';
import { useTenant } from '../session';
import { ProblemView } from '../ui/problem';
import { Loaded } from '../ui/states';
import { Table } from '../ui/table';
import { BudgetNotifications } from './budgetwebhook';

/** Integer cents as money: never through floating point arithmetic. */
function money(cents: number, currency = 'usd'): string {
  const sign = cents < 0 ? '−' : '';
  const abs = Math.abs(cents);
  const whole = Math.floor(abs / 100).toLocaleString('en-US');
  return `${sign}${currency === 'usd' ? '$' : currency.toUpperCase() + ' '}${whole}.${String(abs % 100).padStart(2, '0')}`;
}

const paymentStates: Record<string, string> = {
  ok: 'in good standing',
  grace: 'a payment failed: update the payment method before the grace period ends',
  capped: "a payment failed and its grace ended: the tenants' quotas were capped to the free plan's bounds",
};

/**
 * The account's billing: its payment method (and, with payment enabled, a
 * card to add through Stripe Checkout), this month's estimate (the draft
 * invoice), its invoices (each printable as a page), its budget and the
 * webhook its notices go to, and the tenant's plan with its bounds.
 */
export function Billing() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  // Stripe Checkout sends the user back here with ?checkout=saved or
  // ?checkout=cancelled; after a save the card shows once Stripe's webhook
  // has reached the API, so the account is polled meanwhile.
  const checkout = new URLSearchParams(location.search).get('checkout');
  const account = useQuery(async () => must(api.GET('/v1/account')), [], checkout === 'saved' ? 5_000 : 0);
  const invoices = useQuery(async () => must(api.GET('/v1/invoices', { params: { query: { limit: 24 } } })), [], 60_000);
  const budget = useQuery(async () => {
    try {
      return await must(api.GET('/v1/billing/budget'));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    }
  }, []);
  const quotas = useQuery(async () => must(api.GET('/v1/tenants/{tid}/quotas', { params: { path: { tid } } })), [tid]);
  return (
    <section>
      <h1 tabIndex={-1}>Billing</h1>
      <Loaded q={account} what="Loading the account">
        {(a) => (
          <div class="panel" data-testid="payment">
            {a.payment.enabled ? (
              <>
                <p>
                  Payment method: <strong>{a.payment.payment_method ? 'on file' : 'none'}</strong>; account {paymentStates[a.payment.payment_state]}
                  {a.payment.grace_until ? ` (until ${new Date(a.payment.grace_until).toLocaleString()})` : ''}.
                  {a.payment.payment_method ? '' : ' Paid plans need a payment method.'}
                </p>
                <CheckoutReturn state={checkout} onFile={a.payment.payment_method} />
                <CheckoutButton tid={tid} />
              </>
            ) : (
              <p>Payment is not enabled on this service: no charge is made, no card is taken, and paid plans are granted by its operator.</p>
            )}
            <p class="muted small">Plans this account may use: {a.plans.join(', ')}.</p>
          </div>
        )}
      </Loaded>
      <h2>Invoices</h2>
      <Loaded q={invoices} what="Loading the invoices">
        {(l) => {
          const items = l.items as Schemas['Invoice'][];
          const draft = items.find((i) => i.status === 'draft' && i.kind === 'invoice');
          return (
            <>
              <p data-testid="estimate">
                {draft ? (
                  <>
                    This month's estimate ({draft.month}): <strong>{money(draft.total_cents, draft.currency)}</strong>, updated{' '}
                    {new Date(draft.updated_at).toLocaleString()}.
                  </>
                ) : (
                  'No estimate yet for this month: the billing worker drafts it within minutes of the first usage.'
                )}
              </p>
              {items.length ? (
                <Table columns={['Month', 'Invoice', 'Status', { label: 'Total', num: true }, 'Printable']}>
                  {items.map((i) => (
                    <tr key={i.id}>
                      <td>{i.month}</td>
                      <td>{i.number ? `#${i.number}` : '—'}</td>
                      <td>{i.status === 'draft' ? 'estimate' : 'issued'}</td>
                      <td class="num">{money(i.total_cents, i.currency)}</td>
                      <td>
                        <a href={`/v1/invoices/${encodeURIComponent(i.id)}.html`} target="_blank" rel="noopener">
                          Open {i.month}
                        </a>{' '}
                        ·{' '}
                        <a href={`/v1/invoices/${encodeURIComponent(i.id)}.pdf`} target="_blank" rel="noopener" aria-label={`PDF of ${i.month}`}>
                          PDF
                        </a>
                      </td>
                    </tr>
                  ))}
                </Table>
              ) : null}
            </>
          );
        }}
      </Loaded>
      <h2>Budget</h2>
      <Loaded q={budget} what="Loading the budget">
        {(b) =>
          b ? (
            <p data-testid="budget">
              Monthly budget {money(b.monthly_cents)}; at 100 % Berth {b.action === 'cap' ? "caps the tenants' quotas to the free plan's bounds" : 'notifies'}.
              {b.notices.length ? ` Latest: ${b.notices[0].percent} % reached in ${b.notices[0].month.slice(0, 7)}.` : ''}
            </p>
          ) : (
            <p class="muted small" data-testid="budget">
              No budget set (PUT /v1/billing/budget).
            </p>
          )
        }
      </Loaded>
      <BudgetNotifications />
      <Loaded q={quotas} what="Loading the plan">
        {(q) => {
          const max = (q.max ?? {}) as Record<string, number>;
          const cur = (q.quotas ?? {}) as Record<string, number>;
          return (
            <>
              <h2>What the plan allows</h2>
              <p>
                Tenant <strong>{tenant.slug}</strong> is on the <strong>{q.plan}</strong> plan.
              </p>
              <Table columns={['Quota', { label: 'Your setting', num: true }, { label: 'Plan bound', num: true }]}>
                {quotaFields.map((f) => (
                  <tr key={f.key}>
                    <td>{f.label}</td>
                    <td class="num">{f.fmt(cur[f.key] ?? 0)}</td>
                    <td class="num">{max[f.key] ? f.fmt(max[f.key]) : 'no bound'}</td>
                  </tr>
                ))}
              </Table>
            </>
          );
        }}
      </Loaded>
    </section>
  );
}

/**
 * Sends the user to Stripe Checkout (setup mode) to save a card: the API
 * makes the session (POST /v1/billing/checkout-session) with this page as
 * the way back, and the browser goes to the Stripe page it answers.
 */
function CheckoutButton({ tid }: { tid: string }) {
  const go = useAction(async () => {
    const back = (state: string) => `${location.origin}${tenantPath(tid, 'billing')}?checkout=${state}`;
    const s = await must(api.POST('/v1/billing/checkout-session', { body: { success_url: back('saved'), cancel_url: back('cancelled') } }));
    location.assign(s.url);
  });
  return (
    <div class="stack">
      <div class="row">
        <button type="button" disabled={go.pending} onClick={() => go.run()}>
          {go.pending ? 'Opening Stripe Checkout…' : 'Add a card with Stripe Checkout'}
        </button>
        <span class="muted small">Stripe keeps the card; Berth charges it for finalized invoices.</span>
      </div>
      <ProblemView error={go.error} />
    </div>
  );
}

/** What the page says on the way back from Stripe Checkout. */
function CheckoutReturn({ state, onFile }: { state: string | null; onFile: boolean }) {
  if (state === 'saved')
    return (
      <p class="notice" role="status">
        {onFile ? 'Stripe saved your card: it is on file.' : 'Stripe is saving your card: it shows as on file here once Stripe confirms it to Berth, usually within seconds.'}
      </p>
    );
  if (state === 'cancelled')
    return (
      <p class="muted" role="status">
        Stripe Checkout was left without saving a card.
      </p>
    );
  return null;
}
