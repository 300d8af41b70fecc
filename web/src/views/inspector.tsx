// Inspector: a live MQTT 5 client in the browser, over WebSocket through
// Berth's gateway, with a short-lived tenant-scoped inspector token (see
// inspector/connection.ts for the token's life and refresh).
//
// Rendering: messages never set state one by one. They go into a
// MessageFeed (inspector/feed.ts) that batches them per animation frame
// into a ring of the newest 1,000; only the message pane re-renders, once
// per frame, with keyed rows that render once (shouldComponentUpdate), the
// newest 200 unless asked for all, and a payload decoded in full only when
// its row is expanded.
import { Component } from 'preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api/client';
import { InspectorConnection, type ConnState, type PubResult } from '../inspector/connection';
import { MessageFeed, type FeedSnapshot, type FeedStats } from '../inspector/feed';
import { clock, mosquittoSub, preview, propertyList, type InspectorMessage } from '../inspector/message';
import { reasonLabel } from '../inspector/reasons';
import { mintInspectorToken } from '../inspector/token';
import '../inspector/inspector.css';
import { bytes, count, payload as renderPayload, type PayloadView } from '../lib/format';
import { topicProblem } from '../lib/topic';
import { useTenant } from '../session';
import { CopyButton } from '../ui/copy';
import { ProblemView } from '../ui/problem';
import { Segmented } from '../ui/segmented';
import { Empty } from '../ui/states';

declare global {
  interface Window {
    /** Read by the browser performance test; a plain object updated once a frame. */
    __berthInspectorStats?: FeedStats;
  }
}

const CAPACITY = 1000;
const FEW = 200;
/** Messages a second from which rows off screen skip rendering (inspector.css .insp-busy). */
const BUSY_RATE = 100;
/** Bytes of a payload decoded for the expanded view; a bigger one shows its start. */
const SHOW_BYTES = 64 * 1024;

type QoS = 0 | 1 | 2;

/** The QoS choice of the subscribe and publish forms. */
function QoSField({ value, onChange }: { value: QoS; onChange: (q: QoS) => void }) {
  return (
    <label>
      QoS
      <select value={String(value)} onChange={(e) => onChange(Number((e.target as HTMLSelectElement).value) as QoS)}>
        <option value="0">0</option>
        <option value="1">1</option>
        <option value="2">2</option>
      </select>
    </label>
  );
}
type Endpoints = { mqtt?: string | null; ws?: string | null; wss?: string | null };

interface Sub {
  filter: string;
  qos: QoS;
  /** waiting: not sent (not connected); sent: waiting for SUBACK; acked: code is the SUBACK's. */
  status: 'waiting' | 'sent' | 'acked' | 'error';
  code?: number;
  detail?: string;
}

const views: { key: PayloadView; label: string }[] = [
  { key: 'text', label: 'Text' },
  { key: 'json', label: 'JSON' },
  { key: 'hex', label: 'Hex' },
];

function toError(e: unknown): ApiError {
  return e instanceof ApiError ? e : new ApiError(0, { type: 'about:blank', title: 'Error', status: 0, detail: e instanceof Error ? e.message : String(e) });
}

export function Inspector(_: { rest: string[] }) {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const ep = ((tenant as { endpoints?: Endpoints }).endpoints ?? {}) as Endpoints;
  const fallbackWs = (location.protocol === 'https:' ? ep.wss : ep.ws || ep.wss) || undefined;

  const [state, setState] = useState<ConnState>({ kind: 'idle' });
  const [allowPublish, setAllowPublish] = useState(false);
  const [connError, setConnError] = useState<ApiError>();
  const [notice, setNotice] = useState<{ text: string; bad: boolean }>();
  const [subs, setSubs] = useState<Sub[]>([]);
  const subsRef = useRef(subs);
  subsRef.current = subs;

  const feed = useMemo(() => new MessageFeed(CAPACITY, FEW), []);
  const conn = useMemo(
    () =>
      new InspectorConnection(
        { mint: (publish) => mintInspectorToken(tid, publish), fallbackWsUrl: fallbackWs },
        {
          state: (s) => setState(s),
          message: (m) => feed.push(m),
          notice: (text, err) => setNotice({ text, bad: !!err }),
        },
      ),
    // One connection for the page's life: the view is keyed by tenant.
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [],
  );

  useEffect(() => {
    window.__berthInspectorStats = feed.stats;
    return () => {
      conn.dispose();
      feed.dispose();
    };
  }, [conn, feed]);

  const sendSub = useCallback(
    (filter: string, qos: QoS) => {
      const patch = (p: Partial<Sub>) => setSubs((all) => all.map((s) => (s.filter === filter ? { ...s, ...p } : s)));
      patch({ status: 'sent', code: undefined, detail: undefined });
      conn.subscribe(filter, qos).then(
        (r) => patch({ status: 'acked', code: r.code, detail: r.reasonString }),
        (e: unknown) => patch({ status: 'error', detail: e instanceof Error ? e.message : String(e) }),
      );
    },
    [conn],
  );

  // Every new connection (Connect, a publish permission change, a
  // refresh by reconnecting) subscribes to the list again; a lost one
  // leaves the list waiting for the next.
  const prevKind = useRef(state.kind);
  useEffect(() => {
    const was = prevKind.current;
    prevKind.current = state.kind;
    if (state.kind === 'connected' && was !== 'connected') {
      for (const s of subsRef.current) sendSub(s.filter, s.qos);
    } else if (state.kind !== 'connected' && was === 'connected') {
      setSubs((all) => all.map((s) => ({ ...s, status: 'waiting', code: undefined, detail: undefined })));
    }
  }, [state, sendSub]);

  /** false when no token could be had (the connection there was, if any, goes on). */
  const connect = async (publish: boolean): Promise<boolean> => {
    setConnError(undefined);
    setNotice(undefined);
    try {
      await conn.connect(publish);
      return true;
    } catch (e) {
      setConnError(toError(e));
      return false;
    }
  };

  const live = state.kind === 'connected' || state.kind === 'connecting';

  return (
    <section class="inspector">
      <h1 tabIndex={-1}>Inspector</h1>
      <p class="muted">
        A live MQTT 5 client in your browser, connected over WebSocket with a short-lived token that may read every topic of{' '}
        <strong>{tenant.slug}</strong> (and publish, if you allow it).
      </p>

      <div class="insp-top">
        <section class="panel stack" aria-labelledby="insp-conn-h">
          <h2 id="insp-conn-h">Connection</h2>
          <div class="row">
            <span class={state.kind === 'connected' ? 'dot on' : 'dot'} aria-hidden="true" />
            <span role="status" class={state.kind === 'disconnected' ? 'insp-state bad' : 'insp-state'}>
              {stateText(state)}
            </span>
          </div>
          <div class="row">
            {live ? (
              <button type="button" class="secondary" onClick={() => conn.disconnect()}>
                Disconnect
              </button>
            ) : (
              <button type="button" onClick={() => connect(allowPublish)}>
                Connect
              </button>
            )}
            <label class="inline">
              <input
                type="checkbox"
                checked={allowPublish}
                onChange={(e) => {
                  const v = (e.target as HTMLInputElement).checked;
                  setAllowPublish(v);
                  // The ACL is fixed at CONNECT: a new token and a new connection.
                  if (live) void connect(v).then((ok) => ok || setAllowPublish(!v));
                }}
              />
              Allow publishing
            </label>
          </div>
          {state.kind === 'connected' ? (
            <dl class="insp-facts small">
              <dt>Client id</dt>
              <dd>
                <code>{state.clientId}</code>
              </dd>
              <dt>Gateway</dt>
              <dd>
                <code>{state.url}</code>
              </dd>
              <dt>Token</dt>
              <dd>
                {state.publish ? 'subscribe and publish' : 'subscribe only'}, expires {new Date(state.expiresAt).toLocaleTimeString()}, renewed{' '}
                {state.refresh === 'auth' ? 'by re-authentication' : 'by reconnecting'} before then
              </dd>
            </dl>
          ) : null}
          <ProblemView error={connError} />
          {notice ? (
            <p class={notice.bad ? 'problem small' : 'notice small'} role={notice.bad ? 'alert' : 'status'}>
              {notice.text}
            </p>
          ) : null}
        </section>

        <SubscribePanel
          subs={subs}
          connected={state.kind === 'connected'}
          mqttAddr={ep.mqtt || undefined}
          onSubscribe={(filter, qos) => {
            setSubs((all) => [...all.filter((s) => s.filter !== filter), { filter, qos, status: 'waiting' }]);
            if (conn.connected) sendSub(filter, qos);
          }}
          onUnsubscribe={(s) => {
            setSubs((all) => all.filter((x) => x.filter !== s.filter));
            // Refused or never sent: nothing to undo on the server.
            const refused = s.status === 'acked' && (s.code ?? 0x80) >= 0x80;
            if (conn.connected && (s.status === 'sent' || s.status === 'acked') && !refused) {
              conn.unsubscribe(s.filter).then(
                (code) => code && setNotice({ text: `Unsubscribe ${s.filter}: UNSUBACK ${reasonLabel(code, 'unsuback')}`, bad: code >= 0x80 }),
                (e: unknown) => setNotice({ text: `Unsubscribe ${s.filter}: ${String(e)}`, bad: true }),
              );
            }
          }}
        />

        <PublishPanel conn={conn} state={state} />
      </div>

      <MessagePane feed={feed} hint={state.kind !== 'connected' ? 'Connect, then subscribe to a topic filter.' : subs.length === 0 ? 'Subscribe to a topic filter.' : ''} />
    </section>
  );
}

function stateText(s: ConnState): string {
  switch (s.kind) {
    case 'idle':
      return 'Not connected';
    case 'connecting':
      return 'Connecting…';
    case 'connected':
      return 'Connected';
    case 'disconnected':
      return `Disconnected: ${s.reason}`;
  }
}

function SubscribePanel({
  subs,
  connected,
  mqttAddr,
  onSubscribe,
  onUnsubscribe,
}: {
  subs: Sub[];
  connected: boolean;
  mqttAddr: string | undefined;
  onSubscribe: (filter: string, qos: QoS) => void;
  onUnsubscribe: (s: Sub) => void;
}) {
  const [filter, setFilter] = useState('#');
  const [qos, setQos] = useState<QoS>(0);
  const [touched, setTouched] = useState(false);
  const problem = topicProblem(filter);
  return (
    <section class="panel stack" aria-labelledby="insp-sub-h">
      <h2 id="insp-sub-h">Subscriptions</h2>
      <form
        class="insp-form"
        aria-label="Subscribe"
        noValidate
        onSubmit={(e) => {
          e.preventDefault();
          setTouched(true);
          if (!problem) onSubscribe(filter, qos);
        }}
      >
        <label class="insp-grow">
          Topic filter
          <input
            value={filter}
            onInput={(e) => setFilter((e.target as HTMLInputElement).value)}
            aria-invalid={touched && !!problem}
            aria-describedby={touched && problem ? 'insp-filter-err' : undefined}
            autocomplete="off"
            spellcheck={false}
          />
        </label>
        <QoSField value={qos} onChange={setQos} />
        <button>Subscribe</button>
        {touched && problem ? (
          <span id="insp-filter-err" class="field-error insp-full">
            The filter {problem}.
          </span>
        ) : null}
      </form>
      <div class="row small">
        <CopyButton text={mosquittoSub(filter, mqttAddr)} label="Copy as mosquitto_sub" />
        <span class="muted">with a device credential of your own in $BERTH_MQTT_USERNAME and $BERTH_MQTT_PASSWORD</span>
      </div>
      {subs.length === 0 ? (
        <p class="muted small">No subscriptions.{connected ? '' : ' Subscriptions made now start when you connect.'}</p>
      ) : (
        <ul class="insp-subs" aria-label="Active subscriptions">
          {subs.map((s, i) => (
            <li key={s.filter}>
              <code id={`insp-sub-${i}`}>{s.filter}</code>
              <SubStatus s={s} />
              <button type="button" class="secondary small" aria-describedby={`insp-sub-${i}`} onClick={() => onUnsubscribe(s)}>
                Unsubscribe
              </button>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

function SubStatus({ s }: { s: Sub }) {
  switch (s.status) {
    case 'waiting':
      return <span class="muted small">QoS {s.qos} · subscribes when connected</span>;
    case 'sent':
      return <span class="muted small">QoS {s.qos} · subscribing…</span>;
    case 'error':
      return <span class="bad small">{s.detail ?? 'failed'}</span>;
    case 'acked': {
      const code = s.code ?? 0x80;
      if (code < 0x80) {
        return (
          <span class="ok small" title={reasonLabel(code, 'suback')}>
            granted QoS {code}
            {code < s.qos ? ` (asked ${s.qos})` : ''}
          </span>
        );
      }
      return (
        <span class="bad small">
          SUBACK {reasonLabel(code, 'suback')}
          {s.detail ? ` (${s.detail})` : ''}
        </span>
      );
    }
  }
}

function PublishPanel({ conn, state }: { conn: InspectorConnection; state: ConnState }) {
  const [topic, setTopic] = useState('');
  const [body, setBody] = useState('');
  const [qos, setQos] = useState<QoS>(1);
  const [retain, setRetain] = useState(false);
  const [touched, setTouched] = useState(false);
  const [pending, setPending] = useState(false);
  const [result, setResult] = useState<{ text: string; bad: boolean }>();
  const can = state.kind === 'connected' && state.publish;
  const problem = topicProblem(topic, true);
  return (
    <section class="panel stack" aria-labelledby="insp-pub-h">
      <h2 id="insp-pub-h">Publish</h2>
      {!can ? <p class="muted small">{state.kind === 'connected' ? 'Tick "Allow publishing" to publish.' : 'Connect with "Allow publishing" ticked to publish.'}</p> : null}
      <form
        class="insp-form"
        aria-label="Publish"
        noValidate
        onSubmit={async (e) => {
          e.preventDefault();
          setTouched(true);
          if (problem || !can) return;
          setPending(true);
          setResult(undefined);
          try {
            setResult(ackText(await conn.publish(topic, body, qos, retain), qos));
          } catch (err) {
            setResult({ text: `Not sent: ${err instanceof Error ? err.message : String(err)}`, bad: true });
          } finally {
            setPending(false);
          }
        }}
      >
        <label class="insp-grow">
          Topic
          <input
            value={topic}
            onInput={(e) => setTopic((e.target as HTMLInputElement).value)}
            aria-invalid={touched && !!problem}
            aria-describedby={touched && problem ? 'insp-topic-err' : undefined}
            placeholder="sensors/room-1/temp"
            autocomplete="off"
            spellcheck={false}
          />
        </label>
        <QoSField value={qos} onChange={setQos} />
        {touched && problem ? (
          <span id="insp-topic-err" class="field-error insp-full">
            The topic {problem}.
          </span>
        ) : null}
        <label class="insp-full">
          Payload
          <textarea rows={3} value={body} onInput={(e) => setBody((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
        </label>
        <label class="inline">
          <input type="checkbox" checked={retain} onChange={(e) => setRetain((e.target as HTMLInputElement).checked)} />
          Retain
        </label>
        <button disabled={!can || pending}>Publish</button>
      </form>
      {result ? (
        <p role="status" class={result.bad ? 'bad small' : 'small'}>
          {result.text}
        </p>
      ) : null}
    </section>
  );
}

function ackText(r: PubResult, qos: QoS): { text: string; bad: boolean } {
  if (qos === 0 || r.code === undefined) return { text: 'Sent (QoS 0 has no acknowledgement).', bad: false };
  const name = (r.packet ?? 'puback').toUpperCase();
  return { text: `${name} ${reasonLabel(r.code, 'puback')}`, bad: r.code >= 0x80 };
}

function MessagePane({ feed, hint }: { feed: MessageFeed; hint: string }) {
  const [snap, setSnap] = useState<FeedSnapshot>(() => feed.snapshot());
  const [showAll, setShowAll] = useState(false);
  const [view, setView] = useState<PayloadView>('text');
  const [open, setOpen] = useState<ReadonlySet<number>>(new Set());

  useEffect(() => {
    const off = feed.onFrame(setSnap);
    // The rate falls back to 0 when messages stop; no frames run then.
    const t = setInterval(() => feed.tick(), 1000);
    return () => {
      off();
      clearInterval(t);
    };
  }, [feed]);

  useEffect(() => feed.setLimit(showAll ? CAPACITY : FEW), [feed, showAll]);

  const toggle = useCallback((id: number) => {
    setOpen((prev) => {
      const next = new Set(prev);
      if (!next.delete(id)) next.add(id);
      return next;
    });
  }, []);

  const { list } = snap;
  return (
    <section class="stack insp-messages" aria-labelledby="insp-msg-h">
      <div class="spread">
        <h2 id="insp-msg-h">Messages</h2>
        <div class="row">
          <Segmented label="Payload view" value={view} options={views} onChange={setView} />
          <button type="button" class="secondary small" onClick={() => (snap.paused ? feed.resume() : feed.pause())}>
            {snap.paused ? 'Resume' : 'Pause'}
          </button>
          <button
            type="button"
            class="secondary small"
            onClick={() => {
              feed.clear();
              setOpen(new Set());
            }}
          >
            Clear
          </button>
        </div>
      </div>
      <p class="row insp-counters small">
        <span>
          Received <strong>{snap.received.toLocaleString('en-US')}</strong>
        </span>
        <span>
          Rate <strong>{snap.rate.toLocaleString('en-US', { maximumFractionDigits: 0 })}</strong> msg/s
        </span>
        {snap.paused ? (
          <span class="insp-paused">
            Paused: <strong>{snap.pausedNew.toLocaleString('en-US')}</strong> new while paused
          </span>
        ) : null}
      </p>
      {list.length === 0 ? (
        <Empty>
          No messages yet — publish to a topic your filter matches
          {hint ? <span class="insp-hint small">{hint}</span> : null}
        </Empty>
      ) : (
        <>
          <ol class={snap.rate >= BUSY_RATE ? 'insp-list insp-busy' : 'insp-list'} aria-label="Messages, newest first">
            {list.map((m) => (
              <Row key={m.id} m={m} open={open.has(m.id)} view={view} onToggle={toggle} />
            ))}
          </ol>
          <p class="row small muted">
            <span>
              Showing {list.length === snap.buffered ? `all ${count(list.length)}` : `the newest ${count(list.length)} of ${count(snap.buffered)}`} kept (the last{' '}
              {count(CAPACITY)} received).
            </span>
            {snap.buffered > FEW || showAll ? (
              <button type="button" class="secondary small" onClick={() => setShowAll(!showAll)}>
                {showAll ? `Show the newest ${FEW}` : `Show all ${count(snap.buffered)}`}
              </button>
            ) : null}
          </p>
        </>
      )}
    </section>
  );
}

interface RowProps {
  m: InspectorMessage;
  open: boolean;
  view: PayloadView;
  onToggle: (id: number) => void;
}

/** One message; rendered once, again only when it is opened, closed or its view changes. */
class Row extends Component<RowProps, { view?: PayloadView }> {
  shouldComponentUpdate(next: RowProps, nextState: { view?: PayloadView }) {
    return next.m !== this.props.m || next.open !== this.props.open || (next.open && next.view !== this.props.view) || nextState.view !== this.state.view;
  }

  render({ m, open, view, onToggle }: RowProps) {
    const size = m.payload.length;
    const shown = this.state.view ?? view;
    const detailId = `insp-m-${m.id}`;
    return (
      <li class="insp-row">
        <button type="button" class="insp-head" aria-expanded={open} aria-controls={open ? detailId : undefined} onClick={() => onToggle(m.id)}>
          <span class="insp-time">{clock(m.time)}</span>
          <span class="insp-topic">{m.topic}</span>
          <span class="insp-meta">
            QoS {m.qos}
            {m.retain ? <span class="insp-tag">retained</span> : null}
            {propertyList(m.props).length ? <span class="insp-tag">properties</span> : null} · {bytes(size)}
          </span>
          <span class="insp-preview">{preview(m.payload)}</span>
        </button>
        {open ? (
          <div id={detailId} class="insp-detail stack">
            <div class="row">
              <Segmented label="Payload view of this message" value={shown} options={views} onChange={(v) => this.setState({ view: v })} />
              <span class="muted small">
                {m.retain ? 'retained · ' : ''}
                {m.dup ? 'duplicate · ' : ''}QoS {m.qos} · {size.toLocaleString('en-US')} bytes
              </span>
            </div>
            <pre class="insp-payload">{size === 0 ? '(empty payload)' : renderPayload(size > SHOW_BYTES ? m.payload.subarray(0, SHOW_BYTES) : m.payload, shown)}</pre>
            {size > SHOW_BYTES ? <p class="muted small">Showing the first {bytes(SHOW_BYTES)} of {bytes(size)}.</p> : null}
            <Props m={m} />
          </div>
        ) : null}
      </li>
    );
  }
}

function Props({ m }: { m: InspectorMessage }) {
  const list = propertyList(m.props);
  if (list.length === 0) return <p class="muted small">No MQTT 5 properties.</p>;
  return (
    <dl class="insp-props small" aria-label="MQTT 5 properties">
      {list.map(([k, v], i) => (
        <div key={i}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}
