import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ApiError } from '../api/client';
import { InspectorConnection, type ConnState } from './connection';
import type { InspectorMessage } from './message';
import type { InspectorToken } from './token';

type Handler = (...a: any[]) => void;

/** Just enough of MqttClient for InspectorConnection, driven by the test. */
class FakeClient {
  handlers = new Map<string, Handler[]>();
  sent: any[] = [];
  ended: any[] = [];
  lastId = 0;
  subAnswer: (cb: Handler) => void = (cb) => cb(null, [{ topic: 'x', qos: 1 }], { cmd: 'suback', granted: [1] });
  pubAnswer: (cb: Handler, id: number) => void = (cb, id) => {
    this.emit('packetreceive', { cmd: 'puback', messageId: id, reasonCode: 0x10 });
    cb(undefined, { cmd: 'publish', messageId: id });
  };
  constructor(
    readonly url: string,
    readonly opts: any,
  ) {}
  on(ev: string, h: Handler) {
    this.handlers.set(ev, [...(this.handlers.get(ev) ?? []), h]);
    return this;
  }
  emit(ev: string, ...a: any[]) {
    for (const h of this.handlers.get(ev) ?? []) h(...a);
  }
  subscribe(_t: string, _o: any, cb: Handler) {
    this.subAnswer(cb);
  }
  unsubscribe(_t: string, cb: Handler) {
    cb(null, { cmd: 'unsuback', granted: [0x11] });
  }
  publish(_t: string, _p: string, o: any, cb: Handler) {
    if (o.qos === 0) return cb();
    const id = ++this.lastId;
    queueMicrotask(() => this.pubAnswer(cb, id));
  }
  getLastMessageId() {
    return this.lastId;
  }
  end(...a: any[]) {
    this.ended.push(a);
  }
  _sendPacket(p: any) {
    this.sent.push(p);
  }
}

const base = Date.parse('2026-03-01T12:00:00Z');
function token(over: Partial<InspectorToken> = {}, lifeMs = 600_000): InspectorToken {
  return {
    username: 'cred_1',
    password: 'jwt-' + Math.random().toString(36).slice(2),
    client_id_prefix: 'berth-inspector-',
    expires_at: new Date(Date.now() + lifeMs).toISOString(),
    acl: { pub: [], sub: ['#'] },
    ws_url: 'ws://127.0.0.1:8083/mqtt',
    ...over,
  };
}

function setup(mint?: (publish: boolean) => Promise<InspectorToken>) {
  const clients: FakeClient[] = [];
  const states: ConnState[] = [];
  const notices: { text: string; err?: Error }[] = [];
  const messages: InspectorMessage[] = [];
  const mints: boolean[] = [];
  const conn = new InspectorConnection(
    {
      mint: async (p) => {
        mints.push(p);
        return mint ? mint(p) : token();
      },
      load: async () => ({
        connect: (url: string, opts: any) => {
          const c = new FakeClient(url, opts);
          clients.push(c);
          return c as any;
        },
      }),
    },
    { state: (s) => states.push(s), message: (m) => messages.push(m), notice: (text, err) => notices.push({ text, err }) },
  );
  return { conn, clients, states, notices, messages, mints, last: () => clients[clients.length - 1] };
}

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(base);
});
afterEach(() => vi.useRealTimers());

describe('InspectorConnection', () => {
  it('connects with MQTT 5 and the token in CONNECT, not the URL', async () => {
    const t = setup();
    await t.conn.connect(false);
    expect(t.mints).toEqual([false]);
    const c = t.last();
    expect(c.url).toBe('ws://127.0.0.1:8083/mqtt');
    expect(c.opts.protocolVersion).toBe(5);
    expect(c.opts.username).toBe('cred_1');
    expect(c.opts.password).toMatch(/^jwt-/);
    expect(c.url).not.toContain(c.opts.password);
    expect(c.opts.clientId).toMatch(/^berth-inspector-[0-9a-f]{12}$/);
    expect(c.opts.reconnectPeriod).toBe(0);
    expect(c.opts.properties).toEqual({ authenticationMethod: 'berth-jwt' });
    expect(t.states.map((s) => s.kind)).toEqual(['connecting', 'connecting']);
    c.emit('connect', { cmd: 'connack', reasonCode: 0 });
    expect(t.conn.state).toMatchObject({ kind: 'connected', publish: false, refresh: 'auth' });
  });

  it('re-authenticates at 80% of the token life and moves the expiry on AUTH 0x00', async () => {
    const t = setup();
    await t.conn.connect(true);
    const c = t.last();
    c.emit('connect', {});
    await vi.advanceTimersByTimeAsync(479_000);
    expect(t.mints.length).toBe(1);
    await vi.advanceTimersByTimeAsync(1_500);
    expect(t.mints).toEqual([true, true]);
    expect(c.sent.length).toBe(1);
    const auth = c.sent[0];
    expect(auth).toMatchObject({ cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: 'berth-jwt' } });
    expect(auth.properties.authenticationData).toMatch(/^jwt-/);
    expect(auth.properties.authenticationData).not.toBe(c.opts.password);
    c.emit('packetreceive', { cmd: 'auth', reasonCode: 0, properties: { authenticationMethod: 'berth-jwt' } });
    const s = t.conn.state;
    expect(s.kind).toBe('connected');
    expect(Date.parse((s as { expiresAt: string }).expiresAt)).toBe(base + 480_000 + 600_000);
    expect(t.notices.at(-1)?.text).toMatch(/refreshed by re-authentication/);
    expect(t.clients.length).toBe(1); // no reconnect
  });

  it('keeps the connection and retries when a refresh mint fails', async () => {
    let n = 0;
    const t = setup(async () => {
      if (n++ === 1) throw new ApiError(503, { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'db down' });
      return token();
    });
    await t.conn.connect(false);
    t.last().emit('connect', {});
    await vi.advanceTimersByTimeAsync(480_000);
    expect(t.notices.at(-1)?.text).toMatch(/Could not refresh the inspector token: db down/);
    expect(t.notices.at(-1)?.err).toBeInstanceOf(ApiError);
    expect(t.conn.state.kind).toBe('connected');
    await vi.advanceTimersByTimeAsync(30_000);
    expect(t.last().sent.length).toBe(1); // the retry re-authenticated
  });

  it('reconnects instead when the credential changed', async () => {
    let n = 0;
    const t = setup(async () => token({ username: n++ === 0 ? 'cred_1' : 'cred_2' }));
    await t.conn.connect(false);
    t.last().emit('connect', {});
    await vi.advanceTimersByTimeAsync(480_000);
    expect(t.clients.length).toBe(2);
    expect(t.clients[0].ended.length).toBe(1);
    expect(t.last().opts.username).toBe('cred_2');
    expect(t.mints.length).toBe(2); // the refresh's token is used, not minted twice
  });

  it('reports a server DISCONNECT with its reason code', async () => {
    const t = setup();
    await t.conn.connect(false);
    const c = t.last();
    c.emit('connect', {});
    c.emit('disconnect', { cmd: 'disconnect', reasonCode: 0xa0 });
    c.emit('close');
    expect(t.conn.state).toMatchObject({ kind: 'disconnected', code: 0xa0 });
    expect((t.conn.state as { reason: string }).reason).toMatch(/^0xA0 Maximum connect time — the inspector token expired$/);

    await t.conn.connect(false);
    const d = t.last();
    d.emit('connect', {});
    d.emit('disconnect', { cmd: 'disconnect', reasonCode: 0x8e, properties: { reasonString: 'taken over' } });
    d.emit('close');
    expect((t.conn.state as { reason: string }).reason).toMatch(/^0x8E Session taken over \(taken over\)/);
  });

  it('reports a refused CONNECT and an unreachable gateway', async () => {
    const t = setup();
    await t.conn.connect(false);
    const c = t.last();
    c.emit('error', Object.assign(new Error('Connection refused: Bad User Name or Password'), { code: 0x86 }));
    c.emit('close');
    expect((t.conn.state as { reason: string }).reason).toMatch(/^connection refused: 0x86 Bad User Name or Password/);
    await t.conn.connect(false);
    t.last().emit('close');
    expect((t.conn.state as { reason: string }).reason).toBe('could not connect to ws://127.0.0.1:8083/mqtt');
  });

  it('connects without the method when the node refuses it (CONNACK 0x8C)', async () => {
    const t = setup();
    await t.conn.connect(false);
    t.last().emit('error', Object.assign(new Error('Connection refused: Bad authentication method'), { code: 0x8c }));
    expect(t.clients.length).toBe(2);
    expect(t.last().opts.properties).toBeUndefined();
    t.clients[0].emit('close'); // the old one's events no longer count
    t.last().emit('connect', {});
    expect(t.conn.state).toMatchObject({ kind: 'connected', refresh: 'reconnect' });
    await vi.advanceTimersByTimeAsync(480_000);
    expect(t.clients.length).toBe(3); // refreshed by reconnecting
  });

  it('throws the API problem when no token can be had', async () => {
    const t = setup(async () => {
      throw new ApiError(404, { type: 'about:blank', title: 'Not Found', status: 404 });
    });
    await expect(t.conn.connect(false)).rejects.toBeInstanceOf(ApiError);
    expect(t.conn.state).toMatchObject({ kind: 'disconnected' });
    expect((t.conn.state as { reason: string }).reason).toMatch(/no inspector token/);
    expect(t.clients.length).toBe(0);
  });

  it('says when there is no WebSocket endpoint', async () => {
    const t = setup(async () => token({ ws_url: null }));
    await t.conn.connect(false);
    expect((t.conn.state as { reason: string }).reason).toMatch(/no WebSocket endpoint/);
  });

  it('subscribes, publishing shows the acknowledgement, messages pass through', async () => {
    const t = setup();
    await expect(async () => t.conn.subscribe('#', 0)).rejects.toThrow('not connected');
    await t.conn.connect(true);
    const c = t.last();
    c.emit('connect', {});
    expect(await t.conn.subscribe('#', 1)).toEqual({ code: 1, reasonString: undefined });
    c.subAnswer = (cb) => cb(Object.assign(new Error('Subscribe error: Not authorized'), { code: 0x87 }), [{ topic: 'x', qos: 0 }], { cmd: 'suback', granted: [0x87] });
    expect((await t.conn.subscribe('$berth/dlq/#', 1)).code).toBe(0x87);
    c.subAnswer = (cb) => cb(new Error('Connection closed'), [{ topic: 'x', qos: 1 }], undefined);
    await expect(t.conn.subscribe('lost/#', 1)).rejects.toThrow('Connection closed');
    const pending = t.conn.publish('a/b', 'hi', 1, false);
    await vi.advanceTimersByTimeAsync(0);
    expect(await pending).toEqual({ code: 0x10, packet: 'puback' });
    c.pubAnswer = (cb) => cb(Object.assign(new Error('Publish error: Not authorized'), { code: 0x87 }), { cmd: 'puback', reasonCode: 0x87 });
    const refused = t.conn.publish('a/b', 'hi', 1, false);
    await vi.advanceTimersByTimeAsync(0);
    expect((await refused).code).toBe(0x87);
    expect(await t.conn.publish('a/b', 'hi', 0, true)).toEqual({});
    expect(await t.conn.unsubscribe('#')).toBe(0x11);
    const payload = new TextEncoder().encode('x');
    c.emit('message', 'a/b', payload, { cmd: 'publish', topic: 'a/b', qos: 1, retain: true, dup: false, payload, properties: { contentType: 'text/plain' } });
    expect(t.messages).toHaveLength(1);
    expect(t.messages[0]).toMatchObject({ topic: 'a/b', qos: 1, retain: true, props: { contentType: 'text/plain' } });
  });

  it('disconnects on request and ignores the old client afterwards', async () => {
    const t = setup();
    await t.conn.connect(false);
    const c = t.last();
    c.emit('connect', {});
    t.conn.disconnect();
    expect(c.ended).toEqual([[false, { reasonCode: 0 }]]);
    expect(t.conn.state).toEqual({ kind: 'disconnected', reason: 'closed by you' });
    c.emit('close');
    c.emit('message', 't', new Uint8Array(), { qos: 0 });
    expect(t.conn.state).toEqual({ kind: 'disconnected', reason: 'closed by you' });
    expect(t.messages).toHaveLength(0);
  });
});
