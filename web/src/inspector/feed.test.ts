import { describe, expect, it } from 'vitest';
import { MessageFeed, renderInterval, type FeedSnapshot } from './feed';
import type { InspectorMessage } from './message';
import { fakeFrames } from './testutil';

let id = 0;
const msg = (topic = 't'): InspectorMessage => ({ id: ++id, time: 0, topic, qos: 0, retain: false, dup: false, payload: new Uint8Array() });

function setup(capacity = 1000, limit = 200) {
  const frames = fakeFrames();
  let now = 0;
  const feed = new MessageFeed(capacity, limit, frames, () => now);
  const snaps: FeedSnapshot[] = [];
  feed.onFrame((s) => snaps.push(s));
  return { frames, feed, snaps, advance: (ms: number) => (now += ms) };
}

describe('MessageFeed', () => {
  it('emits one snapshot per frame however many messages arrive', () => {
    const { frames, feed, snaps } = setup();
    const sent: InspectorMessage[] = [];
    for (let i = 0; i < 2000; i++) {
      const m = msg();
      sent.push(m);
      feed.push(m);
    }
    expect(snaps.length).toBe(0);
    frames.frame();
    expect(snaps.length).toBe(1);
    const s = snaps[0];
    expect(s.received).toBe(2000);
    expect(s.buffered).toBe(1000);
    expect(s.list.length).toBe(200);
    expect(s.list[0]).toBe(sent[1999]); // newest first
    expect(s.list[199]).toBe(sent[1800]);
    expect(feed.stats).toEqual({ received: 2000, rendered: 2000, frames: 1 });
  });

  it('freezes the list while paused, counting what arrives', () => {
    const { frames, feed, snaps } = setup(10, 5);
    const first = msg();
    feed.push(first);
    frames.frame();
    feed.pause();
    for (let i = 0; i < 7; i++) feed.push(msg());
    frames.frame();
    const paused = snaps[snaps.length - 1];
    expect(paused.paused).toBe(true);
    expect(paused.pausedNew).toBe(7);
    expect(paused.received).toBe(8);
    expect(paused.list).toEqual([first]);
    expect(feed.stats.rendered).toBe(1);
    feed.push(msg());
    feed.resume(); // flushes what is pending first
    const resumed = snaps[snaps.length - 1];
    expect(resumed.paused).toBe(false);
    expect(resumed.pausedNew).toBe(0);
    expect(resumed.received).toBe(9);
    expect(resumed.list.length).toBe(5);
    expect(resumed.list[0].id).toBe(id);
  });

  it('clears the list but keeps counting', () => {
    const { frames, feed, snaps } = setup();
    feed.push(msg());
    feed.push(msg());
    feed.clear();
    let s = snaps[snaps.length - 1];
    expect(s.list).toEqual([]);
    expect(s.buffered).toBe(0);
    expect(s.received).toBe(2);
    feed.push(msg());
    frames.frame();
    s = snaps[snaps.length - 1];
    expect(s.list.length).toBe(1);
    expect(s.received).toBe(3);
  });

  it('changes how many rows it shows', () => {
    const { frames, feed, snaps } = setup(1000, 200);
    for (let i = 0; i < 600; i++) feed.push(msg());
    frames.frame();
    expect(snaps[snaps.length - 1].list.length).toBe(200);
    feed.setLimit(5000);
    expect(snaps[snaps.length - 1].list.length).toBe(600);
  });

  it('reports the rate and lets it fall to 0', () => {
    const { frames, feed, snaps, advance } = setup();
    for (let i = 0; i < 50; i++) feed.push(msg());
    frames.frame();
    advance(500);
    for (let i = 0; i < 50; i++) feed.push(msg());
    frames.frame();
    expect(snaps[snaps.length - 1].rate).toBe(100);
    advance(1000);
    const before = snaps.length;
    feed.tick();
    expect(snaps.length).toBe(before + 1);
    expect(snaps[snaps.length - 1].rate).toBe(0);
    feed.tick(); // unchanged: no snapshot
    expect(snaps.length).toBe(before + 1);
  });

  it('updates less often while messages pour in', () => {
    expect(renderInterval(10)).toBe(0);
    expect(renderInterval(2000)).toBeGreaterThanOrEqual(50);
    const { frames, feed, snaps, advance } = setup();
    for (let i = 0; i < 1000; i++) feed.push(msg());
    frames.frame(); // 1000 msg/s now
    expect(snaps.length).toBe(1);
    for (let f = 0; f < 5; f++) {
      advance(16);
      feed.push(msg());
      frames.frame();
    }
    expect(snaps.length).toBe(1); // 80 ms: still waiting
    advance(30);
    frames.frame();
    expect(snaps.length).toBe(2);
    expect(snaps[1].received).toBe(1005);
  });

  it('stops on dispose', () => {
    const { frames, feed, snaps } = setup();
    feed.push(msg());
    feed.dispose();
    frames.frame();
    expect(snaps.length).toBe(0);
  });
});
