/// <reference types="node" />
// Helpers every browser spec uses. The stack under test is started by
// e2e/dashboard_test.go, which passes its addresses in BERTH_E2E_*.
//
// Every test gets a guard (an automatic fixture) that fails it on any
// uncaught page error or console error: the API serves the dashboard with a
// strict Content-Security-Policy, and Chromium reports each violation as a
// console error. API refusals a spec provokes on purpose (a 4xx on /v1/...)
// are the only console errors let through.
import AxeBuilder from '@axe-core/playwright';
import { test as base, expect, type APIRequestContext, type Page } from '@playwright/test';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export { expect };

function required(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the suite through the Go test (cd e2e && go test -run TestDashboardInChromium -v .)`);
  return v;
}

/** The stack's addresses. */
export const env = {
  get api() {
    return required('BERTH_E2E_API');
  },
  /** MQTT over TCP through the gateway, host:port. */
  get mqtt() {
    return required('BERTH_E2E_MQTT');
  },
  /** MQTT over WebSocket through the gateway, host:port (path /mqtt). */
  get ws() {
    return required('BERTH_E2E_WS');
  },
  get databaseURL() {
    return required('BERTH_E2E_DATABASE_URL');
  },
  /** A second API on the same database, without a Stripe key: payment disabled there. */
  get apiNoPayment() {
    return required('BERTH_E2E_API_NO_PAYMENT');
  },
  /** The secret the API verifies Stripe's webhooks with (the API at env.api takes payment through stripe-mock). */
  get stripeWebhookSecret() {
    return required('BERTH_E2E_STRIPE_WEBHOOK_SECRET');
  },
};

/** web/, where playwright.config.ts lives. */
export const webDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** A short random hex string for unique names. */
export function unique(bytes = 4): string {
  return randomBytes(bytes).toString('hex');
}

/** A console error that comes from an API refusal (4xx on /v1/...), which specs provoke on purpose. */
function isApiRefusal(text: string, url: string): boolean {
  return /^Failed to load resource: the server responded with a status of 4\d\d/.test(text) && /^https?:\/\/[^/]+\/v1\//.test(url);
}

export const test = base.extend<{ consoleGuard: void }>({
  consoleGuard: [
    async ({ page }, use, testInfo) => {
      const problems: string[] = [];
      page.on('console', (m) => {
        if (m.type() !== 'error') return;
        const url = m.location().url ?? '';
        if (isApiRefusal(m.text(), url)) return;
        problems.push(`console error: ${m.text()}${url ? ` (${url})` : ''}`);
      });
      page.on('pageerror', (e) => problems.push(`uncaught: ${e.stack ?? e.message}`));
      await use();
      if (problems.length) await testInfo.attach('console', { body: problems.join('\n') });
      expect(problems, 'console errors, CSP violations or uncaught page errors').toEqual([]);
    },
    { auto: true },
  ],
});

export interface Account {
  email: string;
  password: string;
  tenantId: string;
}

/** The tenant id in the page's URL (/tenants/{tid}/...). */
export function tenantOf(page: Page): string {
  const m = /^\/tenants\/([^/]+)/.exec(new URL(page.url()).pathname);
  if (!m) throw new Error(`no tenant in ${page.url()}`);
  return decodeURIComponent(m[1]);
}

/** Signs up a new account through the signup page and waits for the console. */
export async function signUpViaUI(page: Page): Promise<Account> {
  const email = `e2e-${unique(5)}@example.com`;
  const password = `correct horse ${unique(4)}`;
  await page.goto('/signup');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign up' }).click();
  await page.waitForURL(/\/tenants\/[^/]+\//);
  await expect(page.getByRole('navigation', { name: 'Pages' })).toBeVisible();
  return { email, password, tenantId: tenantOf(page) };
}

/** Opens a page from the left nav and waits for its heading. */
export async function openPage(page: Page, name: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name, exact: true }).click();
  await expect(page.getByRole('heading', { level: 1, name, exact: true })).toBeVisible();
}

/** Fails on axe violations of impact serious or critical, listing each. */
export async function expectNoSeriousA11yViolations(page: Page): Promise<void> {
  const r = await new AxeBuilder({ page }).analyze();
  const bad = r.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  expect(bad, `axe violations on ${new URL(page.url()).pathname}`).toEqual([]);
}

/** A full-page screenshot in web/test-results/screenshots/<project>/<name>.png. */
export async function shot(page: Page, name: string): Promise<string> {
  const dir = path.join(webDir, 'test-results', 'screenshots', test.info().project.name);
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/** Prints a measured figure; the Go test's log shows these lines. */
export function perf(line: string): void {
  console.log(`PERF ${line}`);
}

function hostPort(addr: string): [string, string] {
  const i = addr.lastIndexOf(':');
  return [addr.slice(0, i), addr.slice(i + 1)];
}

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs mosquitto_pub against the gateway with args; rejects on a non-zero exit. */
export async function mosquittoPub(args: string[], timeoutMs = 15_000): Promise<Run> {
  const [host, port] = hostPort(env.mqtt);
  const p = spawn('mosquitto_pub', ['-h', host, '-p', port, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (d) => (stdout += d));
  p.stderr.on('data', (d) => (stderr += d));
  const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => p.on('close', resolve));
  clearTimeout(timer);
  if (code !== 0) throw new Error(`mosquitto_pub ${args.join(' ')}: exit ${code}\n${stdout}${stderr}`);
  return { code, stdout, stderr };
}

/** A running mosquitto_sub. */
export interface Sub {
  proc: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

/** Starts mosquitto_sub against the gateway with args; stop() ends it. */
export function mosquittoSub(args: string[]): Sub {
  const [host, port] = hostPort(env.mqtt);
  const proc = spawn('mosquitto_sub', ['-h', host, '-p', port, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => proc.on('close', resolve));
  return {
    proc,
    output: () => out,
    exited,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

export interface ACL {
  pub: string[];
  sub: string[];
}

export interface CreatedCredential {
  id: string;
  username: string;
  password: string;
  name: string;
}

/**
 * Creates a device credential through the API with the page's session
 * (page.request shares the browser context's cookies).
 */
export async function createCredentialViaAPI(request: APIRequestContext, tid: string, acl: ACL, name = `device-${unique(3)}`): Promise<CreatedCredential> {
  const r = await request.post(`/v1/tenants/${encodeURIComponent(tid)}/credentials`, { data: { name, acl } });
  expect(r.status(), `create credential: ${await r.text()}`).toBe(201);
  const c = await r.json();
  return { id: c.id, username: c.username, password: c.password, name };
}

/** Runs SQL on the stack's database with psql; returns its stdout. */
export function psql(sql: string): string {
  const r = spawnSync('psql', [env.databaseURL, '-v', 'ON_ERROR_STOP=1', '-X', '-q', '-A', '-t', '-c', sql], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`psql: exit ${r.status}: ${r.stderr}${r.error ?? ''}`);
  return r.stdout.trim();
}

/** Connects the Inspector (already open) and subscribes it to '#' at QoS 0. */
export async function inspectorSubscribeAll(page: Page) {
  await page.getByRole('button', { name: 'Connect', exact: true }).click();
  await expect(page.getByRole('status').filter({ hasText: /^Connected$/ })).toBeVisible({ timeout: 15_000 });
  const subscribe = page.getByRole('form', { name: 'Subscribe' });
  await subscribe.getByLabel('Topic filter').fill('#');
  await subscribe.getByRole('button', { name: 'Subscribe' }).click();
  await expect(page.getByRole('list', { name: 'Active subscriptions' })).toContainText('granted QoS 0');
}
