/**
 * A fixed-size ring of the newest items: pushing past the capacity drops
 * the oldest. Reading returns the newest first, which is how the Inspector
 * lists messages.
 */
export class Ring<T> {
  private buf: (T | undefined)[];
  private next = 0; // where the next push goes
  private len = 0;

  constructor(readonly capacity: number) {
    if (!(capacity >= 1) || !Number.isInteger(capacity)) throw new RangeError('Ring capacity must be a positive integer');
    this.buf = new Array<T | undefined>(capacity);
  }

  get size(): number {
    return this.len;
  }

  push(x: T): void {
    this.buf[this.next] = x;
    this.next = (this.next + 1) % this.capacity;
    if (this.len < this.capacity) this.len++;
  }

  /** Pushes xs in order (the last one becomes the newest); only the last capacity of them can stay. */
  pushAll(xs: readonly T[]): void {
    for (let i = Math.max(0, xs.length - this.capacity); i < xs.length; i++) this.push(xs[i]);
  }

  /** Up to n items, newest first. */
  newest(n = this.len): T[] {
    const k = Math.max(0, Math.min(n, this.len));
    const out = new Array<T>(k);
    for (let i = 0; i < k; i++) {
      out[i] = this.buf[(this.next - 1 - i + 2 * this.capacity) % this.capacity] as T;
    }
    return out;
  }

  clear(): void {
    this.buf = new Array<T | undefined>(this.capacity); // let the dropped items be collected
    this.next = 0;
    this.len = 0;
  }
}
