import { useState } from 'preact/hooks';
import { api, must, type Schemas } from '../api/client';
import { useAction, useQuery } from '../hooks/useQuery';
import { base64ToBytes, bytes, count, payload, when, type PayloadView } from '../lib/format';
import { topicProblem } from '../lib/topic';
import { useTenant } from '../session';
import { ConfirmButton } from '../ui/confirm';
import { ProblemView } from '../ui/problem';
import { Segmented } from '../ui/segmented';
import { Empty, Loaded } from '../ui/states';

export function Topics() {
  return (
    <section>
      <h1 tabIndex={-1}>Topics</h1>
      <Rules />
      <LiveTopics />
      <RetainedBrowser />
    </section>
  );
}

function Rules() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const rules = useQuery(async () => (await must(api.GET('/v1/tenants/{tid}/topics', { params: { path: { tid }, query: { limit: 100 } } }))).items ?? [], [tid]);
  const remove = useAction(async (id: string) => {
    await must(api.DELETE('/v1/tenants/{tid}/topics/{id}', { params: { path: { tid, id } } }));
    rules.reload();
  });
  const [filter, setFilter] = useState('');
  const [retention, setRetention] = useState('');
  const [maxSize, setMaxSize] = useState('');
  const [retained, setRetained] = useState(true);
  const problem = filter ? topicProblem(filter) : '';
  const create = useAction(async () => {
    const body: Schemas['CreateTopicRuleRequest'] = { filter, retained_allowed: retained };
    if (retention) body.retention_seconds = Number(retention);
    if (maxSize) body.max_message_size = Number(maxSize);
    await must(api.POST('/v1/tenants/{tid}/topics', { params: { path: { tid } }, body }));
    setFilter('');
    rules.reload();
  });
  return (
    <>
      <h2>Topic rules</h2>
      <form
        class="panel stack"
        aria-label="New topic rule"
        onSubmit={(e) => {
          e.preventDefault();
          create.run();
        }}
      >
        <div class="grid">
          <label>
            Topic filter
            <input value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} required aria-invalid={!!problem} placeholder="sensors/+/temperature" />
            {problem ? <span class="field-error">{problem}</span> : null}
          </label>
          <label>
            Retention (seconds)
            <input type="number" min={1} value={retention} onInput={(e) => setRetention((e.target as HTMLInputElement).value)} />
          </label>
          <label>
            Max message size (bytes)
            <input type="number" min={1} value={maxSize} onInput={(e) => setMaxSize((e.target as HTMLInputElement).value)} />
          </label>
        </div>
        <label class="inline">
          <input type="checkbox" checked={retained} onChange={(e) => setRetained((e.target as HTMLInputElement).checked)} />
          Retained messages allowed
        </label>
        <ProblemView error={create.error} />
        <button disabled={create.pending || !!problem}>Add rule</button>
      </form>
      <ProblemView error={remove.error} />
      <Loaded q={rules} what="Loading topic rules">
        {(items) =>
          items.length === 0 ? (
            <Empty>No topic rules: the tenant's quotas apply to every topic.</Empty>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Filter</th>
                    <th scope="col">Retention</th>
                    <th scope="col">Retained</th>
                    <th scope="col">Max size</th>
                    <th scope="col">Created</th>
                    <th scope="col">Actions</th>
                  </tr>
                </thead>
                <tbody>
                  {items.map((r) => (
                    <tr key={r.id}>
                      <td>
                        <code>{r.filter}</code>
                      </td>
                      <td>{r.retention_seconds ? `${r.retention_seconds} s` : 'tenant default'}</td>
                      <td>{r.retained_allowed ? 'allowed' : 'refused'}</td>
                      <td>{r.max_message_size ? bytes(r.max_message_size) : 'tenant default'}</td>
                      <td>{when(r.created_at)}</td>
                      <td>
                        <ConfirmButton label={`Delete rule ${r.filter}`} question={<>Delete the rule for <code>{r.filter}</code>?</>} confirm="Delete" onConfirm={() => remove.run(r.id!)} />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )
        }
      </Loaded>
    </>
  );
}

function LiveTopics() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const live = useQuery(async () => (await must(api.GET('/v1/tenants/{tid}/topics/live', { params: { path: { tid } } }))).items ?? [], [tid], 5000);
  return (
    <>
      <h2>Live topics</h2>
      <Loaded q={live} what="Asking the broker for live topics">
        {(items) =>
          items.length === 0 ? (
            <Empty>No topic has seen traffic since the tenant's shard opened.</Empty>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Topic</th>
                    <th scope="col" class="num">Messages/s</th>
                    <th scope="col" class="num">Bytes/s</th>
                    <th scope="col" class="num">Messages</th>
                    <th scope="col" class="num">Bytes</th>
                    <th scope="col" class="num">Subscribers</th>
                  </tr>
                </thead>
                <tbody>
                  {items.map((t) => (
                    <tr key={t.topic}>
                      <td>
                        <code>{t.topic}</code>
                      </td>
                      <td class="num">{count(t.msgs_per_sec ?? 0)}</td>
                      <td class="num">{bytes(Math.round(t.bytes_per_sec ?? 0))}</td>
                      <td class="num">{count(t.messages ?? 0)}</td>
                      <td class="num">{bytes(t.bytes ?? 0)}</td>
                      <td class="num">{t.subscribers ?? 0}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )
        }
      </Loaded>
    </>
  );
}

const views: { key: PayloadView; label: string }[] = [
  { key: 'text', label: 'Text' },
  { key: 'json', label: 'JSON' },
  { key: 'hex', label: 'Hex' },
];

function RetainedBrowser() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const [input, setInput] = useState('#');
  const [filter, setFilter] = useState('#');
  const [view, setView] = useState<PayloadView>('text');
  const [open, setOpen] = useState<string | null>(null);
  const problem = topicProblem(input);
  const retained = useQuery(async () => (await must(api.GET('/v1/tenants/{tid}/retained', { params: { path: { tid }, query: { filter } } }))).items ?? [], [tid, filter]);
  const del = useAction(async () => {
    const d = await must(api.DELETE('/v1/tenants/{tid}/retained', { params: { path: { tid }, query: { filter } } }));
    retained.reload();
    return d;
  });
  return (
    <>
      <h2>Retained messages</h2>
      <form
        class="row"
        aria-label="Retained filter"
        onSubmit={(e) => {
          e.preventDefault();
          if (!problem) setFilter(input);
        }}
      >
        <label>
          Filter
          <input value={input} onInput={(e) => setInput((e.target as HTMLInputElement).value)} aria-invalid={!!problem} />
        </label>
        <button disabled={!!problem}>Show</button>
        <Segmented label="Payload view" value={view} options={views} onChange={setView} />
        <ConfirmButton label="Delete matching" question={<>Delete every retained message matching <code>{filter}</code>?</>} confirm="Delete retained" onConfirm={() => del.run()} />
      </form>
      {problem ? <p class="field-error">{problem}</p> : null}
      <ProblemView error={del.error} />
      <Loaded q={retained} what="Loading retained messages">
        {(items) =>
          items.length === 0 ? (
            <Empty>
              No retained message matches <code>{filter}</code>.
            </Empty>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Topic</th>
                    <th scope="col">QoS</th>
                    <th scope="col" class="num">Size</th>
                    <th scope="col">Stored</th>
                    <th scope="col">Payload</th>
                  </tr>
                </thead>
                <tbody>
                  {items.map((m) => (
                    <tr key={m.topic}>
                      <td>
                        <code>{m.topic}</code>
                      </td>
                      <td>{m.qos}</td>
                      <td class="num">{bytes(m.size ?? 0)}</td>
                      <td>{when(m.stored_at)}</td>
                      <td>
                        {open === m.topic ? (
                          <pre>{payload(base64ToBytes(m.payload_base64 ?? ''), view)}</pre>
                        ) : (
                          <button type="button" class="secondary small" onClick={() => setOpen(m.topic!)}>
                            View payload
                          </button>
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )
        }
      </Loaded>
    </>
  );
}
