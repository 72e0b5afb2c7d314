// Browser benchmarks (not tests): `npx playwright test -c bench.config.ts`.
// Same server, agent and Chromium as the tests; they print figures.
import base from './playwright.config';
import { defineConfig } from '@playwright/test';

export default defineConfig({ ...base, testDir: './bench', testMatch: '**/*.bench.ts', reporter: 'list', timeout: 120_000 });
