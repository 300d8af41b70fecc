import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useQuery } from '../hooks/useQuery';
import { count, durationNs, when } from '../lib/format';
import { histogram, latencyMetrics, latencyOnSteps, type LatencyMetric } from '../lib/latency';
import { latencyIn } from '../lib/usage';
import { tenantPath } from '../lib/router';
import { pointCount, ranges, windows, type RangeKey } from '../lib/timerange';
import { labelPlace, layout, type SpanIn } from '../lib/waterfall';
import { useTenant } from '../session';
import { Chart } from '../ui/chart';
import { Segmented } from '../ui/segmented';
import { Empty, Loaded } from '../ui/states';
import { Table } from '../ui/table';

const rangeOptions = (Object.keys(ranges) as RangeKey[]).map((k) => ({ key: k, label: k }));

export function Traces({ rest }: { rest: string[] }) {
  return rest[0] ? <Waterfall traceId={rest[0]} /> : <TraceList />;
}

function TraceList() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [range, setRange] = useState<RangeKey>('24h');
  const [kind, setKind] = useState('');
  const [clientInput, setClientInput] = useState('');
  const [clientID, setClientID] = useState('');
  const [minMs, setMinMs] = useState('');
  const [errorsOnly, setErrorsOnly] = useState(false);
  const minDuration = Number(minMs) > 0 ? `${Math.round(Number(minMs) * 1000)}us` : undefined;
  const traces = useQuery(
    async () => {
      const w = windows(range, Date.now()).current;
      const items = [];
      let cursor: string | undefined;
      // Up to 1,000 of the newest sampled traces that pass the filters.
      for (let i = 0; i < 5; i++) {
        const query = {
          limit: 200,
          from: w.from.toISOString(),
          to: w.to.toISOString(),
          cursor,
          kind: kind || undefined,
          client_id: clientID || undefined,
          min_duration: minDuration,
          errors: errorsOnly ? ('true' as const) : undefined,
        };
        const page = await must(api.GET('/v1/tenants/{tid}/traces', { params: { path: { tid }, query } }));
        items.push(...(page.items ?? []));
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
      return { w, items };
    },
    [tid, range, kind, clientID, minDuration, errorsOnly],
    15000,
  );
  const filtered = !!(kind || clientID || minDuration || errorsOnly);
  const [metric, setMetric] = useState<LatencyMetric>('delivery');
  const latency = useQuery(
    async () => {
      const w = windows(range, Date.now()).current;
      const lat = await latencyIn(tid, w, metric);
      const n = pointCount(w);
      const x = Array.from({ length: n }, (_, i) => (w.from.getTime() + i * w.stepMs) / 1000);
      return { x, ...latencyOnSteps(w.from.getTime(), w.stepMs, n, lat.series) };
    },
    [tid, range, metric],
    30000,
  );

  return (
    <section>
      <div class="spread">
        <h1 tabIndex={-1}>Traces</h1>
        <Segmented label="Time range" value={range} options={rangeOptions} onChange={setRange} />
      </div>
      <p class="muted">Sampled traces of connects through the gateway and of messages through the broker. Open one to see where its time went.</p>
      <div class="panel stack">
        <div class="spread">
          <h2>Latency of every message</h2>
          <Segmented label="Latency metric" value={metric} options={latencyMetrics} onChange={setMetric} />
        </div>
        <Loaded q={latency} what="Loading latency">
          {(l) =>
            l.count === 0 ? (
              <Empty>Nothing measured in the last {ranges[range].label}: the node records every message and connection and flushes each minute.</Empty>
            ) : (
              <Chart
                title={`${latencyMetrics.find((m) => m.key === metric)!.label}, p50 and p99 (${count(l.count)} samples)`}
                x={l.x}
                series={[
                  { label: 'p50', values: l.p50 },
                  { label: 'p99', values: l.p99 },
                ]}
                fmt={(n) => durationNs(Math.round(n))}
                points
              />
            )
          }
        </Loaded>
      </div>
      <h2>Sampled traces</h2>
      <form
        class="row"
        aria-label="Trace filters"
        onSubmit={(e) => {
          e.preventDefault();
          setClientID(clientInput.trim());
        }}
      >
        <label>
          Kind
          <select value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value)}>
            <option value="">all</option>
            <option value="gateway.connect">gateway.connect</option>
            <option value="mqtt.publish">mqtt.publish</option>
          </select>
        </label>
        <label>
          Client id
          <input value={clientInput} onInput={(e) => setClientInput((e.target as HTMLInputElement).value)} onBlur={() => setClientID(clientInput.trim())} />
        </label>
        <label>
          Minimum duration (ms)
          <input type="number" min={0} step="any" value={minMs} onChange={(e) => setMinMs((e.target as HTMLInputElement).value)} />
        </label>
        <label class="inline">
          <input type="checkbox" checked={errorsOnly} onChange={(e) => setErrorsOnly((e.target as HTMLInputElement).checked)} />
          Errors only
        </label>
        <button class="secondary">Filter</button>
      </form>
      <Loaded q={traces} what="Loading traces">
        {({ items }) => {
          const hist = histogram(items.map((t) => t.duration_ns ?? 0));
          const top = Math.max(1, ...hist.map((h) => h.n));
          if (items.length === 0) {
            return filtered ? (
              <Empty>No sampled trace in the last {ranges[range].label} passes these filters.</Empty>
            ) : (
              <Empty>No sampled traces in the last {ranges[range].label}. Connect a device through the gateway and its connect trace appears here.</Empty>
            );
          }
          return (
            <>
              <div class="grid wide">
                <figure class="chart">
                  <figcaption>Sampled trace durations ({items.length} traces)</figcaption>
                  <div class="histogram" role="img" aria-label="Duration histogram">
                    {hist.map((h) => (
                      <div key={h.lo} class="col" style={{ height: `${(h.n / top) * 100}%` }} title={`${durationNs(h.lo)}–${durationNs(h.hi)}: ${h.n}`} />
                    ))}
                  </div>
                  {hist.length ? (
                    <div class="spread muted small">
                      <span>{durationNs(hist[0].lo)}</span>
                      <span>{durationNs(hist[hist.length - 1].hi)}</span>
                    </div>
                  ) : null}
                </figure>
              </div>
              <Table columns={['Started', 'Kind', 'Client id', { label: 'Duration', num: true }, { label: 'Spans', num: true }, 'Trace']}>
                {items.slice(0, 200).map((t) => (
                  <tr key={t.trace_id}>
                    <td>{when(t.start)}</td>
                    <td>
                      {t.root_name} {t.error ? <span class="bad">error</span> : null}
                    </td>
                    <td>{t.client_id ? <code>{t.client_id}</code> : '—'}</td>
                    <td class="num">{durationNs(t.duration_ns ?? 0)}</td>
                    <td class="num">{t.span_count}</td>
                    <td>
                      <a href={tenantPath(tid, 'traces', t.trace_id!)}>
                        <code>{t.trace_id}</code>
                      </a>
                    </td>
                  </tr>
                ))}
              </Table>
              {items.length > 200 ? <p class="muted small">Showing the newest 200 of {items.length}.</p> : null}
            </>
          );
        }}
      </Loaded>
    </section>
  );
}

function Waterfall({ traceId }: { traceId: string }) {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [open, setOpen] = useState<string | null>(null);
  const trace = useQuery(async () => must(api.GET('/v1/tenants/{tid}/traces/{trace_id}', { params: { path: { tid, trace_id: traceId } } })), [tid, traceId]);
  return (
    <section>
      <p>
        <a href={tenantPath(tid, 'traces')}>← All traces</a>
      </p>
      <h1 tabIndex={-1}>Trace</h1>
      <p class="muted">
        <code>{traceId}</code>
      </p>
      <Loaded q={trace} what="Loading the trace">
        {(t) => {
          const { rows, totalNs } = layout((t.spans ?? []) as SpanIn[]);
          if (rows.length === 0) return <Empty>This trace has no spans.</Empty>;
          return (
            <div class="panel waterfall" aria-label="Waterfall">
              <div class="spread muted small">
                <span>{rows.length} spans</span>
                <span>total {durationNs(totalNs)}</span>
              </div>
              {rows.map((r) => (
                <div key={r.span.span_id}>
                  <button type="button" class="wf-row" aria-expanded={open === r.span.span_id} onClick={() => setOpen(open === r.span.span_id ? null : r.span.span_id)}>
                    <span class="wf-name" style={{ paddingLeft: `${r.depth * 1}rem` }}>
                      {r.span.name}
                      {spanFailed(r.span) ? <span class="bad"> (error)</span> : null}
                    </span>
                    <span class="wf-track">
                      <span class={spanFailed(r.span) ? 'wf-bar err' : 'wf-bar'} style={{ left: `${r.left * 100}%`, width: `${r.width * 100}%` }} />
                      <span class="wf-label" style={labelPlace(r.left, r.width)}>
                        {durationNs(r.span.duration_ns)}
                      </span>
                    </span>
                  </button>
                  {open === r.span.span_id ? <SpanDetails span={r.span} offsetNs={r.offsetNs} /> : null}
                </div>
              ))}
            </div>
          );
        }}
      </Loaded>
    </section>
  );
}

function spanFailed(s: SpanIn): boolean {
  return !!s.attributes && typeof s.attributes === 'object' && (s.attributes as Record<string, unknown>)['otel.status_code'] === 'ERROR';
}

function SpanDetails({ span, offsetNs }: { span: SpanIn; offsetNs: number }) {
  const attrs = span.attributes && typeof span.attributes === 'object' ? Object.entries(span.attributes as Record<string, unknown>) : [];
  return (
    <div class="table-wrap">
      <table>
        <tbody>
          <tr>
            <th scope="row">span</th>
            <td>
              <code>{span.span_id}</code>
            </td>
          </tr>
          <tr>
            <th scope="row">starts at</th>
            <td>+{durationNs(offsetNs)}</td>
          </tr>
          <tr>
            <th scope="row">duration</th>
            <td>{durationNs(span.duration_ns)}</td>
          </tr>
          {attrs.map(([k, v]) => (
            <tr key={k}>
              <th scope="row">{k}</th>
              <td>
                <code>{typeof v === 'string' ? v : JSON.stringify(v)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
