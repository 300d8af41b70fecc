import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { when } from '../lib/format';
import { dollarsField, money, parseDollars } from '../lib/money';
import { ConfirmButton } from '../ui/confirm';
import { ProblemView, fieldReason } from '../ui/problem';
import { Loaded } from '../ui/states';

type Action = Schemas['BudgetRequest']['action'];

/** What each action does at 100 % of the budget, one sentence each. */
const actions: { key: Action; label: string; says: string }[] = [
  {
    key: 'notify',
    label: 'Notify only',
    says: 'Berth records a notice (and POSTs it to the budget webhook, if one is set); traffic and charges go on.',
  },
  {
    key: 'cap',
    label: "Cap the tenants' quotas",
    says: "Berth also lowers every quota of the account's tenants to the free plan's bounds, live, until you raise them again.",
  },
];

/**
 * The account's monthly budget (docs/billing.md, "Budgets"): this month's
 * spend (the draft invoice, the page's estimate) against it as a bar, its
 * latest notice, and a form that sets, changes or removes it. The amount
 * is typed in dollars and sent as integer cents; the page refuses what is
 * not a positive amount of whole cents, and the API's own bounds come back
 * as a 422 shown at the field.
 */
export function BudgetEditor({ draft }: { draft: Schemas['Invoice'] | undefined }) {
  const budget = useQuery(async () => {
    try {
      return await must(api.GET('/v1/billing/budget'));
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    }
  }, []);
  const current = budget.data ?? null;
  const [amount, setAmount] = useState('');
  const [action, setAction] = useState<Action>('notify');
  const [invalid, setInvalid] = useState('');
  const [saved, setSaved] = useState('');
  // The form starts as the saved budget, and follows it after each change.
  useEffect(() => {
    setAmount(current ? dollarsField(current.monthly_cents) : '');
    setAction(current?.action ?? 'notify');
  }, [current?.monthly_cents, current?.action]);

  const put = useAction(async (cents: number, to: Action) => {
    const had = !!current;
    await must(api.PUT('/v1/billing/budget', { body: { monthly_cents: cents, action: to } }));
    setSaved(had ? 'Budget changed.' : 'Budget set.');
    budget.reload();
  });
  const remove = useAction(async () => {
    await must(api.DELETE('/v1/billing/budget'));
    setSaved("Budget removed: Berth no longer checks this account's spend. Quotas a cap lowered stay as they are.");
    budget.reload();
  });
  const amountError = invalid || fieldReason(put.error, 'monthly_cents');
  const actionError = fieldReason(put.error, 'action');

  return (
    <>
      <h2>Budget</h2>
      <Loaded q={budget} what="Loading the budget">
        {() => (
          <div class="panel stack" data-testid="budget">
            {current ? (
              <>
                <p>
                  Monthly budget <strong>{money(current.monthly_cents)}</strong>; at 100 % Berth{' '}
                  {current.action === 'cap' ? "caps the tenants' quotas to the free plan's bounds" : 'notifies'}. Changed {when(current.updated_at)}.
                </p>
                <Spend draft={draft} budgetCents={current.monthly_cents} />
                <LatestNotice notice={current.notices[0]} />
              </>
            ) : (
              <p class="muted">No budget: Berth does not check this account's spend. Set one to be told at 80 % and 100 % of it.</p>
            )}
            <form
              id="budget-form"
              aria-label="Budget"
              class="stack"
              noValidate
              onSubmit={(e) => {
                e.preventDefault();
                setSaved('');
                put.clear();
                const p = parseDollars(amount);
                setInvalid(p.error ?? '');
                if (p.cents !== undefined) put.run(p.cents, action);
              }}
            >
              <label>
                Monthly budget (USD)
                <input
                  inputMode="decimal"
                  value={amount}
                  onInput={(e) => {
                    setAmount((e.target as HTMLInputElement).value);
                    setInvalid('');
                    put.clear();
                  }}
                  placeholder="250.00"
                  maxLength={24}
                  autocomplete="off"
                  aria-invalid={!!amountError}
                  aria-describedby={amountError ? 'budget-amount-error' : undefined}
                />
                {amountError ? (
                  <span id="budget-amount-error" class="field-error">
                    {amountError}
                  </span>
                ) : null}
              </label>
              <fieldset aria-describedby={actionError ? 'budget-action-error' : undefined}>
                <legend>At 100 % of the budget</legend>
                {actions.map((a) => (
                  <div key={a.key}>
                    <label class="inline">
                      <input
                        type="radio"
                        name="budget-action"
                        value={a.key}
                        checked={action === a.key}
                        onChange={() => setAction(a.key)}
                        aria-describedby={`budget-action-${a.key}`}
                      />
                      {a.label}
                    </label>
                    <p id={`budget-action-${a.key}`} class="muted small radio-note">
                      {a.says}
                    </p>
                  </div>
                ))}
                {actionError ? (
                  <span id="budget-action-error" class="field-error">
                    {actionError}
                  </span>
                ) : null}
              </fieldset>
            </form>
            {/* The dialog's own form cannot nest in the form above: its submit button joins it by id. */}
            <div class="row">
              <button form="budget-form" disabled={put.pending}>
                {current ? 'Save budget' : 'Set budget'}
              </button>
              {current ? (
                <ConfirmButton
                  label="Remove budget"
                  disabled={remove.pending}
                  question={<>Remove the monthly budget of {money(current.monthly_cents)}? Berth stops checking this account's spend; quotas a cap lowered stay as they are.</>}
                  confirm="Remove budget"
                  onConfirm={() => {
                    setSaved('');
                    setInvalid('');
                    put.clear();
                    remove.run();
                  }}
                />
              ) : null}
            </div>
            <ProblemView error={put.error} atFields={['monthly_cents', 'action']} />
            <ProblemView error={remove.error} />
            {saved ? (
              <p class="ok" role="status">
                {saved}
              </p>
            ) : null}
          </div>
        )}
      </Loaded>
    </>
  );
}

/** This month's estimate against the budget, as a bar (integer percent). */
function Spend({ draft, budgetCents }: { draft: Schemas['Invoice'] | undefined; budgetCents: number }) {
  if (!draft) return <p class="muted small">No estimate for this month yet: the bar shows once the billing worker drafts it.</p>;
  const spent = Math.max(0, draft.total_cents);
  const pct = Math.floor((spent * 100) / budgetCents);
  const level = pct >= 100 ? 'hot' : pct >= 80 ? 'warm' : 'ok';
  const label = `This month's spend (${draft.month})`;
  return (
    <div class="quota" data-testid="budget-spend">
      <div class="quota-head">
        <span>{label}</span>
        <span class="muted">
          {money(spent, draft.currency)} of {money(budgetCents)} · {pct} %
        </span>
      </div>
      <div class="bar" role="progressbar" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.min(pct, 100)} aria-valuetext={`${pct} %`}>
        <div class={`fill ${level}`} style={{ width: `${Math.min(pct, 100)}%` }} />
      </div>
    </div>
  );
}

function LatestNotice({ notice }: { notice: Schemas['BudgetNotice'] | undefined }) {
  if (!notice) return <p class="muted small">No notice yet: Berth records one when this month's estimate reaches 80 % and 100 % of the budget.</p>;
  return (
    <p class="small" data-testid="budget-notice">
      Latest notice: {notice.percent} % of the budget reached in {notice.month.slice(0, 7)} ({money(notice.total_cents)} of {money(notice.budget_cents)}
      ){notice.capped ? ", the tenants' quotas capped to the free plan's bounds" : ''}, {when(notice.created_at)}.
    </p>
  );
}
