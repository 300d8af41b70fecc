import { useState } from 'preact/hooks';
import { api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { tenantPath } from '../lib/router';
import { snippets, splitAddr } from '../lib/snippets';
import { monthStart, sum, usageIn } from '../lib/usage';
import { useTenant } from '../session';
import { CopyButton, Snippet } from '../ui/copy';
import { ProblemView } from '../ui/problem';
import { Loaded } from '../ui/states';
import { Table } from '../ui/table';

type Endpoints = { mqtt?: string | null; mqtts?: string | null; ws?: string | null; wss?: string | null };

/** A topic a credential may publish to, made from its first publish filter. */
export function sampleTopic(acl: Schemas['Credential']['acl']): string {
  const f = acl?.pub?.[0] ?? 'devices/#';
  const t = f.replace(/\/?#$/, '').replace(/\+/g, 'device-1');
  return (t === '' ? 'hello' : t + '/hello').replace(/^\//, '');
}

export function Connect() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const ep = ((tenant as { endpoints?: Endpoints }).endpoints ?? {}) as Endpoints;
  const creds = useQuery(async () => (await must(api.GET('/v1/tenants/{tid}/credentials', { params: { path: { tid }, query: { limit: 100 } } }))).items ?? [], [tid]);
  const [chosen, setChosen] = useState('');
  const [filled, setFilled] = useState<{ username: string; password: string; topic: string } | null>(null);
  const issue = useAction(async (cid: string) => {
    const c = creds.data?.find((x) => x.id === cid);
    const t = await must(api.POST('/v1/tenants/{tid}/credentials/{cid}/token', { params: { path: { tid, cid } }, body: {} }));
    setFilled({ username: t.username, password: t.password, topic: sampleTopic(c?.acl) });
  });

  // Green once the tenant has seen a message: the node's live topics answer
  // at once, usage after its next flush.
  const first = useQuery(
    async () => {
      const [live, month] = await Promise.all([
        must(api.GET('/v1/tenants/{tid}/topics/live', { params: { path: { tid } } })).catch(() => ({ items: [] })),
        usageIn(tid, { from: monthStart(Date.now()), to: new Date(Date.now() + 60_000), stepMs: 86_400_000, step: '24h' }),
      ]);
      const liveMsgs = ((live as { items?: Schemas['LiveTopic'][] }).items ?? []).reduce((n, t) => n + (t.messages ?? 0), 0);
      return liveMsgs + sum(month, 'messages_in');
    },
    [tid],
    3000,
  );

  const tcp = splitAddr(ep.mqtt || `${tenant.endpoint}:1883`);
  const rows: [string, string | null | undefined, string][] = [
    ['MQTT over TCP', ep.mqtt, 'mqtt://'],
    ['MQTT over TLS', ep.mqtts, 'mqtts://'],
    ['WebSocket', ep.ws, ''],
    ['Secure WebSocket', ep.wss, ''],
  ];
  const active = (creds.data ?? []).filter((c) => !c.revoked_at);

  return (
    <section>
      <h1 tabIndex={-1}>Connect</h1>
      <p class="muted">
        Tenant <strong>{tenant.slug}</strong> ({tenant.id}). Devices send their credential's id as the MQTT username and its token as the password.
      </p>
      <Table caption="Endpoints" columns={['Transport', 'Address', { label: 'Copy', srOnly: true }]}>
        {rows.map(([name, addr, scheme]) => (
          <tr key={name}>
            <td>{name}</td>
            <td>{addr ? <code>{scheme + addr}</code> : <span class="muted">not offered by this deployment</span>}</td>
            <td>{addr ? <CopyButton text={scheme + addr} label={`Copy ${name} address`} /> : null}</td>
          </tr>
        ))}
      </Table>

      <p class="first-message" role="status" aria-live="polite">
        {first.data ? (
          <span class="ok">
            <span class="dot on" />
            Your tenant has received messages ({first.data.toLocaleString('en-US')} so far).
          </span>
        ) : (
          <span>
            <span class="dot" />
            Waiting for your first message…
          </span>
        )}
      </p>

      <h2>Client snippets</h2>
      <Loaded q={creds} what="Loading credentials">
        {() =>
          active.length === 0 ? (
            <p>
              Make a credential first on the <a href={tenantPath(tid, 'credentials')}>Credentials</a> page; its snippets appear here.
            </p>
          ) : (
            <form
              class="row"
              onSubmit={(e) => {
                e.preventDefault();
                if (chosen || active[0]) issue.run(chosen || active[0].id!);
              }}
            >
              <label>
                Credential
                <select value={chosen || active[0].id} onChange={(e) => setChosen((e.target as HTMLSelectElement).value)}>
                  {active.map((c) => (
                    <option key={c.id} value={c.id}>
                      {c.name} ({c.id})
                    </option>
                  ))}
                </select>
              </label>
              <button disabled={issue.pending}>Fill in a fresh token</button>
            </form>
          )
        }
      </Loaded>
      <ProblemView error={issue.error} />
      {filled ? (
        <div>
          <p class="muted small">A new token for this credential was issued just now; the snippets carry it. Older tokens keep working until the credential is revoked.</p>
          {snippets({ host: tcp.host, port: tcp.port, wsURL: ep.ws ?? '', username: filled.username, password: filled.password, topic: filled.topic }).map((s) => (
            <Snippet key={s.label} label={s.label} code={s.code} />
          ))}
        </div>
      ) : null}
    </section>
  );
}
