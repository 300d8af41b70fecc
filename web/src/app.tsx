import type { ComponentType } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, must, setSignedOutHandler } from './api/client';
import { useAction, useQuery } from './hooks/useQuery';
import { interceptLinks, navigate, parseRoute, tenantPath, usePath } from './lib/router';
import { TenantCtx, type Tenant } from './session';
import { ProblemView } from './ui/problem';
import { Loading } from './ui/states';
import { AuthPage } from './views/auth';
import { Billing } from './views/billing';
import { Clients } from './views/clients';
import { Connect } from './views/connect';
import { Credentials } from './views/credentials';
import { Inspector } from './views/inspector';
import { Overview } from './views/overview';
import { Settings } from './views/settings';
import { Topics } from './views/topics';
import { Traces } from './views/traces';
import { Usage } from './views/usage';


const pages: { key: string; label: string; view: ComponentType<{ rest: string[] }> }[] = [
  { key: 'overview', label: 'Overview', view: Overview },
  { key: 'connect', label: 'Connect', view: Connect },
  { key: 'credentials', label: 'Credentials', view: Credentials },
  { key: 'topics', label: 'Topics', view: Topics },
  { key: 'clients', label: 'Clients', view: Clients },
  { key: 'traces', label: 'Traces', view: Traces },
  { key: 'inspector', label: 'Inspector', view: Inspector },
  { key: 'usage', label: 'Usage', view: Usage },
  { key: 'billing', label: 'Billing', view: Billing },
  { key: 'settings', label: 'Settings', view: Settings },
];

export function App() {
  const path = usePath();
  const route = parseRoute(path);
  const [signedOut, setSignedOut] = useState(false);
  useEffect(() => setSignedOutHandler(() => setSignedOut(true)), []);

  if (route.page === 'login' || route.page === 'signup') {
    return <AuthPage mode={route.page} onSignedIn={() => setSignedOut(false)} />;
  }
  if (signedOut) {
    navigate('/login', true);
    return null;
  }
  return <Console path={path} />;
}

function Console({ path }: { path: string }) {
  const route = parseRoute(path);
  const tenants = useQuery(async () => (await must(api.GET('/v1/tenants', { params: { query: { limit: 100 } } }))).items as Tenant[], []);
  const main = useRef<HTMLElement>(null);
  // A tenant created here is shown at once, before the list reloads with it.
  const [created, setCreated] = useState<Tenant[]>([]);

  // Move focus to the page's heading when the page changes, for keyboard and screen reader users.
  useEffect(() => {
    main.current?.querySelector('h1')?.focus();
  }, [route.tid, route.page]);

  if (tenants.error && !tenants.data) return <ProblemView error={tenants.error} />;
  if (!tenants.data) return <Loading what="Loading your tenants" />;
  const list = [...tenants.data, ...created.filter((c) => !tenants.data!.some((t) => t.id === c.id))];
  const tenant = list.find((t) => t.id === route.tid) ?? list[0];
  if (!tenant) return <NoTenant reload={tenants.reload} />;
  if (route.tid !== tenant.id) {
    navigate(tenantPath(tenant.id, 'overview'), true);
    return null;
  }
  const page = pages.find((p) => p.key === route.page) ?? pages[0];
  const View = page.view;
  return (
    <TenantCtx.Provider value={{ tenant, tenants: list, reloadTenants: tenants.reload }}>
      <div class="shell" onClick={interceptLinks}>
        <header class="top">
          <a class="brand" href={tenantPath(tenant.id, 'overview')}>
            Berth
          </a>
          <TenantSwitcher tenants={list} current={tenant} page={page.key} />
          <NewTenant
            onCreated={(t) => {
              setCreated([...created, t]);
              tenants.reload();
              navigate(tenantPath(t.id, 'overview'));
            }}
          />
          <LogOut />
        </header>
        <nav class="side" aria-label="Pages">
          <ul>
            {pages.map((p) => (
              <li key={p.key}>
                <a href={tenantPath(tenant.id, p.key)} aria-current={p.key === page.key ? 'page' : undefined}>
                  {p.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <main ref={main} class="content">
          <View key={tenant.id + page.key} rest={route.rest} />
        </main>
      </div>
    </TenantCtx.Provider>
  );
}

function TenantSwitcher({ tenants, current, page }: { tenants: Tenant[]; current: Tenant; page: string }) {
  return (
    <label class="switcher">
      <span class="sr-only">Tenant</span>
      <select value={current.id} onChange={(e) => navigate(tenantPath((e.target as HTMLSelectElement).value, page))}>
        {tenants.map((t) => (
          <option key={t.id} value={t.id}>
            {t.slug} ({t.plan})
          </option>
        ))}
      </select>
    </label>
  );
}

function NewTenant({ onCreated }: { onCreated: (t: Tenant) => void }) {
  const dlg = useRef<HTMLDialogElement>(null);
  const [slug, setSlug] = useState('');
  const [plan, setPlan] = useState<'free' | 'pro' | 'business'>('free');
  const create = useAction(async () => must(api.POST('/v1/tenants', { body: { slug, plan } })) as Promise<Tenant>);
  // The account's entitlement: plans it may not use are shown, not offered.
  const acc = useQuery(async () => must(api.GET('/v1/account')), []);
  const entitled = (p: string) => acc.data?.plans.includes(p) ?? p === 'free';
  return (
    <>
      <button type="button" class="secondary small" onClick={() => dlg.current?.showModal()}>
        New tenant
      </button>
      <dialog ref={dlg} aria-label="New tenant">
        <form
          class="stack"
          onSubmit={async (e) => {
            e.preventDefault();
            const t = await create.run();
            if (t) {
              dlg.current?.close();
              setSlug('');
              onCreated(t);
            }
          }}
        >
          <h2>New tenant</h2>
          <label>
            Slug
            <input value={slug} onInput={(e) => setSlug((e.target as HTMLInputElement).value)} required pattern="[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?" placeholder="factory-eu" />
            <small class="muted">Lowercase letters, digits and hyphens; it names the tenant's endpoint.</small>
          </label>
          <label>
            Plan
            <select value={plan} onChange={(e) => setPlan((e.target as HTMLSelectElement).value as typeof plan)}>
              {(['free', 'pro', 'business'] as const).map((p) => (
                <option key={p} value={p} disabled={!entitled(p)}>
                  {entitled(p) ? p : `${p} (not included in your account)`}
                </option>
              ))}
            </select>
          </label>
          {acc.data && <small class="muted">Your account may have up to {acc.data.tenant_limit} tenants.</small>}
          <ProblemView error={create.error} />
          <div class="row end">
            <button type="button" class="secondary" onClick={() => dlg.current?.close()}>
              Cancel
            </button>
            <button disabled={create.pending}>Create tenant</button>
          </div>
        </form>
      </dialog>
    </>
  );
}

function LogOut() {
  const out = useAction(async () => {
    await must(api.POST('/v1/logout'));
  });
  return (
    <button
      type="button"
      class="secondary small"
      disabled={out.pending}
      onClick={async () => {
        await out.run();
        navigate('/login');
      }}
      title={out.error?.message}
    >
      Log out
    </button>
  );
}

function NoTenant({ reload }: { reload: () => void }) {
  const [slug, setSlug] = useState('');
  const create = useAction(async () => must(api.POST('/v1/tenants', { body: { slug } })));
  return (
    <main class="auth">
      <h1>Create your first tenant</h1>
      <form
        class="stack"
        onSubmit={async (e) => {
          e.preventDefault();
          if (await create.run()) reload();
        }}
      >
        <label>
          Slug
          <input value={slug} onInput={(e) => setSlug((e.target as HTMLInputElement).value)} required />
        </label>
        <ProblemView error={create.error} />
        <button disabled={create.pending}>Create tenant</button>
      </form>
    </main>
  );
}
