import { api, must } from '../api/client';
import { useQuery } from '../hooks/useQuery';
import { quotaFields } from '../lib/quotas';
import { useTenant } from '../session';
import { Loaded } from '../ui/states';
import { Table } from '../ui/table';

/**
 * The tenant's plan and its bounds. Prices, the period's estimate and
 * invoices come with the billing service; until then this page says so.
 */
export function Billing() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const quotas = useQuery(async () => must(api.GET('/v1/tenants/{tid}/quotas', { params: { path: { tid } } })), [tid]);
  return (
    <section>
      <h1 tabIndex={-1}>Billing</h1>
      <Loaded q={quotas} what="Loading the plan">
        {(q) => {
          const max = (q.max ?? {}) as Record<string, number>;
          const cur = (q.quotas ?? {}) as Record<string, number>;
          return (
            <>
              <div class="panel">
                <p>
                  Tenant <strong>{tenant.slug}</strong> is on the <strong>{q.plan}</strong> plan.
                </p>
                <p class="muted small">Invoices and this period's estimate appear here once billing is enabled for your account. No charge has been made.</p>
              </div>
              <h2>What the plan allows</h2>
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
