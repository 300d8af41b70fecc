import { api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { money } from '../lib/money';
import { quotaFields } from '../lib/quotas';
import { tenantPath } from '../lib/router';
import { useTenant } from '../session';
import { ProblemView } from '../ui/problem';
import { Loaded } from '../ui/states';
import { Table } from '../ui/table';
import { BudgetEditor } from './budget';
import { BudgetNotifications } from './budgetwebhook';
import { InvoiceTable } from './invoicetable';

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
  const quotas = useQuery(async () => must(api.GET('/v1/tenants/{tid}/quotas', { params: { path: { tid } } })), [tid]);
  const draft = (invoices.data?.items as Schemas['Invoice'][] | undefined)?.find((i) => i.status === 'draft' && i.kind === 'invoice');
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
              {items.length ? <InvoiceTable items={items} /> : null}
            </>
          );
        }}
      </Loaded>
      <BudgetEditor draft={draft} />
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
