// One received message as the Inspector keeps it, and the small pure
// helpers the view needs to show it (kept here so they are unit-tested and
// out of the view's render path).

export interface InspectorMessage {
  /** Increasing per page, the row's key. */
  id: number;
  /** Arrival time, ms since the epoch. */
  time: number;
  topic: string;
  qos: 0 | 1 | 2;
  retain: boolean;
  dup: boolean;
  payload: Uint8Array;
  props?: MessageProps;
}

/** The MQTT 5 PUBLISH properties a subscriber sees (MQTT.js names). */
export interface MessageProps {
  payloadFormatIndicator?: boolean;
  messageExpiryInterval?: number;
  topicAlias?: number;
  responseTopic?: string;
  correlationData?: Uint8Array;
  userProperties?: Record<string, string | string[]>;
  subscriptionIdentifier?: number | number[];
  contentType?: string;
}

/** The properties worth showing, as label and text, in a stable order. */
export function propertyList(p: MessageProps | undefined): [string, string][] {
  if (!p) return [];
  const out: [string, string][] = [];
  if (p.contentType !== undefined) out.push(['Content type', p.contentType]);
  if (p.payloadFormatIndicator !== undefined) out.push(['Payload format', p.payloadFormatIndicator ? '1 (UTF-8 text)' : '0 (bytes)']);
  if (p.messageExpiryInterval !== undefined) out.push(['Message expiry', `${p.messageExpiryInterval} s`]);
  if (p.responseTopic !== undefined) out.push(['Response topic', p.responseTopic]);
  if (p.correlationData !== undefined) out.push(['Correlation data', bytesBrief(p.correlationData)]);
  if (p.subscriptionIdentifier !== undefined) {
    const ids = Array.isArray(p.subscriptionIdentifier) ? p.subscriptionIdentifier : [p.subscriptionIdentifier];
    out.push(['Subscription identifier', ids.join(', ')]);
  }
  if (p.userProperties) {
    for (const [k, v] of Object.entries(p.userProperties)) {
      for (const one of Array.isArray(v) ? v : [v]) out.push([`User property ${k}`, one]);
    }
  }
  return out;
}

const strict = new TextDecoder('utf-8', { fatal: true });

/** Bytes as text when they are valid UTF-8 without control characters, else as hex. */
export function bytesBrief(b: Uint8Array, max = 64): string {
  const text = asText(b.subarray(0, max));
  if (text !== null) return text + (b.length > max ? '…' : '');
  return '0x' + hexString(b.subarray(0, max)) + (b.length > max ? '…' : '');
}

/**
 * A one-line preview of a payload for the collapsed row: text (control
 * characters shown as ·), or hex for binary data. Cheap: it looks at the
 * first max bytes only.
 */
export function preview(b: Uint8Array, max = 96): string {
  if (b.length === 0) return '(empty)';
  const head = b.subarray(0, max);
  // A cut through a multi-byte character is not binary: retry without the tail.
  let text = asText(head, true);
  for (let cut = 1; text === null && cut < 4 && b.length > max; cut++) text = asText(head.subarray(0, max - cut), true);
  if (text === null) return hexString(b.subarray(0, Math.min(b.length, 32)), ' ') + (b.length > 32 ? ' …' : '');
  return text + (b.length > head.length ? '…' : '');
}

function asText(b: Uint8Array, flatten = false): string | null {
  let s: string;
  try {
    s = strict.decode(b);
  } catch {
    return null;
  }
  // Binary data that happens to be valid UTF-8 (NULs and other C0 controls) is not text.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000e-\u001f\u007f]/.test(s)) return null;
  return flatten ? s.replace(/\s+/g, ' ') : s;
}

export function hexString(b: Uint8Array, sep = ''): string {
  let s = '';
  for (let i = 0; i < b.length; i++) s += (i && sep ? sep : '') + (b[i] < 16 ? '0' : '') + b[i].toString(16);
  return s;
}

/** HH:MM:SS.mmm in local time. */
export function clock(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** A string as one POSIX shell word in single quotes. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** host and port of "host:port" or "[v6]:port"; undefined when it is neither. */
export function splitHostPort(addr: string | undefined): { host: string; port: string } | undefined {
  if (!addr) return undefined;
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(addr) ?? /^([^:[\]]+):(\d+)$/.exec(addr);
  return m ? { host: m[1], port: m[2] } : undefined;
}

/**
 * The mosquitto_sub line for a filter against the tenant's MQTT address.
 * The credential is left to the user's environment: the Inspector's own
 * token never goes into it.
 */
export function mosquittoSub(filter: string, mqttAddr: string | undefined): string {
  const hp = splitHostPort(mqttAddr);
  const host = hp ? hp.host : 'HOST';
  const port = hp ? hp.port : '1883';
  return `mosquitto_sub -h ${host} -p ${port} -u "$BERTH_MQTT_USERNAME" -P "$BERTH_MQTT_PASSWORD" -t ${shellQuote(filter || '#')} -v -V mqttv5`;
}
