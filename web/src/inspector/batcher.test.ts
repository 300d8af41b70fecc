import { describe, expect, it } from 'vitest';
import { FrameBatcher, RateMeter } from './batcher';
import { fakeFrames } from './testutil';

describe('FrameBatcher', () => {
  it('flushes once per frame, in arrival order', () => {
    const frames = fakeFrames();
    const got: { items: number[]; arrived: number }[] = [];
    const b = new FrameBatcher<number>((items, arrived) => got.push({ items, arrived }), 1000, frames);
    for (let i = 0; i < 2000; i++) b.push(i);
    expect(frames.requested).toBe(1); // one frame asked for, not one a message
    expect(got).toEqual([]);
    frames.frame();
    expect(got.length).toBe(1);
    expect(got[0].arrived).toBe(2000);
    expect(got[0].items.length).toBe(1000); // only the newest maxPending are kept
    expect(got[0].items[0]).toBe(1000);
    expect(got[0].items[999]).toBe(1999);
    frames.frame();
    expect(got.length).toBe(1); // nothing new, no flush
    b.push(5);
    b.push(6);
    frames.frame();
    expect(got[1]).toEqual({ items: [5, 6], arrived: 2 });
    expect(frames.requested).toBe(2);
  });

  it('bounds its backlog while frames do not run (a hidden tab)', () => {
    const frames = fakeFrames();
    let last: { n: number; arrived: number } | undefined;
    const b = new FrameBatcher<number>((items, arrived) => (last = { n: items.length, arrived }), 100, frames);
    let most = 0;
    for (let i = 0; i < 100_000; i++) {
      b.push(i);
      most = Math.max(most, b.pending);
    }
    expect(most).toBeLessThan(200);
    frames.frame();
    expect(last).toEqual({ n: 100, arrived: 100_000 });
  });

  it('flushNow hands over at once and cancels the frame; dispose drops', () => {
    const frames = fakeFrames();
    const got: number[][] = [];
    const b = new FrameBatcher<number>((items) => got.push(items), 10, frames);
    b.push(1);
    b.flushNow();
    expect(got).toEqual([[1]]);
    expect(frames.waiting).toBe(0);
    b.flushNow(); // nothing pending: no empty flush
    expect(got.length).toBe(1);
    b.push(2);
    b.dispose();
    frames.frame();
    b.push(3);
    frames.frame();
    expect(got.length).toBe(1);
  });

  it('uses requestAnimationFrame by default', async () => {
    const got: number[][] = [];
    const b = new FrameBatcher<number>((items) => got.push(items));
    b.push(1);
    b.push(2);
    expect(got).toEqual([]);
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    expect(got).toEqual([[1, 2]]);
    b.dispose();
  });
});

describe('FrameBatcher with a least interval', () => {
  it('waits for a later frame when the last flush was too recent; flushNow does not wait', () => {
    const frames = fakeFrames();
    let now = 0;
    let gap = 100;
    const got: number[][] = [];
    const b = new FrameBatcher<number>((items) => got.push(items), 1000, frames, () => gap, () => now);
    b.push(1);
    frames.frame();
    expect(got).toEqual([[1]]);
    b.push(2);
    now = 16;
    frames.frame();
    expect(got.length).toBe(1); // too soon: asked for another frame
    expect(frames.waiting).toBe(1);
    b.push(3);
    now = 99;
    frames.frame();
    expect(got.length).toBe(1);
    now = 100;
    frames.frame();
    expect(got).toEqual([[1], [2, 3]]);
    b.push(4);
    b.flushNow();
    expect(got.at(-1)).toEqual([4]);
    gap = 0;
    b.push(5);
    now = 101;
    frames.frame();
    expect(got.at(-1)).toEqual([5]);
  });
});

describe('RateMeter', () => {
  it('counts over a sliding window', () => {
    const m = new RateMeter(1000);
    m.add(100, 0);
    m.add(100, 500);
    expect(m.rate(900)).toBe(200);
    expect(m.rate(1200)).toBe(100); // the first batch left the window
    expect(m.rate(1600)).toBe(0);
    m.add(0, 1700);
    expect(m.rate(1700)).toBe(0);
  });

  it('scales to messages a second for other windows', () => {
    const m = new RateMeter(2000);
    m.add(1000, 10);
    expect(m.rate(20)).toBe(500);
    m.reset();
    expect(m.rate(20)).toBe(0);
  });
});
