import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useAction } from '../hooks/useQuery';
import { navigate, tenantPath } from '../lib/router';
import { ProblemView } from '../ui/problem';

/**
 * Sign up and log in: one form, two modes. Signup answers the same whether
 * or not the email has an account (it does not tell), so both modes then
 * log in; after a signup the login fails only for an email registered with
 * another password, which the form then says. API keys are made in Settings.
 */
export function AuthPage({ mode, onSignedIn }: { mode: 'login' | 'signup'; onSignedIn: () => void }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const submit = useAction(async () => {
    if (mode === 'signup') await must(api.POST('/v1/signup', { body: { email, password } }));
    await must(api.POST('/v1/login', { body: { email, password } }));
    let tid: string | undefined;
    if (mode === 'signup') {
      // The first tenant, made with the account: its Connect page is next.
      const ts = await must(api.GET('/v1/tenants', { params: { query: { limit: 1 } } }));
      tid = ts.items?.[0]?.id;
    }
    return { tid };
  });
  const title = mode === 'signup' ? 'Sign up' : 'Log in';
  return (
    <main class="auth">
      <h1>{mode === 'signup' ? 'Create your Berth account' : 'Log in to Berth'}</h1>
      <form
        class="stack"
        onSubmit={async (e) => {
          e.preventDefault();
          const done = await submit.run();
          if (!done) return; // the refusal is on screen
          onSignedIn();
          navigate(done.tid ? tenantPath(done.tid, 'connect') : '/');
        }}
      >
        <label>
          Email
          <input type="email" autocomplete="username" value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} required />
        </label>
        <label>
          Password
          <input
            type="password"
            autocomplete={mode === 'signup' ? 'new-password' : 'current-password'}
            value={password}
            onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
            required
          />
          {mode === 'signup' ? <small class="muted">At least 10 characters.</small> : null}
        </label>
        <ProblemView error={submit.error} />
        <button disabled={submit.pending}>{title}</button>
      </form>
      <p class="muted small">
        {mode === 'signup' ? (
          <>
            Have an account? <a href="/login">Log in</a>
          </>
        ) : (
          <>
            New to Berth? <a href="/signup">Sign up</a>
          </>
        )}
      </p>
    </main>
  );
}
