import { describe, expect, it } from 'vitest';
import { bytesBrief, clock, hexString, mosquittoSub, preview, propertyList, shellQuote, splitHostPort } from './message';
import { berthHint, hex, reasonLabel, reasonName } from './reasons';
import { refreshDelay } from './token';

const enc = (s: string) => new TextEncoder().encode(s);

describe('payload helpers', () => {
  it('previews text on one line and binary as hex', () => {
    expect(preview(enc('{"a": 1,\n  "b": 2}'))).toBe('{"a": 1, "b": 2}');
    expect(preview(new Uint8Array())).toBe('(empty)');
    expect(preview(new Uint8Array([0, 1, 2, 255]))).toBe('00 01 02 ff');
    expect(preview(enc('x'.repeat(200)), 10)).toBe('xxxxxxxxxx…');
    // A cut through a multi-byte character is still text.
    expect(preview(enc('ééééé'), 3)).toBe('é…');
    const big = new Uint8Array(100).fill(0);
    expect(preview(big).endsWith(' …')).toBe(true);
  });

  it('shows short binary values', () => {
    expect(bytesBrief(enc('req-42'))).toBe('req-42');
    expect(bytesBrief(new Uint8Array([0xff, 0x00]))).toBe('0xff00');
    expect(hexString(new Uint8Array([1, 171]), ' ')).toBe('01 ab');
  });

  it('lists MQTT 5 properties', () => {
    expect(propertyList(undefined)).toEqual([]);
    expect(
      propertyList({
        contentType: 'application/json',
        payloadFormatIndicator: true,
        messageExpiryInterval: 60,
        responseTopic: 'replies/1',
        correlationData: enc('c-1'),
        userProperties: { traceparent: '00-abc', k: ['a', 'b'] },
        subscriptionIdentifier: [1, 2],
      }),
    ).toEqual([
      ['Content type', 'application/json'],
      ['Payload format', '1 (UTF-8 text)'],
      ['Message expiry', '60 s'],
      ['Response topic', 'replies/1'],
      ['Correlation data', 'c-1'],
      ['Subscription identifier', '1, 2'],
      ['User property traceparent', '00-abc'],
      ['User property k', 'a'],
      ['User property k', 'b'],
    ]);
  });

  it('formats time of day', () => {
    const d = new Date(2026, 0, 2, 3, 4, 5, 6);
    expect(clock(d.getTime())).toBe('03:04:05.006');
  });
});

describe('mosquitto_sub line', () => {
  it('quotes the filter and never holds a token', () => {
    expect(mosquittoSub('sensors/#', '127.0.0.1:1883')).toBe(
      `mosquitto_sub -h 127.0.0.1 -p 1883 -u "$BERTH_MQTT_USERNAME" -P "$BERTH_MQTT_PASSWORD" -t 'sensors/#' -v -V mqttv5`,
    );
    expect(mosquittoSub("it's/+", undefined)).toBe(
      `mosquitto_sub -h HOST -p 1883 -u "$BERTH_MQTT_USERNAME" -P "$BERTH_MQTT_PASSWORD" -t 'it'\\''s/+' -v -V mqttv5`,
    );
    expect(mosquittoSub('', 'mqtt.example.com:8883')).toContain("-h mqtt.example.com -p 8883 ");
    expect(mosquittoSub('a', '[::1]:1883')).toContain('-h ::1 -p 1883 ');
  });

  it('splits addresses', () => {
    expect(splitHostPort('h:1')).toEqual({ host: 'h', port: '1' });
    expect(splitHostPort('nohost')).toBeUndefined();
    expect(splitHostPort('')).toBeUndefined();
    expect(shellQuote("a'b")).toBe(`'a'\\''b'`);
  });
});

describe('reason codes', () => {
  it('names codes by packet', () => {
    expect(reasonLabel(0x87, 'suback')).toBe('0x87 Not authorized');
    expect(reasonLabel(0xa0, 'disconnect')).toBe('0xA0 Maximum connect time');
    expect(reasonLabel(0x8e, 'disconnect')).toBe('0x8E Session taken over');
    expect(reasonLabel(0, 'disconnect')).toBe('0x00 Normal disconnection');
    expect(reasonLabel(1, 'suback')).toBe('0x01 Granted QoS 1');
    expect(reasonLabel(0x10, 'puback')).toBe('0x10 No matching subscribers');
    expect(reasonName(0x42, 'puback')).toBe('Unknown reason code');
    expect(hex(5)).toBe('0x05');
    expect(berthHint(0xa0)).toContain('expired');
    expect(berthHint(0)).toBe('');
  });
});

describe('token refresh', () => {
  it('waits 80% of the remaining life', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(refreshDelay('2026-01-01T00:10:00Z', now)).toBe(480_000);
    expect(refreshDelay('2026-01-01T00:00:01Z', now)).toBe(5_000); // floor
    expect(refreshDelay('garbage', now)).toBe(5_000);
  });
});
