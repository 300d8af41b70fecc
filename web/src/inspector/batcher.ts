/** When to run the next flush: requestAnimationFrame in the browser, a fake clock in tests. */
export interface FrameScheduler {
  request(cb: () => void): number;
  cancel(id: number): void;
}

export const animationFrames: FrameScheduler = {
  request: (cb) => (typeof requestAnimationFrame === 'function' ? requestAnimationFrame(() => cb()) : (setTimeout(cb, 16) as unknown as number)),
  cancel: (id) => (typeof cancelAnimationFrame === 'function' ? cancelAnimationFrame(id) : clearTimeout(id)),
};

/**
 * Collects items as they arrive and hands them over at most once per
 * animation frame, so that a burst of thousands of messages costs one
 * render, not one each. flush gets the items in arrival order and how many
 * arrived in all: while frames do not run (a hidden tab) only the newest
 * maxPending are kept, the rest are counted. minInterval, when given, is
 * asked before each flush: a frame that comes sooner after the last flush
 * waits for a later frame (fewer, bigger renders while messages pour in).
 */
export class FrameBatcher<T> {
  private items: T[] = [];
  private arrived = 0;
  private frame: number | null = null;
  private disposed = false;
  private last = -Infinity;

  constructor(
    private readonly flush: (items: T[], arrived: number) => void,
    private readonly maxPending = 1000,
    private readonly scheduler: FrameScheduler = animationFrames,
    private readonly minInterval: () => number = () => 0,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Items waiting for the next frame (at most maxPending). */
  get pending(): number {
    return this.items.length;
  }

  push(x: T): void {
    if (this.disposed) return;
    this.items.push(x);
    this.arrived++;
    // Trim in bulk once the backlog is twice the bound: amortized O(1) a push.
    if (this.items.length >= 2 * this.maxPending) this.items = this.items.slice(this.items.length - this.maxPending);
    if (this.frame === null) this.frame = this.scheduler.request(this.onFrame);
  }

  /** Hands over what is pending now, without waiting for the frame. */
  flushNow(): void {
    if (this.frame !== null) {
      this.scheduler.cancel(this.frame);
      this.frame = null;
    }
    this.run(true);
  }

  /** Drops what is pending and stops. */
  dispose(): void {
    this.disposed = true;
    if (this.frame !== null) this.scheduler.cancel(this.frame);
    this.frame = null;
    this.items = [];
    this.arrived = 0;
  }

  private onFrame = () => this.run(false);

  private run(force: boolean) {
    this.frame = null;
    if (this.arrived === 0) return;
    const now = this.now();
    if (!force && now - this.last < this.minInterval()) {
      this.frame = this.scheduler.request(this.onFrame);
      return;
    }
    this.last = now;
    let items = this.items;
    if (items.length > this.maxPending) items = items.slice(items.length - this.maxPending);
    const arrived = this.arrived;
    this.items = [];
    this.arrived = 0;
    this.flush(items, arrived);
  }
}

/** Messages a second over a sliding window, fed once a frame. */
export class RateMeter {
  private marks: { t: number; n: number }[] = [];

  constructor(private readonly windowMs = 1000) {}

  add(n: number, now: number): void {
    if (n > 0) this.marks.push({ t: now, n });
    this.trim(now);
  }

  rate(now: number): number {
    this.trim(now);
    let sum = 0;
    for (const m of this.marks) sum += m.n;
    return (sum * 1000) / this.windowMs;
  }

  reset(): void {
    this.marks = [];
  }

  private trim(now: number) {
    let i = 0;
    while (i < this.marks.length && this.marks[i].t <= now - this.windowMs) i++;
    if (i) this.marks.splice(0, i);
  }
}
