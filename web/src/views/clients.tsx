import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { count, when } from '../lib/format';
import { useTenant } from '../session';
import { ConfirmButton } from '../ui/confirm';
import { ProblemView } from '../ui/problem';
import { Empty, Loaded } from '../ui/states';
import { Table } from '../ui/table';

type State = '' | 'connected' | 'offline';

export function Clients() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [state, setState] = useState<State>('');
  const [prefixInput, setPrefixInput] = useState('');
  const [prefix, setPrefix] = useState('');
  // The cursors of the pages before this one, so "Previous" can go back.
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors[cursors.length - 1];
  const sessions = useQuery(
    async () => {
      const query = { limit: 50, state: state || undefined, prefix: prefix || undefined, cursor };
      return must(api.GET('/v1/tenants/{tid}/sessions', { params: { path: { tid }, query } }));
    },
    [tid, state, prefix, cursor],
    5000,
  );
  const kick = useAction(async (clientid: string) => {
    await must(api.DELETE('/v1/tenants/{tid}/sessions/{clientid}', { params: { path: { tid, clientid } } }));
    sessions.reload();
  });
  const reset = () => setCursors([]);

  return (
    <section>
      <h1 tabIndex={-1}>Clients</h1>
      <form
        class="row"
        aria-label="Session filters"
        onSubmit={(e) => {
          e.preventDefault();
          setPrefix(prefixInput);
          reset();
        }}
      >
        <label>
          State
          <select
            value={state}
            onChange={(e) => {
              setState((e.target as HTMLSelectElement).value as State);
              reset();
            }}
          >
            <option value="">all</option>
            <option value="connected">connected</option>
            <option value="offline">offline</option>
          </select>
        </label>
        <label>
          Client id prefix
          <input value={prefixInput} onInput={(e) => setPrefixInput((e.target as HTMLInputElement).value)} />
        </label>
        <button>Apply</button>
      </form>
      <ProblemView error={kick.error} />
      <Loaded q={sessions} what="Asking the broker for sessions">
        {(page) => {
          const items = page.items ?? [];
          return (
            <>
              {items.length === 0 ? (
                <Empty>No session matches. Devices appear here while connected, and afterwards while their persistent session lives.</Empty>
              ) : (
                <Table columns={['Client id', 'State', 'MQTT', 'Address', 'Connected at', { label: 'Subscriptions', num: true }, { label: 'Queued', num: true }, { label: 'In flight', num: true }, { label: 'Dropped', num: true }, 'Actions']}>
                  {items.map((s) => (
                    <tr key={s.client_id}>
                      <td>
                        <code>{s.client_id}</code>
                      </td>
                      <td>{s.connected ? <span class="ok">connected</span> : <span class="muted">offline</span>}</td>
                      <td>{s.protocol_version === 5 ? '5.0' : s.protocol_version === 4 ? '3.1.1' : s.protocol_version === 3 ? '3.1' : '—'}</td>
                      <td>{s.remote_addr || '—'}</td>
                      <td>{when(s.connected_at)}</td>
                      <td class="num">{count(s.subscriptions ?? 0)}</td>
                      <td class="num">{count(s.queued_messages ?? 0)}</td>
                      <td class="num">{count(s.inflight ?? 0)}</td>
                      <td class="num">{s.dropped ? <span class="bad">{count(s.dropped)}</span> : 0}</td>
                      <td>
                        <ConfirmButton
                          label={`Kick ${s.client_id}`}
                          question={
                            <>
                              Disconnect <code>{s.client_id}</code> now? The device may reconnect.
                            </>
                          }
                          confirm="Kick"
                          onConfirm={() => kick.run(s.client_id!)}
                        />
                      </td>
                    </tr>
                  ))}
                </Table>
              )}
              <div class="row">
                <button type="button" class="secondary small" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
                  Previous page
                </button>
                <button type="button" class="secondary small" disabled={!page.next_cursor} onClick={() => setCursors([...cursors, page.next_cursor!])}>
                  Next page
                </button>
              </div>
            </>
          );
        }}
      </Loaded>
    </section>
  );
}
