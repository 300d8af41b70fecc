// Helpers for the Inspector's unit tests (not imported by the app).
import type { FrameScheduler } from './batcher';

/** A frame clock the test advances by hand. */
export function fakeFrames() {
  let next = 1;
  const queue = new Map<number, () => void>();
  const s: FrameScheduler & { frame(): void; requested: number; get waiting(): number } = {
    requested: 0,
    request(cb) {
      s.requested++;
      queue.set(next, cb);
      return next++;
    },
    cancel(id) {
      queue.delete(id);
    },
    frame() {
      const cbs = [...queue.values()];
      queue.clear();
      cbs.forEach((cb) => cb());
    },
    get waiting() {
      return queue.size;
    },
  };
  return s;
}
