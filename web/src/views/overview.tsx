import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useQuery } from '../hooks/useQuery';
import { bytes, count, durationNs } from '../lib/format';
import { densify, pointCount, ranges, windows, type RangeKey, type Window } from '../lib/timerange';
import { latencyOnSteps } from '../lib/latency';
import { latencyIn, monthStart, sum, usageIn } from '../lib/usage';
import { useTenant } from '../session';
import { Chart } from '../ui/chart';
import { QuotaBar } from '../ui/meter';
import { ProblemView } from '../ui/problem';
import { Segmented } from '../ui/segmented';
import { Loading } from '../ui/states';

/** Today, UTC: one bucket of a day. */
function today(now: number): Window {
  const from = Math.floor(now / 86_400_000) * 86_400_000;
  return { from: new Date(from), to: new Date(from + 86_400_000), stepMs: 86_400_000, step: '24h' };
}

/** ?range= keeps a chosen range in links and reloads. */
function rangeFromURL(): RangeKey {
  const r = new URLSearchParams(location.search).get('range');
  return r && r in ranges ? (r as RangeKey) : '24h';
}

const rangeOptions = (Object.keys(ranges) as RangeKey[]).map((k) => ({ key: k, label: k }));

export function Overview() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [range, setRangeState] = useState<RangeKey>(rangeFromURL);
  const setRange = (r: RangeKey) => {
    setRangeState(r);
    history.replaceState(null, '', `${location.pathname}?range=${r}`);
  };

  const now = useQuery(
    async () => {
      const five = windows('1h', Date.now()).current;
      five.from = new Date(five.to.getTime() - 5 * 60_000);
      const [sessions, quotas, recent, month, latency] = await Promise.all([
        must(api.GET('/v1/tenants/{tid}/sessions', { params: { path: { tid }, query: { state: 'connected', limit: 1000 } } })),
        must(api.GET('/v1/tenants/{tid}/quotas', { params: { path: { tid } } })),
        usageIn(tid, five),
        usageIn(tid, { from: monthStart(Date.now()), to: five.to, stepMs: 86_400_000, step: '24h' }),
        latencyIn(tid, today(Date.now()), 'delivery'),
      ]);
      const connected = (sessions.items ?? []).filter((s) => s.connected).length;
      return { connected, more: !!sessions.next_cursor, quotas, recent, month, latency: latency.series[0] };
    },
    [tid],
    5000,
  );

  const series = useQuery(
    async () => {
      const w = windows(range, Date.now());
      const [cur, prev, lat] = await Promise.all([usageIn(tid, w.current), usageIn(tid, w.previous), latencyIn(tid, w.current, 'delivery')]);
      const x = Array.from({ length: pointCount(w.current) }, (_, i) => (w.current.from.getTime() + i * w.current.stepMs) / 1000);
      const pair = (m: string) => ({ cur: densify(w.current, cur, m), prev: densify(w.previous, prev, m) });
      const latency = latencyOnSteps(w.current.from.getTime(), w.current.stepMs, x.length, lat.series);
      return { x, msgIn: pair('messages_in'), msgOut: pair('messages_out'), bIn: pair('bytes_in'), bOut: pair('bytes_out'), latency };
    },
    [tid, range],
    30000,
  );

  const d = now.data;
  const q = d?.quotas.quotas ?? {};
  const rateIn = d ? sum(d.recent, 'messages_in') / 300 : 0;
  const rateOut = d ? sum(d.recent, 'messages_out') / 300 : 0;
  const bytesIn = d ? sum(d.recent, 'bytes_in') / 300 : 0;
  const monthMsgs = d ? sum(d.month, 'messages_accepted') : 0; // what the quota counts and the invoice bills

  return (
    <section data-ready={series.data && d ? 'overview' : undefined}>
      <div class="spread">
        <h1 tabIndex={-1}>Overview</h1>
        <Segmented label="Time range" value={range} options={rangeOptions} onChange={setRange} />
      </div>
      <ProblemView error={now.error} />
      {!d ? (
        <Loading what="Loading live figures" />
      ) : (
        <div class="grid" aria-label="Now">
          <Stat label="Clients connected" value={`${d.connected}${d.more ? '+' : ''}`} />
          <Stat label="Messages in / s" value={count(rateIn)} sub="average over the last 5 minutes" />
          <Stat label="Messages out / s" value={count(rateOut)} sub="average over the last 5 minutes" />
          <Stat label="Bytes in / s" value={bytes(Math.round(bytesIn))} sub="average over the last 5 minutes" />
          <Stat
            label="Publish → delivery p50 / p99"
            value={d.latency?.count ? `${durationNs(Math.round((d.latency.p50_us ?? 0) * 1000))} / ${durationNs(Math.round((d.latency.p99_us ?? 0) * 1000))}` : '—'}
            sub={d.latency?.count ? `today (UTC), ${count(d.latency.count)} deliveries` : 'no deliveries today'}
          />
        </div>
      )}
      {d ? (
        <div class="panel">
          <h2>Quotas</h2>
          <QuotaBar label="Connections" used={d.connected} limit={q.max_connections ?? 0} fmt={count} />
          <QuotaBar label="Messages per second" used={rateIn} limit={q.max_msgs_per_sec ?? 0} fmt={count} />
          <QuotaBar label="Bytes per second" used={bytesIn} limit={q.max_bytes_per_sec ?? 0} fmt={(n) => bytes(Math.round(n))} />
          <QuotaBar label="Messages this month" used={monthMsgs} limit={q.monthly_messages ?? 0} fmt={count} />
        </div>
      ) : null}
      <h2>Traffic over {ranges[range].label}</h2>
      <ProblemView error={series.error} />
      {series.data ? (
        <div class="grid wide">
          <Chart title="Messages in" x={series.data.x} series={[{ label: 'this period', values: series.data.msgIn.cur }, { label: 'previous period', values: series.data.msgIn.prev, previous: true }]} fmt={count} />
          <Chart title="Messages out" x={series.data.x} series={[{ label: 'this period', values: series.data.msgOut.cur }, { label: 'previous period', values: series.data.msgOut.prev, previous: true }]} fmt={count} />
          <Chart title="Bytes in" x={series.data.x} series={[{ label: 'this period', values: series.data.bIn.cur }, { label: 'previous period', values: series.data.bIn.prev, previous: true }]} fmt={bytes} />
          <Chart title="Bytes out" x={series.data.x} series={[{ label: 'this period', values: series.data.bOut.cur }, { label: 'previous period', values: series.data.bOut.prev, previous: true }]} fmt={bytes} />
          <Chart
            title="Publish → delivery latency"
            x={series.data.x}
            series={[
              { label: 'p50', values: series.data.latency.p50 },
              { label: 'p99', values: series.data.latency.p99 },
            ]}
            fmt={(n) => durationNs(Math.round(n))}
            points
          />
        </div>
      ) : series.error ? null : (
        <Loading what="Loading charts" />
      )}
    </section>
  );
}

export function Stat({ label, value, sub }: { label: string; value: string; sub?: string }) {
  return (
    <div class="stat">
      <div class="label">{label}</div>
      <div class="value">{value}</div>
      {sub ? <div class="sub">{sub}</div> : null}
    </div>
  );
}
