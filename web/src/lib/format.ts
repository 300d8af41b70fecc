// Numbers as people read them.

const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n: number): string {
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function count(n: number): string {
  if (n > 0 && n < 1) return n.toFixed(2);
  if (Math.abs(n) < 10_000) return n.toLocaleString('en-US', { maximumFractionDigits: 1 });
  const k = ['', 'k', 'M', 'G', 'T'];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1000 && i < k.length - 1) {
    v /= 1000;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)}${k[i]}`;
}

export function durationNs(ns: number): string {
  if (ns < 1_000) return `${ns} ns`;
  if (ns < 1_000_000) return `${(ns / 1_000).toFixed(ns < 10_000 ? 1 : 0)} µs`;
  if (ns < 1_000_000_000) return `${(ns / 1_000_000).toFixed(ns < 10_000_000 ? 2 : 1)} ms`;
  return `${(ns / 1_000_000_000).toFixed(2)} s`;
}

/** Whole seconds as the largest exact unit: 86400 is "1 d", 90 is "90 s". */
export function seconds(n: number): string {
  for (const [u, size] of [['d', 86_400], ['h', 3_600], ['min', 60]] as const) {
    if (n >= size && n % size === 0) return `${count(n / size)} ${u}`;
  }
  return `${count(n)} s`;
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime()) || d.getTime() <= 0) return '—';
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function percent(used: number, limit: number): number {
  if (!(limit > 0)) return 0;
  return Math.min(100, Math.max(0, (used / limit) * 100));
}

/** Payload bytes shown as text, pretty JSON, or hex. */
export type PayloadView = 'text' | 'json' | 'hex';

export function payload(b: Uint8Array, view: PayloadView): string {
  if (view === 'hex') {
    const out: string[] = [];
    for (let i = 0; i < b.length; i += 16) {
      const row = Array.from(b.subarray(i, i + 16), (x) => x.toString(16).padStart(2, '0')).join(' ');
      out.push(i.toString(16).padStart(6, '0') + '  ' + row);
    }
    return out.join('\n');
  }
  const text = new TextDecoder('utf-8', { fatal: false }).decode(b);
  if (view === 'json') {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return text + '\n\n(not valid JSON)';
    }
  }
  return text;
}

export function base64ToBytes(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
