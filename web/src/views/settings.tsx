import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { when } from '../lib/format';
import { navigate } from '../lib/router';
import { useTenant } from '../session';
import { ConfirmButton } from '../ui/confirm';
import { CopyButton } from '../ui/copy';
import { ProblemView } from '../ui/problem';
import { Empty, Loaded } from '../ui/states';
import { Table } from '../ui/table';

export function Settings() {
  return (
    <section>
      <h1 tabIndex={-1}>Settings</h1>
      <Account />
      <APIKeys />
      <TenantSettings />
    </section>
  );
}

function Account() {
  const acc = useQuery(async () => must(api.GET('/v1/account')), []);
  return (
    <>
      <h2>Account</h2>
      <Loaded q={acc} what="Loading your account">
        {(a) => (
          <p class="panel">
            Logged in as <strong>{a.email}</strong> · account <code>{a.id}</code> · since {when(a.created_at)}
            <br />
            Plans available to you: {a.plans.join(', ')} · up to {a.tenant_limit} tenants
          </p>
        )}
      </Loaded>
    </>
  );
}

function APIKeys() {
  const keys = useQuery(async () => (await must(api.GET('/v1/api-keys', { params: { query: { limit: 100 } } }))).items ?? [], []);
  const [name, setName] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  const create = useAction(async () => {
    const k = await must(api.POST('/v1/api-keys', { body: { name } }));
    setSecret(k.secret ?? null);
    setName('');
    keys.reload();
  });
  const revoke = useAction(async (id: string) => {
    await must(api.DELETE('/v1/api-keys/{id}', { params: { path: { id } } }));
    keys.reload();
  });
  return (
    <>
      <h2>API keys</h2>
      <p class="muted">For scripts and CI: send a key as <code>Authorization: Bearer &lt;key&gt;</code>. It acts for your whole account.</p>
      <form
        class="row"
        aria-label="New API key"
        onSubmit={(e) => {
          e.preventDefault();
          create.run();
        }}
      >
        <label>
          Key name
          <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required maxLength={128} placeholder="ci deploys" />
        </label>
        <button disabled={create.pending}>Create API key</button>
      </form>
      <ProblemView error={create.error ?? revoke.error} />
      {secret ? (
        <div class="notice stack" role="status">
          <p>The new key, shown this once:</p>
          <p class="secret" data-testid="api-key-secret">
            {secret}
          </p>
          <div class="row">
            <CopyButton text={secret} label="Copy key" />
            <button type="button" class="secondary small" onClick={() => setSecret(null)}>
              I have stored it
            </button>
          </div>
        </div>
      ) : null}
      <Loaded q={keys} what="Loading API keys">
        {(items) =>
          items.length === 0 ? (
            <Empty>No API keys.</Empty>
          ) : (
            <Table columns={['Name', 'Id', 'Created', 'Last used', 'State', 'Actions']}>
              {items.map((k) => (
                <tr key={k.id}>
                  <td>{k.name || '—'}</td>
                  <td>
                    <code>{k.id}</code>
                  </td>
                  <td>{when(k.created_at)}</td>
                  <td>{when(k.last_used_at)}</td>
                  <td>{k.revoked_at ? <span class="bad">revoked</span> : <span class="ok">active</span>}</td>
                  <td>
                    {k.revoked_at ? null : (
                      <ConfirmButton label={`Revoke key ${k.name || k.id}`} question={<>Revoke this API key? Scripts using it are refused from now on.</>} confirm="Revoke key" onConfirm={() => revoke.run(k.id!)} />
                    )}
                  </td>
                </tr>
              ))}
            </Table>
          )
        }
      </Loaded>
    </>
  );
}

function TenantSettings() {
  const { tenant, reloadTenants } = useTenant();
  const [rate, setRate] = useState(String(tenant.trace_sample_rate ?? 0.001));
  const [saved, setSaved] = useState(false);
  const saveRate = useAction(async () => {
    await must(api.PATCH('/v1/tenants/{tid}', { params: { path: { tid: tenant.id } }, body: { trace_sample_rate: Number(rate) } }));
    reloadTenants();
    return true;
  });
  const del = useAction(async () => {
    await must(api.DELETE('/v1/tenants/{tid}', { params: { path: { tid: tenant.id } } }));
    reloadTenants();
    navigate('/');
  });
  return (
    <>
      <h2>Tenant</h2>
      <div class="panel stack">
        <p>
          <strong>{tenant.slug}</strong> · id <code>{tenant.id}</code> · plan {tenant.plan} · created {when(tenant.created_at)}
        </p>
        <form
          class="row"
          aria-label="Trace sampling"
          onSubmit={async (e) => {
            e.preventDefault();
            setSaved(!!(await saveRate.run()));
          }}
        >
          <label>
            Share of messages traced (0 to 1)
            <input
              type="number"
              min={0}
              max={1}
              step="any"
              value={rate}
              onInput={(e) => {
                setSaved(false);
                setRate((e.target as HTMLInputElement).value);
              }}
            />
          </label>
          <button class="secondary" disabled={saveRate.pending}>
            Save sampling
          </button>
          {saved ? (
            <span class="ok" role="status">
              Saved; brokers apply it at once.
            </span>
          ) : null}
        </form>
        <p class="muted small">Messages whose MQTT 5 traceparent says sampled are traced too; at most 100 messages a second are traced per tenant.</p>
        <ProblemView error={saveRate.error} />
        <ProblemView error={del.error} />
        <ConfirmButton
          label={`Delete tenant ${tenant.slug}`}
          question={
            <>
              Delete <strong>{tenant.slug}</strong>? Its devices are disconnected, its credentials stop working and its messages are erased.
            </>
          }
          confirm="Delete tenant"
          onConfirm={() => del.run()}
        />
      </div>
    </>
  );
}
