import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export interface Series {
  label: string;
  /** One value per x; null is a gap. */
  values: (number | null)[];
  /** The previous period, drawn dashed and muted. */
  previous?: boolean;
}

/**
 * A time-series chart (uPlot, canvas): one x axis in Unix seconds, one or
 * more series, sized to its container.
 */
export function Chart({ title, x, series, fmt, height = 180, points = false }: { title: string; x: number[]; series: Series[]; fmt: (n: number) => string; height?: number; points?: boolean }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const opts: uPlot.Options = {
      width: Math.max(el.clientWidth, 200),
      height,
      legend: { show: true, live: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [{ stroke: '#8a94a6', grid: { stroke: 'rgba(128,128,128,0.15)' } }, { stroke: '#8a94a6', grid: { stroke: 'rgba(128,128,128,0.15)' }, size: 60, values: (_u, vals) => vals.map((v) => fmt(v)) }],
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.previous ? '#9aa5b8' : ['#0b5cad', '#c2410c', '#15803d'][i % 3],
          dash: s.previous ? [4, 4] : undefined,
          width: s.previous ? 1 : 2,
          // Sparse series (a few traces) would draw nothing as lines alone.
          points: points ? { show: true, size: 6 } : undefined,
          value: (_u: uPlot, v: number | null) => (v == null ? '—' : fmt(v)),
        })),
      ],
    };
    plot.current = new uPlot(opts, [x, ...series.map((s) => s.values)], el);
    const ro = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(el.clientWidth, 200), height }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuild when the series' shape changes; data alone goes through setData below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [series.length, height, series.map((s) => s.label).join('|')]);

  useEffect(() => {
    plot.current?.setData([x, ...series.map((s) => s.values)]);
  }, [x, series]);

  return (
    <figure class="chart" role="img" aria-label={`${title} chart`}>
      <figcaption>{title}</figcaption>
      <div ref={box} class="chart-box" />
    </figure>
  );
}
