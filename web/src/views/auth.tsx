import { useState } from 'preact/hooks';
import { api, must } from '../api/client';
import { useAction } from '../hooks/useQuery';
import { navigate, tenantPath } from '../lib/router';
import { ProblemView } from '../ui/problem';

// The API key signup returns is shown once, on the first page after signup.
const signupKeyStorage = 'berth.signup-api-key';

function takeSignupKey(): string | null {
  const k = sessionStorage.getItem(signupKeyStorage);
  sessionStorage.removeItem(signupKeyStorage);
  return k;
}

/** The API key signup returned, on whichever page the user sees first, once. */
export function SignupKeyNotice() {
  const [key] = useState(takeSignupKey);
  if (!key) return null;
  return (
    <div class="notice stack" role="status">
      <p>
        Your account's first API key, shown this once. Keep it for scripts (<code>Authorization: Bearer …</code>):
      </p>
      <p class="secret">{key}</p>
    </div>
  );
}

/** Sign up and log in: one form, two modes. */
export function AuthPage({ mode, onSignedIn }: { mode: 'login' | 'signup'; onSignedIn: () => void }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const submit = useAction(async () => {
    let tid: string | undefined;
    if (mode === 'signup') {
      const s = await must(api.POST('/v1/signup', { body: { email, password } }));
      sessionStorage.setItem(signupKeyStorage, s.api_key);
      tid = s.tenant.id;
    }
    await must(api.POST('/v1/login', { body: { email, password } }));
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
