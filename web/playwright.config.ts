import { defineConfig } from '@playwright/test';

// The browser suite runs against a whole Berth stack that e2e/dashboard_test.go
// starts (`go test -run TestDashboardInChromium ./e2e/`); it hands the
// addresses over in BERTH_E2E_API, BERTH_E2E_MQTT, BERTH_E2E_WS and
// BERTH_E2E_DATABASE_URL. Debian's chromium is the browser: Playwright's
// own downloads are not used.
//
// Projects: desktop runs every spec but perf; mobile only the page smoke
// spec; perf runs alone afterwards (the Go test runs it as a second pass
// with one worker so the measurements do not compete for the CPU).
export default defineConfig({
  testDir: 'tests',
  outputDir: 'test-results/playwright',
  workers: 2,
  retries: 0,
  fullyParallel: false,
  forbidOnly: true,
  reporter: 'list',
  timeout: 60_000,
  expect: { timeout: 10_000 },
  use: {
    baseURL: process.env.BERTH_E2E_API,
    launchOptions: {
      executablePath: '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    },
    trace: 'off',
    screenshot: 'off',
    video: 'off',
  },
  projects: [
    { name: 'desktop', testIgnore: /perf\.spec\.ts/, use: { viewport: { width: 1280, height: 800 } } },
    { name: 'mobile', testMatch: /pages\.spec\.ts/, use: { viewport: { width: 390, height: 844 }, isMobile: false } },
    { name: 'perf', testMatch: /perf\.spec\.ts/, use: { viewport: { width: 1280, height: 800 } } },
  ],
});
