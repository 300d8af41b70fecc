import { useState } from 'preact/hooks';
import { api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { when } from '../lib/format';
import { filterListProblems, parseFilterList } from '../lib/topic';
import { useTenant } from '../session';
import { ConfirmButton } from '../ui/confirm';
import { CopyButton } from '../ui/copy';
import { FilterListField } from '../ui/filters';
import { ProblemView } from '../ui/problem';
import { Empty, Loaded } from '../ui/states';
import { Table } from '../ui/table';

type Credential = Schemas['Credential'];

export function Credentials() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const list = useQuery(async () => (await must(api.GET('/v1/tenants/{tid}/credentials', { params: { path: { tid }, query: { limit: 100 } } }))).items ?? [], [tid]);
  const [secret, setSecret] = useState<{ title: string; username: string; password: string } | null>(null);
  const revoke = useAction(async (cid: string) => {
    await must(api.DELETE('/v1/tenants/{tid}/credentials/{cid}', { params: { path: { tid, cid } } }));
    list.reload();
  });
  const token = useAction(async (c: Credential) => {
    const t = await must(api.POST('/v1/tenants/{tid}/credentials/{cid}/token', { params: { path: { tid, cid: c.id! } }, body: {} }));
    setSecret({ title: `A fresh token for ${c.name}`, username: t.username, password: t.password });
  });

  return (
    <section>
      <h1 tabIndex={-1}>Credentials</h1>
      <p class="muted">A credential is what a device fleet connects with: its id is the MQTT username, its token the password, and its access list says which topics it may publish and subscribe to.</p>
      <CreateCredential
        tid={tid}
        onCreated={(c) => {
          setSecret({ title: `Credential ${c.name} created`, username: c.username ?? '', password: c.password ?? '' });
          list.reload();
        }}
      />
      {secret ? <ShownOnce {...secret} onDone={() => setSecret(null)} /> : null}
      <h2>Your credentials</h2>
      <ProblemView error={revoke.error ?? token.error} />
      <Loaded q={list} what="Loading credentials">
        {(items) =>
          items.length === 0 ? (
            <Empty>No credentials yet. Create one above, then connect a device with it.</Empty>
          ) : (
            <Table columns={['Name', 'Username (id)', 'Publish', 'Subscribe', 'Created', 'Expires', 'State', 'Actions']}>
              {items.map((c) => (
                <tr key={c.id}>
                  <td>{c.name}</td>
                  <td>
                    <code>{c.id}</code>
                  </td>
                  <td>{(c.acl?.pub ?? []).map((f) => <code key={f}>{f} </code>)}</td>
                  <td>{(c.acl?.sub ?? []).map((f) => <code key={f}>{f} </code>)}</td>
                  <td>{when(c.created_at)}</td>
                  <td>{c.expires_at ? when(c.expires_at) : 'never'}</td>
                  <td>{c.revoked_at ? <span class="bad">revoked {when(c.revoked_at)}</span> : <span class="ok">active</span>}</td>
                  <td>
                    {c.revoked_at ? null : (
                      <div class="row">
                        <button type="button" class="secondary small" onClick={() => token.run(c)} disabled={token.pending}>
                          Issue token
                        </button>
                        <ConfirmButton
                          label={`Revoke ${c.name}`}
                          question={
                            <>
                              Revoke <strong>{c.name}</strong>? Every device using it is disconnected now and refused from then on. This cannot be undone.
                            </>
                          }
                          confirm="Revoke"
                          onConfirm={() => revoke.run(c.id!)}
                        />
                      </div>
                    )}
                  </td>
                </tr>
              ))}
            </Table>
          )
        }
      </Loaded>
    </section>
  );
}

function ShownOnce({ title, username, password, onDone }: { title: string; username: string; password: string; onDone: () => void }) {
  return (
    <div class="notice stack" role="status">
      <strong>{title}</strong>
      <p>The password is shown this once; Berth keeps no copy. Store it with the device now.</p>
      <div>
        Username <span class="secret">{username}</span> <CopyButton text={username} label="Copy username" />
      </div>
      <div>
        Password <p class="secret" data-testid="credential-password">{password}</p> <CopyButton text={password} label="Copy password" />
      </div>
      <button type="button" class="secondary small" onClick={onDone}>
        I have stored it
      </button>
    </div>
  );
}

function CreateCredential({ tid, onCreated }: { tid: string; onCreated: (c: Schemas['CreatedCredential']) => void }) {
  const [name, setName] = useState('');
  const [pub, setPub] = useState('devices/#');
  const [sub, setSub] = useState('devices/#');
  const [expires, setExpires] = useState('');
  const invalid = filterListProblems(parseFilterList(pub)).length + filterListProblems(parseFilterList(sub)).length > 0;
  const create = useAction(async () =>
    must(
      api.POST('/v1/tenants/{tid}/credentials', {
        params: { path: { tid } },
        body: { name, acl: { pub: parseFilterList(pub), sub: parseFilterList(sub) }, ...(expires ? { expires_at: new Date(expires).toISOString().replace(/\.\d+Z$/, 'Z') } : {}) },
      }),
    ),
  );
  return (
    <form
      class="panel stack"
      aria-label="New credential"
      onSubmit={async (e) => {
        e.preventDefault();
        const c = await create.run();
        if (c) {
          setName('');
          onCreated(c);
        }
      }}
    >
      <h2>New credential</h2>
      <label>
        Name
        <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required maxLength={128} placeholder="temperature sensors" />
      </label>
      <div class="grid">
        <FilterListField label="Publish filters" value={pub} onInput={setPub} hint="One topic filter a line; + and # are wildcards." />
        <FilterListField label="Subscribe filters" value={sub} onInput={setSub} hint="Leave empty for a device that only publishes." />
      </div>
      <label>
        Expires (optional)
        <input type="datetime-local" value={expires} onInput={(e) => setExpires((e.target as HTMLInputElement).value)} />
      </label>
      <ProblemView error={create.error} />
      <button disabled={create.pending || invalid}>Create credential</button>
    </form>
  );
}
