// How long a line printed by a job takes to appear in an open job page:
// the job prints its own clock (ms since the epoch) every 50 ms; the page
// notes when each line is added to the DOM. Same machine, same clock.
import { test, expect } from '@playwright/test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PYTHON } from '../global-setup';
import { signIn, url } from '../tests/helpers';

const LINES = 200;
const SCRIPT = `
import sys, time
time.sleep(3)  # time for the page to open and connect
for i in range(${LINES}):
    print(f"stamp {time.time() * 1000:.1f}", flush=True)
    time.sleep(0.05)
`;

test('live log latency', async ({ page, request }) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-live-'));
  writeFileSync(path.join(dir, 'stamps.py'), SCRIPT);
  const response = await request.post(url() + '/api/v1/jobs', {
    headers: { Authorization: `Bearer ${process.env.GPUPLANE_TOKEN}` },
    data: { name: 'live-log-bench', command: [PYTHON, 'stamps.py'], working_dir: dir },
  });
  expect(response.status()).toBe(201);
  const job = await response.json();
  await signIn(page, `/jobs/${job.id}`);
  await expect(page.getByTestId('log-connection')).toHaveText('live');
  await page.evaluate(() => {
    const seen: number[] = [];
    (window as any).latencies = seen;
    const lines = document.querySelector('[data-testid="log-lines"]')!;
    new MutationObserver((mutations) => {
      const now = Date.now();
      for (const mutation of mutations) {
        mutation.addedNodes.forEach((node) => {
          const match = (node.textContent ?? '').match(/stamp (\d+\.\d)/);
          if (match) seen.push(now - Number(match[1]));
        });
      }
    }).observe(lines, { childList: true, subtree: true });
  });
  await expect.poll(() => page.evaluate(() => (window as any).latencies.length), { timeout: 60_000 }).toBe(LINES);
  const latencies: number[] = (await page.evaluate(() => (window as any).latencies)).sort((a: number, b: number) => a - b);
  const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.round((latencies.length - 1) * p))];
  console.log(`console: live log, ${LINES} lines printed 50 ms apart by a job, printed → shown in Chromium: p50 ${at(0.5).toFixed(0)} ms, p95 ${at(0.95).toFixed(0)} ms, max ${at(1).toFixed(0)} ms`);
});
