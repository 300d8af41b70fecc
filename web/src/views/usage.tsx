import { useEffect, useState } from 'preact/hooks';
import { api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { bytes, count } from '../lib/format';
import { overBounds, quotaFields } from '../lib/quotas';
import { densify, pointCount, type Window } from '../lib/timerange';
import { monthStart, sum, toCSV, usageIn } from '../lib/usage';
import { useTenant } from '../session';
import { Chart } from '../ui/chart';
import { QuotaBar } from '../ui/meter';
import { ProblemView } from '../ui/problem';
import { Segmented } from '../ui/segmented';
import { Empty, Loaded } from '../ui/states';
import { Table } from '../ui/table';

const day = 86_400_000;
type Days = '7' | '30' | '90';
const dayOptions: { key: Days; label: string }[] = [
  { key: '7', label: '7 days' },
  { key: '30', label: '30 days' },
  { key: '90', label: '90 days' },
];

const meters: { key: string; label: string; fmt: (n: number) => string }[] = [
  { key: 'messages_accepted', label: 'Messages accepted (billed)', fmt: count },
  { key: 'messages_in', label: 'Messages in', fmt: count },
  { key: 'messages_out', label: 'Messages out', fmt: count },
  { key: 'bytes_in', label: 'Bytes in', fmt: bytes },
  { key: 'bytes_out', label: 'Bytes out', fmt: bytes },
  { key: 'connection_seconds', label: 'Connection seconds', fmt: count },
  { key: 'stored_bytes', label: 'Stored bytes (peak)', fmt: bytes },
];

export function Usage() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [days, setDays] = useState<Days>('30');
  const usage = useQuery(
    async () => {
      const to = Math.ceil(Date.now() / day) * day;
      const w: Window = { from: new Date(to - Number(days) * day), to: new Date(to), stepMs: day, step: '24h' };
      const month = await usageIn(tid, { from: monthStart(Date.now()), to: new Date(to), stepMs: day, step: '24h' });
      return { w, points: await usageIn(tid, w), month };
    },
    [tid, days],
    30000,
  );
  const quotas = useQuery(async () => must(api.GET('/v1/tenants/{tid}/quotas', { params: { path: { tid } } })), [tid]);

  return (
    <section data-ready={usage.data ? 'usage' : undefined}>
      <div class="spread">
        <h1 tabIndex={-1}>Usage</h1>
        <Segmented label="Days shown" value={days} options={dayOptions} onChange={setDays} />
      </div>
      <p class="muted small">
        Nodes flush usage every 10 seconds; a message shows here within one flush. Messages in counts every PUBLISH the nodes read, refused ones too; messages accepted are those they took on, which the monthly quota counts and the invoice bills. Bytes count each MQTT packet as it crossed the wire, headers included. Days are UTC.
      </p>
      <Loaded q={usage} what="Loading usage">
        {({ w, points, month }) => {
          const x = Array.from({ length: pointCount(w) }, (_, i) => (w.from.getTime() + i * w.stepMs) / 1000);
          const csv = toCSV(points);
          return (
            <>
              <div class="row">
                <a class="button secondary" download={`berth-usage-${tenant.slug}-${days}d.csv`} href={`data:text/csv;charset=utf-8,${encodeURIComponent(csv)}`}>
                  Export CSV
                </a>
                <span class="muted small">
                  {points.filter((p) => (p.messages_in ?? 0) + (p.messages_out ?? 0) + (p.connection_seconds ?? 0) > 0).length} of {pointCount(w)} days with traffic; this month so far: {count(sum(month, 'messages_accepted'))} messages accepted (billed) of {count(sum(month, 'messages_in'))} in, {count(sum(month, 'messages_out'))} out.
                </span>
              </div>
              <div class="grid wide">
                {meters.map((m) => (
                  <Chart key={m.key} title={m.label} x={x} series={[{ label: 'per day', values: densify(w, points, m.key) }]} fmt={m.fmt} />
                ))}
              </div>
              <Loaded q={quotas} what="Loading quotas">
                {(qs) => (
                  <div class="panel">
                    <h2>This month against the plan</h2>
                    <QuotaBar label="Messages this month" used={sum(month, 'messages_accepted')} limit={qs.quotas?.monthly_messages ?? 0} fmt={count} />
                    <QuotaBar label="Stored bytes" used={Math.max(0, ...month.map((p) => p.stored_bytes ?? 0))} limit={qs.quotas?.retention_bytes ?? 0} fmt={bytes} />
                  </div>
                )}
              </Loaded>
            </>
          );
        }}
      </Loaded>
      <h2>By credential</h2>
      <ByCredential tid={tid} days={Number(days)} />
      <h2>Quotas</h2>
      <Loaded q={quotas} what="Loading quotas">
        {(qs) => <QuotaEditor tid={tid} current={qs} onSaved={quotas.reload} />}
      </Loaded>
    </section>
  );
}

type CredentialSeries = NonNullable<Schemas['UsageByCredential']['series']>[number];

/** Which device fleet did what over the shown days: each credential's totals. */
function ByCredential({ tid, days }: { tid: string; days: number }) {
  const q = useQuery(
    async () => {
      const to = Math.ceil(Date.now() / day) * day;
      const u = (await must(
        api.GET('/v1/tenants/{tid}/usage', {
          params: { path: { tid }, query: { from: new Date(to - days * day).toISOString(), to: new Date(to).toISOString(), step: '24h', group_by: 'credential' } },
        }),
      )) as Schemas['UsageByCredential'];
      return (u.series ?? []).map((s: CredentialSeries) => ({
        id: s.credential_id ?? '',
        name: s.name,
        in: (s.points ?? []).reduce((n, p) => n + (p.messages_in ?? 0), 0),
        out: (s.points ?? []).reduce((n, p) => n + (p.messages_out ?? 0), 0),
        bytesIn: (s.points ?? []).reduce((n, p) => n + (p.bytes_in ?? 0), 0),
        bytesOut: (s.points ?? []).reduce((n, p) => n + (p.bytes_out ?? 0), 0),
      }));
    },
    [tid, days],
    60000,
  );
  return (
    <Loaded q={q} what="Loading usage by credential">
      {(rows) =>
        rows.length === 0 ? (
          <Empty>No credential has sent or received a message in these days.</Empty>
        ) : (
          <Table columns={['Credential', { label: 'Messages in', num: true }, { label: 'Messages out', num: true }, { label: 'Bytes in', num: true }, { label: 'Bytes out', num: true }]}>
            {rows.map((r) => (
              <tr key={r.id}>
                <td>
                  {r.name ?? <span class="muted">deleted</span>} <code>{r.id}</code>
                </td>
                <td class="num">{count(r.in)}</td>
                <td class="num">{count(r.out)}</td>
                <td class="num">{bytes(r.bytesIn)}</td>
                <td class="num">{bytes(r.bytesOut)}</td>
              </tr>
            ))}
          </Table>
        )
      }
    </Loaded>
  );
}

function QuotaEditor({ tid, current, onSaved }: { tid: string; current: Schemas['QuotasResponse']; onSaved: () => void }) {
  const initial = (current.quotas ?? {}) as Record<string, number>;
  const max = (current.max ?? {}) as Record<string, number>;
  const [values, setValues] = useState<Record<string, number>>(initial);
  useEffect(() => setValues(initial), [current]);
  const over = overBounds(values, max);
  const save = useAction(async () => {
    await must(api.PUT('/v1/tenants/{tid}/quotas', { params: { path: { tid } }, body: values as Schemas['Quotas'] }));
    onSaved();
    return true;
  });
  const [saved, setSaved] = useState(false);
  return (
    <form
      class="panel stack"
      aria-label="Quota editor"
      onSubmit={async (e) => {
        e.preventDefault();
        setSaved(!!(await save.run()));
      }}
    >
      <p class="muted small">
        Plan <strong>{current.plan}</strong>. Each quota may be set up to the plan's bound; changes reach connected devices at once, without reconnecting them.
      </p>
      <div class="grid">
        {quotaFields.map((f) => (
          <label key={f.key}>
            {f.label}
            <input
              type="number"
              min={0}
              value={values[f.key] ?? 0}
              aria-invalid={over.includes(f.key)}
              onInput={(e) => {
                setSaved(false);
                setValues({ ...values, [f.key]: Number((e.target as HTMLInputElement).value) });
              }}
            />
            <span class={over.includes(f.key) ? 'field-error' : 'muted small'}>
              {max[f.key] ? `at most ${f.fmt(max[f.key])}` : 'no plan bound'} ({f.unit})
            </span>
          </label>
        ))}
      </div>
      <ProblemView error={save.error} />
      <div class="row">
        <button disabled={save.pending || over.length > 0}>Save quotas</button>
        {saved ? (
          <span class="ok" role="status">
            Saved.
          </span>
        ) : null}
      </div>
    </form>
  );
}
