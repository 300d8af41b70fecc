import { FrameBatcher, RateMeter, type FrameScheduler } from './batcher';
import type { InspectorMessage } from './message';
import { Ring } from './ring';

/** What the message list shows, produced at most once an animation frame. */
export interface FeedSnapshot {
  /** Newest first, at most the display limit; frozen while paused. */
  list: InspectorMessage[];
  /** Messages held in the ring (at most its capacity). */
  buffered: number;
  /** Messages received since the page opened (Clear does not reset it). */
  received: number;
  /** Messages a second over the last second. */
  rate: number;
  paused: boolean;
  /** Messages that arrived since Pause. */
  pausedNew: number;
}

/** For the browser performance test: a plain object, updated once a frame. */
export interface FeedStats {
  /** Messages received. */
  received: number;
  /** Messages that reached the display (received while not paused). */
  rendered: number;
  /** Frames in which the display was updated. */
  frames: number;
}

/**
 * The least time between two list updates at a message rate: every frame
 * while it is low; while messages pour in, ten updates a second are all
 * anyone can read, and each costs a style, layout and paint of the list.
 */
export function renderInterval(rate: number): number {
  return rate >= 500 ? 100 : rate >= 100 ? 50 : 0;
}

/**
 * The Inspector's message pipeline: messages go into a frame batcher; once
 * a frame they move into the ring of the newest `capacity`, the counters
 * and the rate are updated, and listeners get one snapshot. Nothing here
 * renders; the view sets state once per snapshot.
 */
export class MessageFeed {
  readonly stats: FeedStats = { received: 0, rendered: 0, frames: 0 };
  private ring: Ring<InspectorMessage>;
  private batcher: FrameBatcher<InspectorMessage>;
  private meter = new RateMeter(1000);
  private listeners = new Set<(s: FeedSnapshot) => void>();
  private shown: InspectorMessage[] = [];
  private paused = false;
  private pausedNew = 0;
  private lastRate = 0;

  constructor(
    readonly capacity = 1000,
    private limit = 200,
    scheduler?: FrameScheduler,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.ring = new Ring(capacity);
    this.batcher = new FrameBatcher((items, arrived) => this.flush(items, arrived), capacity, scheduler, () => renderInterval(this.lastRate), now);
  }

  push(m: InspectorMessage): void {
    this.batcher.push(m);
  }

  onFrame(fn: (s: FeedSnapshot) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  snapshot(): FeedSnapshot {
    return {
      list: this.shown,
      buffered: this.ring.size,
      received: this.stats.received,
      rate: this.lastRate,
      paused: this.paused,
      pausedNew: this.pausedNew,
    };
  }

  /** How many of the newest to show (the DOM holds no more rows than this). */
  setLimit(n: number): void {
    this.limit = Math.max(1, Math.min(n, this.capacity));
    if (!this.paused) this.shown = this.ring.newest(this.limit);
    this.emit();
  }

  pause(): void {
    if (this.paused) return;
    this.batcher.flushNow(); // what arrived before the click is shown
    this.paused = true;
    this.pausedNew = 0;
    this.emit();
  }

  resume(): void {
    if (!this.paused) return;
    this.batcher.flushNow();
    this.paused = false;
    this.pausedNew = 0;
    this.shown = this.ring.newest(this.limit);
    this.emit();
  }

  /** Empties the ring and the list; the received counter goes on. */
  clear(): void {
    this.batcher.flushNow();
    this.ring.clear();
    this.shown = [];
    this.pausedNew = 0;
    this.emit();
  }

  /** Recomputes the rate without messages (it falls to 0 when they stop); emits when it changed. */
  tick(): void {
    const r = this.meter.rate(this.now());
    if (r !== this.lastRate) {
      this.lastRate = r;
      this.emit();
    }
  }

  dispose(): void {
    this.batcher.dispose();
    this.listeners.clear();
  }

  private flush(items: InspectorMessage[], arrived: number) {
    this.ring.pushAll(items);
    this.stats.received += arrived;
    this.meter.add(arrived, this.now());
    this.lastRate = this.meter.rate(this.now());
    if (this.paused) {
      this.pausedNew += arrived;
    } else {
      this.shown = this.ring.newest(this.limit);
      this.stats.rendered += arrived;
    }
    this.stats.frames++;
    this.emit();
  }

  private emit() {
    const s = this.snapshot();
    for (const f of this.listeners) f(s);
  }
}
