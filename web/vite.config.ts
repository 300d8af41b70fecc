import { defineConfig } from 'vitest/config';
import preact from '@preact/preset-vite';

// The API serves dist/ (embedded with go:embed, see dashboard.go); `npm run
// dev` proxies /v1 to a running API so the pages reload as they are edited.
export default defineConfig({
  plugins: [preact()],
  build: {
    target: 'es2022',
    assetsDir: 'assets',
    sourcemap: false,
    modulePreload: { polyfill: false },
  },
  server: {
    proxy: { '/v1': process.env.BERTH_API_URL ?? 'http://127.0.0.1:8080' },
  },
  test: {
    environment: 'happy-dom',
    include: ['src/**/*.test.ts', 'src/**/*.test.tsx'],
  },
});
