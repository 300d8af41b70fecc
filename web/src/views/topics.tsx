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
import { Table } from '../ui/table';

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

type Rule = Schemas['TopicRule'];

function Rules() {
  const { tenant } = useTenant();
  const tid = tenant.id;
  const rules = useQuery(async () => (await must(api.GET('/v1/tenants/{tid}/topics', { params: { path: { tid }, query: { limit: 100 } } }))).items ?? [], [tid]);
  const remove = useAction(async (id: string) => {
    await must(api.DELETE('/v1/tenants/{tid}/topics/{id}', { params: { path: { tid, id } } }));
    rules.reload();
  });
  const [editing, setEditing] = useState<Rule | null>(null);
  return (
    <>
      <h2>Topic rules</h2>
      <p class="muted small">A rule narrows the tenant's quotas for the topics its filter matches: how long their messages stay stored, whether they may be retained, how large they may be and how many may arrive each second. Of several matching rules the most specific one applies.</p>
      <RuleForm key={editing?.id ?? 'new'} tid={tid} rule={editing} onDone={() => (setEditing(null), rules.reload())} onCancel={() => setEditing(null)} />
      <ProblemView error={remove.error} />
      <Loaded q={rules} what="Loading topic rules">
        {(items) =>
          items.length === 0 ? (
            <Empty>No topic rules: the tenant's quotas apply to every topic.</Empty>
          ) : (
            <Table columns={['Filter', 'Retention', 'Retained', 'Max size', 'Max rate', 'Created', 'Actions']}>
              {items.map((r) => (
                <tr key={r.id}>
                  <td>
                    <code>{r.filter}</code>
                  </td>
                  <td>{r.retention_seconds != null ? `${r.retention_seconds} s` : 'tenant default'}</td>
                  <td>{r.retained_allowed ? 'allowed' : 'refused'}</td>
                  <td>{r.max_message_size ? bytes(r.max_message_size) : 'tenant default'}</td>
                  <td>{r.max_msgs_per_sec ? `${count(r.max_msgs_per_sec)} msg/s` : 'tenant default'}</td>
                  <td>{when(r.created_at)}</td>
                  <td>
                    <div class="row">
                      <button type="button" class="secondary small" onClick={() => setEditing(r)} aria-label={`Edit rule ${r.filter}`}>
                        Edit
                      </button>
                      <ConfirmButton label={`Delete rule ${r.filter}`} question={<>Delete the rule for <code>{r.filter}</code>?</>} confirm="Delete" onConfirm={() => remove.run(r.id!)} />
                    </div>
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

/** Creates a rule, or edits one (PATCH) when rule is given. */
function RuleForm({ tid, rule, onDone, onCancel }: { tid: string; rule: Rule | null; onDone: () => void; onCancel: () => void }) {
  const [filter, setFilter] = useState(rule?.filter ?? '');
  const [retention, setRetention] = useState(rule?.retention_seconds != null ? String(rule.retention_seconds) : '');
  const [maxSize, setMaxSize] = useState(rule?.max_message_size != null ? String(rule.max_message_size) : '');
  const [retained, setRetained] = useState(rule?.retained_allowed ?? true);
  const [rate, setRate] = useState(rule?.max_msgs_per_sec != null ? String(rule.max_msgs_per_sec) : '');
  const problem = filter ? topicProblem(filter) : '';
  const save = useAction(async () => {
    const body = {
      filter,
      retained_allowed: retained,
      retention_seconds: retention ? Number(retention) : null,
      max_message_size: maxSize ? Number(maxSize) : null,
      max_msgs_per_sec: rate ? Number(rate) : null,
    };
    if (rule) {
      await must(api.PATCH('/v1/tenants/{tid}/topics/{id}', { params: { path: { tid, id: rule.id! } }, body }));
    } else {
      const create: Schemas['CreateTopicRuleRequest'] = { filter, retained_allowed: retained };
      if (body.retention_seconds != null) create.retention_seconds = body.retention_seconds;
      if (body.max_message_size != null) create.max_message_size = body.max_message_size;
      if (body.max_msgs_per_sec != null) create.max_msgs_per_sec = body.max_msgs_per_sec;
      await must(api.POST('/v1/tenants/{tid}/topics', { params: { path: { tid } }, body: create }));
      setFilter('');
    }
    onDone();
  });
  return (
    <form
      class="panel stack"
      aria-label={rule ? `Edit rule ${rule.filter}` : 'New topic rule'}
      onSubmit={(e) => {
        e.preventDefault();
        save.run();
      }}
    >
      {rule ? (
        <strong>
          Editing the rule for <code>{rule.filter}</code>
        </strong>
      ) : null}
      <div class="grid">
        <label>
          Topic filter
          <input value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} required aria-invalid={!!problem} placeholder="sensors/+/temperature" />
          {problem ? <span class="field-error">{problem}</span> : null}
        </label>
        <label>
          Retention (seconds)
          <input type="number" min={0} value={retention} onInput={(e) => setRetention((e.target as HTMLInputElement).value)} placeholder="tenant default" />
        </label>
        <label>
          Max message size (bytes)
          <input type="number" min={1} value={maxSize} onInput={(e) => setMaxSize((e.target as HTMLInputElement).value)} placeholder="tenant default" />
        </label>
        <label>
          Max rate (messages/s)
          <input type="number" min={1} value={rate} onInput={(e) => setRate((e.target as HTMLInputElement).value)} placeholder="tenant default" />
        </label>
      </div>
      <label class="inline">
        <input type="checkbox" checked={retained} onChange={(e) => setRetained((e.target as HTMLInputElement).checked)} />
        Retained messages allowed
      </label>
      <ProblemView error={save.error} />
      <div class="row">
        <button disabled={save.pending || !!problem}>{rule ? 'Save rule' : 'Add rule'}</button>
        {rule ? (
          <button type="button" class="secondary" onClick={onCancel}>
            Cancel
          </button>
        ) : null}
      </div>
    </form>
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
            <Table columns={['Topic', { label: 'Messages/s', num: true }, { label: 'Bytes/s', num: true }, { label: 'Messages', num: true }, { label: 'Bytes', num: true }, { label: 'Subscribers', num: true }]}>
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
            </Table>
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
            <Table columns={['Topic', 'QoS', { label: 'Size', num: true }, 'Stored', 'Payload']}>
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
            </Table>
          )
        }
      </Loaded>
    </>
  );
}
