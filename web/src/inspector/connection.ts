// The Inspector's MQTT client: one MQTT 5 connection over WebSocket through
// Berth's gateway, with a short-lived inspector token that it keeps fresh.
//
// MQTT.js is loaded with import('mqtt') on the first connect, so it is a
// separate chunk, never part of the dashboard's initial bundle (Vite picks
// mqtt's "browser" export, dist/mqtt.esm.js, which needs no Node polyfills).
//
// Token refresh: MQTT 5 re-authentication, not a reconnect. At 80% of the
// token's life we mint a new token and send AUTH (reason 0x19 Re-authenticate,
// Authentication Method "berth-jwt", Authentication Data = the new token);
// the node verifies it and moves the connection's deadline (answering AUTH
// 0x00), so subscriptions and the message stream go on without a gap.
// MQTT.js 5.16 has no public API to send AUTH (no reauthenticate()), so it
// goes through the client's internal _sendPacket, and the CONNECT names the
// method "berth-jwt" (the node admits it and names it back) because MQTT.js
// drops the connection on an AUTH reply for a method its CONNECT did not
// name. Fallbacks, by reconnecting with a fresh token (the view subscribes
// again on every "connected"): when a CONNECT naming the method is refused
// (CONNACK 0x8C) we connect without it and refresh by reconnecting from then
// on; and when the credential changed under us (revoked and re-made: a new
// username, which re-authentication cannot switch to).
import type { IClientOptions, IDisconnectPacket, IPublishPacket, MqttClient, Packet } from 'mqtt';
import { ApiError } from '../api/client';
import type { InspectorMessage } from './message';
import { berthHint, reasonLabel } from './reasons';
import { refreshDelay, type InspectorToken } from './token';

export const AUTH_METHOD = 'berth-jwt';

export type ConnState =
  | { kind: 'idle' }
  | { kind: 'connecting'; publish: boolean }
  | { kind: 'connected'; publish: boolean; clientId: string; url: string; expiresAt: string; refresh: 'auth' | 'reconnect' }
  | { kind: 'disconnected'; reason: string; code?: number };

export interface ConnectionHooks {
  state(s: ConnState): void;
  message(m: InspectorMessage): void;
  /** Token refresh news: refreshed, or failed (with the API's problem when it was the API). */
  notice(text: string, error?: ApiError | Error): void;
}

export interface ConnectionDeps {
  mint(publish: boolean): Promise<InspectorToken>;
  /** The gateway's WebSocket URL when the token names none (the tenant's endpoints). */
  fallbackWsUrl?: string;
  load?: () => Promise<MqttLib>;
}

type MqttLib = { connect(url: string, opts: IClientOptions): MqttClient };
type ModuleShape = MqttLib | { default: MqttLib };

const loadMqtt = async (): Promise<MqttLib> => {
  const m = (await import('mqtt')) as unknown as ModuleShape;
  // dist/mqtt.esm.js has only a default export; the CommonJS build (tests) has both.
  return 'default' in m && m.default && typeof m.default.connect === 'function' ? m.default : (m as MqttLib);
};

export interface SubResult {
  /** SUBACK reason code: the granted QoS (0–2) or a failure (≥ 0x80). */
  code: number;
  reasonString?: string;
}

export interface PubResult {
  /** The acknowledgement's reason code (PUBACK for QoS 1, PUBREC/PUBCOMP for 2); none for QoS 0. */
  code?: number;
  packet?: 'puback' | 'pubcomp' | 'pubrec';
}

/** What MQTT.js keeps private but re-authentication needs. */
interface SendsPackets {
  _sendPacket(packet: object, cb?: (err?: Error) => void): void;
}

const RETRY_MS = 30_000;

export class InspectorConnection {
  private client: MqttClient | null = null;
  private lib: MqttLib | null = null;
  private token: InspectorToken | null = null;
  private publishAllowed = false;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private pendingExpiry: string | null = null;
  private reauth = true;
  private acks = new Map<number, { code: number; packet: 'puback' | 'pubcomp' | 'pubrec' }>();
  private nextId = 1;
  private gen = 0;
  private disposed = false;
  private current: ConnState = { kind: 'idle' };

  constructor(
    private readonly deps: ConnectionDeps,
    private readonly hooks: ConnectionHooks,
  ) {}

  get state(): ConnState {
    return this.current;
  }

  get connected(): boolean {
    return this.current.kind === 'connected';
  }

  /**
   * Mints a token and connects, replacing the connection there is (a
   * different publish permission needs a new token and a new connection:
   * the ACL is fixed at CONNECT). A refused mint leaves the current
   * connection alone and throws the API's problem.
   */
  async connect(publish: boolean, minted?: InspectorToken): Promise<void> {
    const gen = ++this.gen;
    const wasConnected = this.current.kind === 'connected';
    if (!wasConnected) this.set({ kind: 'connecting', publish });
    let token: InspectorToken;
    let lib: MqttLib;
    try {
      [token, lib] = await Promise.all([minted ?? this.deps.mint(publish), this.lib ?? (this.deps.load ?? loadMqtt)()]);
    } catch (e) {
      if (gen !== this.gen || this.disposed) return;
      if (!wasConnected) this.set({ kind: 'disconnected', reason: e instanceof ApiError ? `no inspector token (${e.message})` : `could not load the MQTT client (${String(e)})` });
      throw e;
    }
    this.lib = lib;
    if (gen !== this.gen || this.disposed) return;
    const url = token.ws_url || this.deps.fallbackWsUrl;
    if (!url) {
      this.drop();
      this.set({ kind: 'disconnected', reason: 'the API names no WebSocket endpoint for MQTT (the gateway has no -mqtt-ws-url)' });
      return;
    }
    this.drop();
    this.set({ kind: 'connecting', publish });
    this.open(lib, token, publish, url);
  }

  /** Ends the connection with a normal DISCONNECT. */
  disconnect(): void {
    this.gen++;
    const had = this.client !== null || this.current.kind === 'connecting';
    this.drop();
    if (had) this.set({ kind: 'disconnected', reason: 'closed by you' });
  }

  dispose(): void {
    this.disposed = true;
    this.gen++;
    this.drop();
  }

  subscribe(filter: string, qos: 0 | 1 | 2): Promise<SubResult> {
    const c = this.client;
    if (!c || this.current.kind !== 'connected') return Promise.reject(new Error('not connected'));
    return new Promise((resolve, reject) => {
      c.subscribe(filter, { qos }, (err, granted, packet) => {
        const g = packet?.granted?.[0];
        // On an error MQTT.js hands back the requested QoS in granted: only the SUBACK or the error's code count then.
        const code = typeof g === 'number' ? g : err ? codeOf(err) : granted?.[0]?.qos;
        if (code === undefined) {
          reject(err ?? new Error('no SUBACK'));
          return;
        }
        resolve({ code, reasonString: packet?.properties?.reasonString });
      });
    });
  }

  /** Resolves with the UNSUBACK reason code (0x00 Success, 0x11 No subscription existed, …). */
  unsubscribe(filter: string): Promise<number | undefined> {
    const c = this.client;
    if (!c || this.current.kind !== 'connected') return Promise.reject(new Error('not connected'));
    return new Promise((resolve, reject) => {
      c.unsubscribe(filter, (err, packet) => {
        const p = packet as { granted?: number[]; reasonCode?: number } | undefined;
        const code = p?.granted?.[0] ?? p?.reasonCode ?? codeOf(err);
        if (err && code === undefined) reject(err);
        else resolve(code);
      });
    });
  }

  publish(topic: string, payload: string, qos: 0 | 1 | 2, retain: boolean): Promise<PubResult> {
    const c = this.client;
    if (!c || this.current.kind !== 'connected') return Promise.reject(new Error('not connected'));
    return new Promise((resolve, reject) => {
      let id = 0;
      c.publish(topic, payload, { qos, retain }, (err, packet) => {
        if (qos === 0) {
          if (err) reject(err);
          else resolve({});
          return;
        }
        const mid = (packet as { messageId?: number } | undefined)?.messageId || id;
        const ack = this.acks.get(mid);
        this.acks.delete(mid);
        const code = codeOf(err) ?? ack?.code;
        if (err && code === undefined) reject(err);
        else resolve({ code: code ?? 0, packet: ack?.packet ?? (qos === 1 ? 'puback' : 'pubcomp') });
      });
      // publish() allocates the message id synchronously when it is sent at once.
      if (qos > 0) id = c.getLastMessageId();
    });
  }

  private set(s: ConnState) {
    this.current = s;
    this.hooks.state(s);
  }

  private open(lib: MqttLib, token: InspectorToken, publish: boolean, url: string) {
    const receivedAt = Date.now();
    const clientId = (token.client_id_prefix || 'berth-inspector-') + randomHex(6);
    const client = lib.connect(url, {
      protocolVersion: 5,
      clientId,
      username: token.username,
      password: token.password, // in CONNECT, never in the URL
      clean: true,
      keepalive: 30,
      reconnectPeriod: 0, // a dropped connection is reported, not retried with a token that may be dead
      // MQTT.js's default timers run in a Worker made from a blob: URL, which
      // the dashboard's Content-Security-Policy (script-src 'self') forbids.
      timerVariant: 'native',
      connectTimeout: 15_000,
      resubscribe: false,
      properties: this.reauth ? { authenticationMethod: AUTH_METHOD } : undefined,
    });
    this.client = client;
    this.token = token;
    this.publishAllowed = publish;
    this.pendingExpiry = null;
    this.acks.clear();
    let connackSeen = false;
    let serverDisconnect: IDisconnectPacket | null = null;
    let lastError: Error | null = null;
    const mine = () => this.client === client;

    client.on('connect', () => {
      if (!mine()) return;
      connackSeen = true;
      this.set({ kind: 'connected', publish, clientId, url, expiresAt: token.expires_at, refresh: this.reauth ? 'auth' : 'reconnect' });
      this.scheduleRefresh(refreshDelay(token.expires_at, receivedAt));
    });
    client.on('message', (topic: string, payload: Uint8Array, packet: IPublishPacket) => {
      if (!mine()) return;
      this.hooks.message({
        id: this.nextId++,
        time: Date.now(),
        topic,
        qos: packet.qos,
        retain: packet.retain,
        dup: packet.dup,
        payload,
        props: packet.properties as InspectorMessage['props'],
      });
    });
    client.on('packetreceive', (p: Packet) => {
      if (!mine()) return;
      switch (p.cmd) {
        case 'puback':
        case 'pubrec':
        case 'pubcomp':
          if (p.messageId) this.acks.set(p.messageId, { code: p.reasonCode ?? 0, packet: p.cmd });
          break;
        case 'auth':
          this.onAuth(p.reasonCode, p.properties?.reasonString);
          break;
      }
    });
    client.on('disconnect', (p: IDisconnectPacket) => {
      if (mine()) serverDisconnect = p;
    });
    client.on('error', (e: Error) => {
      if (!mine()) return;
      lastError = e;
      // CONNECT naming berth-jwt refused by a node that does not speak it: connect
      // again without it, and refresh by reconnecting from then on.
      if (!connackSeen && codeOf(e) === 0x8c && this.reauth) {
        this.reauth = false;
        this.client = null;
        client.end(true);
        this.open(lib, token, publish, url);
      }
    });
    client.on('close', () => {
      if (!mine()) return;
      this.client = null;
      this.clearRefresh();
      client.end(true); // stops MQTT.js's timers; reconnectPeriod 0 means it never retries
      this.set({ kind: 'disconnected', ...closeReason(serverDisconnect, lastError, connackSeen, url) });
    });
  }

  /** Ends the connection there is, quietly (its events no longer reach the view). */
  private drop() {
    this.clearRefresh();
    const c = this.client;
    this.client = null;
    if (c) c.end(false, { reasonCode: 0 });
  }

  private scheduleRefresh(ms: number) {
    this.clearRefresh();
    this.refreshTimer = setTimeout(() => void this.refresh(), ms);
  }

  private clearRefresh() {
    if (this.refreshTimer !== undefined) clearTimeout(this.refreshTimer);
    this.refreshTimer = undefined;
  }

  private async refresh() {
    const client = this.client;
    const old = this.token;
    if (!client || !old || this.current.kind !== 'connected') return;
    let token: InspectorToken;
    try {
      token = await this.deps.mint(this.publishAllowed);
    } catch (e) {
      if (this.client !== client) return;
      const left = Date.parse(old.expires_at) - Date.now();
      const err = e instanceof Error ? e : new Error(String(e));
      this.hooks.notice(`Could not refresh the inspector token: ${err.message}.${left > 0 ? ` Trying again; it expires at ${new Date(old.expires_at).toLocaleTimeString()}.` : ''}`, err);
      if (left > 0) this.scheduleRefresh(Math.min(RETRY_MS, Math.max(1_000, left / 2)));
      return;
    }
    if (this.client !== client || this.current.kind !== 'connected') return;
    if (!this.reauth || token.username !== old.username) {
      // Re-authentication keeps the credential; a new one needs a new connection.
      this.hooks.notice('Reconnecting with a fresh inspector token.');
      await this.connect(this.publishAllowed, token).catch((e: unknown) => this.hooks.notice(`Could not reconnect: ${String(e)}`, e instanceof Error ? e : undefined));
      return;
    }
    this.token = token;
    this.pendingExpiry = token.expires_at;
    // Authentication Data is binary; mqtt-packet writes a string as length + UTF-8, the same bytes.
    (client as unknown as SendsPackets)._sendPacket({
      cmd: 'auth',
      reasonCode: 0x19,
      properties: { authenticationMethod: AUTH_METHOD, authenticationData: token.password },
    });
    // The next refresh is scheduled when the node answers AUTH 0x00; a refusal ends the connection (0x87).
    this.scheduleRefresh(refreshDelay(token.expires_at, Date.now()));
  }

  private onAuth(code: number, reasonString?: string) {
    if (code !== 0) return; // MQTT.js itself ends the connection on anything else
    const exp = this.pendingExpiry;
    this.pendingExpiry = null;
    if (!exp || this.current.kind !== 'connected') return;
    this.set({ ...this.current, expiresAt: exp });
    this.hooks.notice(`Token refreshed by re-authentication (AUTH ${reasonLabel(code, 'auth')}${reasonString ? `: ${reasonString}` : ''}); it now expires at ${new Date(exp).toLocaleTimeString()}.`);
  }
}

function codeOf(e: unknown): number | undefined {
  const c = (e as { code?: unknown } | null | undefined)?.code;
  return typeof c === 'number' ? c : undefined;
}

/** Why a connection ended, in the words the view shows after "Disconnected: ". */
export function closeReason(server: IDisconnectPacket | null, err: Error | null, connected: boolean, url: string): { reason: string; code?: number } {
  if (server) {
    const code = server.reasonCode ?? 0;
    const rs = server.properties?.reasonString;
    const hint = berthHint(code);
    return { code, reason: `${reasonLabel(code, 'disconnect')}${rs ? ` (${rs})` : ''}${hint ? ` — ${hint}` : ''}` };
  }
  const code = codeOf(err);
  if (err && code !== undefined && !connected) {
    const hint = code === 0x86 || code === 0x87 ? ' — the inspector token was refused' : code === 0x97 ? " — the tenant's connection quota is full" : '';
    return { code, reason: `connection refused: ${reasonLabel(code, 'connack')}${hint}` };
  }
  if (err && code !== undefined) return { code, reason: `${reasonLabel(code, 'disconnect')} (${err.message})` };
  if (err) return { reason: err.message };
  if (!connected) return { reason: `could not connect to ${url}` };
  return { reason: 'the connection closed without a DISCONNECT from the server' };
}

function randomHex(bytes: number): string {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
