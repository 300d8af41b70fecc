// Layout of a trace waterfall: spans in tree order (each parent before its
// children, siblings by start), indented by depth, each bar placed as a
// fraction of the trace's whole extent.

export interface SpanIn {
  span_id: string;
  parent_span_id?: string | null;
  name: string;
  start: string;
  duration_ns: number;
  attributes?: unknown;
}

export interface Row {
  span: SpanIn;
  depth: number;
  /** Offset from the trace's start, in ns. */
  offsetNs: number;
  /** Left edge and width as fractions (0..1) of the trace's extent. */
  left: number;
  width: number;
}

/** RFC 3339 with up to nanoseconds → ns since the epoch, as a bigint-free number of ns relative to base. */
export function parseNs(iso: string): { ms: number; subMsNs: number } {
  const m = /\.(\d+)/.exec(iso);
  const frac = m ? (m[1] + '000000000').slice(0, 9) : '000000000';
  const ms = Date.parse(iso.replace(/\.\d+/, '.' + frac.slice(0, 3)));
  return { ms, subMsNs: Number(frac.slice(3)) };
}

function relNs(iso: string, base: { ms: number; subMsNs: number }): number {
  const p = parseNs(iso);
  return (p.ms - base.ms) * 1e6 + (p.subMsNs - base.subMsNs);
}

export function layout(spans: SpanIn[]): { rows: Row[]; totalNs: number } {
  if (spans.length === 0) return { rows: [], totalNs: 0 };
  const starts = spans.map((s) => parseNs(s.start));
  let base = starts[0];
  for (const s of starts) if (s.ms < base.ms || (s.ms === base.ms && s.subMsNs < base.subMsNs)) base = s;
  const ids = new Set(spans.map((s) => s.span_id));
  const children = new Map<string, SpanIn[]>();
  const roots: SpanIn[] = [];
  for (const s of spans) {
    const p = s.parent_span_id;
    if (p && ids.has(p) && p !== s.span_id) {
      const list = children.get(p) ?? [];
      list.push(s);
      children.set(p, list);
    } else {
      roots.push(s); // a missing parent (another process's span) makes a root
    }
  }
  let endNs = 0;
  for (const s of spans) endNs = Math.max(endNs, relNs(s.start, base) + s.duration_ns);
  const totalNs = Math.max(endNs, 1);
  const byStart = (a: SpanIn, b: SpanIn) => relNs(a.start, base) - relNs(b.start, base);
  const rows: Row[] = [];
  const seen = new Set<string>();
  const walk = (s: SpanIn, depth: number) => {
    if (seen.has(s.span_id)) return; // a cycle in hostile data ends here
    seen.add(s.span_id);
    const off = relNs(s.start, base);
    rows.push({ span: s, depth, offsetNs: off, left: off / totalNs, width: Math.max(s.duration_ns / totalNs, 0) });
    for (const c of (children.get(s.span_id) ?? []).sort(byStart)) walk(c, depth + 1);
  };
  for (const r of roots.sort(byStart)) walk(r, 0);
  for (const s of spans) if (!seen.has(s.span_id)) walk(s, 0);
  return { rows, totalNs };
}

/** Where a bar's duration label goes: after the bar, before it, or inside it, never past the track. */
export function labelPlace(left: number, width: number): Record<string, string> {
  const pct = (f: number) => `${+(f * 100 + 0.5).toFixed(3)}%`;
  if (left + width <= 0.8) return { left: pct(left + width) };
  if (left >= 0.2) return { right: pct(1 - left) };
  return { left: pct(left), color: 'var(--accent-text)' };
}
