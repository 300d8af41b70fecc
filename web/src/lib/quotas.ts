// What each quota means, for the editor and the bars.
import { bytes, count, seconds } from './format';

export const quotaFields: { key: string; label: string; fmt: (n: number) => string; unit: string }[] = [
  { key: 'max_connections', label: 'Connections', fmt: count, unit: 'connections' },
  { key: 'max_msgs_per_sec', label: 'Messages per second (tenant)', fmt: count, unit: 'msg/s' },
  { key: 'max_bytes_per_sec', label: 'Bytes per second (tenant)', fmt: bytes, unit: 'B/s' },
  { key: 'client_msgs_per_sec', label: 'Messages per second (each client)', fmt: count, unit: 'msg/s' },
  { key: 'client_bytes_per_sec', label: 'Bytes per second (each client)', fmt: bytes, unit: 'B/s' },
  { key: 'max_message_size', label: 'Message size', fmt: bytes, unit: 'bytes' },
  { key: 'max_subscriptions', label: 'Subscriptions', fmt: count, unit: 'subscriptions' },
  { key: 'max_retained_messages', label: 'Retained messages', fmt: count, unit: 'messages' },
  { key: 'max_retained_bytes', label: 'Retained bytes', fmt: bytes, unit: 'bytes' },
  { key: 'retention_seconds', label: 'Storage retention (time)', fmt: seconds, unit: 'seconds' },
  { key: 'retention_bytes', label: 'Storage retention (size)', fmt: bytes, unit: 'bytes' },
  { key: 'max_inflight', label: 'Messages in flight per client', fmt: count, unit: 'messages' },
  { key: 'max_queued_bytes', label: 'Queued bytes per session', fmt: bytes, unit: 'bytes' },
  { key: 'monthly_messages', label: 'Messages per month', fmt: count, unit: 'messages' },
  { key: 'max_sessions', label: 'Sessions (connected and offline)', fmt: count, unit: 'sessions' },
  { key: 'max_session_expiry', label: 'Session expiry (longest)', fmt: seconds, unit: 'seconds' },
];

/** The fields whose value exceeds the plan's bound (a zero bound means no bound). */
export function overBounds(values: Record<string, number>, max: Record<string, number | undefined>): string[] {
  return quotaFields.filter((f) => (max[f.key] ?? 0) > 0 && (values[f.key] ?? 0) > (max[f.key] ?? 0)).map((f) => f.key);
}
