import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useQuery } from '../hooks/useQuery';
import { durationNs, when } from '../lib/format';
import { histogram, percentilesOverTime } from '../lib/latency';
import { tenantPath } from '../lib/router';
import { ranges, windows, type RangeKey } from '../lib/timerange';
import { layout, type SpanIn } from '../lib/waterfall';
import { useTenant } from '../session';
import { Chart } from '../ui/chart';
import { Segmented } from '../ui/segmented';
import { Empty, Loaded } from '../ui/states';

const rangeOptions = (Object.keys(ranges) as RangeKey[]).map((k) => ({ key: k, label: k }));

export function Traces({ rest }: { rest: string[] }) {
  return rest[0] ? <Waterfall traceId={rest[0]} /> : <TraceList />;
}

function TraceList() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [range, setRange] = useState<RangeKey>('24h');
  const [kind, setKind] = useState('');
  const [minMs, setMinMs] = useState('');
  const traces = useQuery(
    async () => {
      const w = windows(range, Date.now()).current;
      const items = [];
      let cursor: string | undefined;
      // Up to 1,000 of the newest sampled traces in the window.
      for (let i = 0; i < 5; i++) {
        const page = await must(api.GET('/v1/tenants/{tid}/traces', { params: { path: { tid }, query: { limit: 200, from: w.from.toISOString(), to: w.to.toISOString(), cursor } } }));
        items.push(...(page.items ?? []));
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
      return { w, items };
    },
    [tid, range],
    15000,
  );

  return (
    <section>
      <div class="spread">
        <h1 tabIndex={-1}>Traces</h1>
        <Segmented label="Time range" value={range} options={rangeOptions} onChange={setRange} />
      </div>
      <p class="muted">Sampled traces of connects through the gateway and of messages through the broker. Open one to see where its time went.</p>
      <Loaded q={traces} what="Loading traces">
        {({ w, items }) => {
          const kinds = [...new Set(items.map((t) => t.root_name ?? ''))].sort();
          const min = Number(minMs) * 1e6 || 0;
          const shown = items.filter((t) => (!kind || t.root_name === kind) && (t.duration_ns ?? 0) >= min);
          const samples = shown.map((t) => ({ t: Date.parse(t.start ?? ''), ns: t.duration_ns ?? 0 }));
          const pct = percentilesOverTime(samples, w.from.getTime(), w.to.getTime(), w.stepMs);
          const hist = histogram(samples.map((s) => s.ns));
          const top = Math.max(1, ...hist.map((h) => h.n));
          return (
            <>
              <form class="row" aria-label="Trace filters" onSubmit={(e) => e.preventDefault()}>
                <label>
                  Kind
                  <select value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value)}>
                    <option value="">all</option>
                    {kinds.map((k) => (
                      <option key={k} value={k}>
                        {k}
                      </option>
                    ))}
                  </select>
                </label>
                <label>
                  Minimum duration (ms)
                  <input type="number" min={0} step="any" value={minMs} onInput={(e) => setMinMs((e.target as HTMLInputElement).value)} />
                </label>
              </form>
              {items.length === 0 ? (
                <Empty>No sampled traces in the last {ranges[range].label}. Connect a device through the gateway and its connect trace appears here.</Empty>
              ) : (
                <>
                  <div class="grid wide">
                    <Chart title="Latency p50 and p99" x={pct.x} series={[{ label: 'p50', values: pct.p50 }, { label: 'p99', values: pct.p99 }]} fmt={(n) => durationNs(Math.round(n))} />
                    <figure class="chart">
                      <figcaption>Duration histogram ({shown.length} traces)</figcaption>
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
                  <h2>Sampled traces</h2>
                  <div class="table-wrap">
                    <table>
                      <thead>
                        <tr>
                          <th scope="col">Started</th>
                          <th scope="col">Kind</th>
                          <th scope="col" class="num">Duration</th>
                          <th scope="col" class="num">Spans</th>
                          <th scope="col">Trace id</th>
                        </tr>
                      </thead>
                      <tbody>
                        {shown.slice(0, 200).map((t) => (
                          <tr key={t.trace_id}>
                            <td>{when(t.start)}</td>
                            <td>{t.root_name}</td>
                            <td class="num">{durationNs(t.duration_ns ?? 0)}</td>
                            <td class="num">{t.span_count}</td>
                            <td>
                              <a href={tenantPath(tid, 'traces', t.trace_id!)}>
                                <code>{t.trace_id}</code>
                              </a>
                            </td>
                          </tr>
                        ))}
                      </tbody>
                    </table>
                  </div>
                  {shown.length > 200 ? <p class="muted small">Showing the newest 200 of {shown.length}.</p> : null}
                </>
              )}
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
                    </span>
                    <span class="wf-track">
                      <span class="wf-bar" style={{ left: `${r.left * 100}%`, width: `${r.width * 100}%` }} />
                      <span class="wf-label" style={r.left > 0.6 ? { right: `${(1 - r.left) * 100 + 0.5}%` } : { left: `${(r.left + r.width) * 100 + 0.5}%` }}>
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
