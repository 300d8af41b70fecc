import { percent } from '../lib/format';

/** One quota: used against its limit, as a labelled bar. */
export function QuotaBar({ label, used, limit, fmt }: { label: string; used: number; limit: number; fmt: (n: number) => string }) {
  const p = percent(used, limit);
  const level = p >= 90 ? 'hot' : p >= 70 ? 'warm' : 'ok';
  return (
    <div class="quota">
      <div class="quota-head">
        <span>{label}</span>
        <span class="muted">
          {fmt(used)} of {limit > 0 ? fmt(limit) : 'unlimited'} · {p.toFixed(p < 10 ? 1 : 0)}%
        </span>
      </div>
      <div class="bar" role="progressbar" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(p)}>
        <div class={`fill ${level}`} style={{ width: `${p}%` }} />
      </div>
    </div>
  );
}
