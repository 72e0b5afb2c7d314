// The console as users live in it: a real job on the real agent logs metrics
// (NaN included) through the real Python SDK and prints lines; the browser
// follows it from the dashboard to the run page, shares the view, and
// watches the log grow.
import { test, expect, Browser, Page, APIRequestContext } from '@playwright/test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MAINTENANCE, NODE, PYTHON } from '../global-setup';
import { hydrated, signIn, url } from './helpers';

const auth = () => ({ Authorization: `Bearer ${process.env.GPUPLANE_TOKEN}` });

/** A training script: 30 steps of train/loss (NaN at step 20 and at the last
 *  step) and train/lr through the SDK, then a line every 200 ms until `stop` exists. */
const SCRIPT = `
import math, os, sys, time
import gpuplane
run = gpuplane.init()
for step in range(1, 31):
    loss = float("nan") if step in (20, 30) else 2.0 / step
    run.log({"train/loss": loss, "train/lr": 0.001 * step}, step=step)
run.flush()
print("\\x1b[32mtraining started\\x1b[0m", flush=True)
print("Traceback (most recent call last): not really, just a line to jump to", file=sys.stderr, flush=True)
tick = 0
while not os.path.exists(sys.argv[1]):
    tick += 1
    print(f"tick {tick}", flush=True)
    time.sleep(0.2)
print("done", flush=True)
`;

async function submitJob(request: APIRequestContext, name: string, stop: string): Promise<{ id: string; run_id: string }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'console-job-'));
  writeFileSync(path.join(dir, 'train.py'), SCRIPT);
  const response = await request.post(url() + '/api/v1/jobs', {
    headers: auth(),
    data: { name, command: [PYTHON, 'train.py', stop], working_dir: dir, resources: { gpu: 1 }, time_limit_s: 5400 },
  });
  expect(response.status(), await response.text()).toBe(201);
  return response.json();
}

async function waitForPoints(request: APIRequestContext, runId: string) {
  await expect
    .poll(async () => {
      const run = await (await request.get(`${url()}/api/v1/runs/${runId}`, { headers: auth() })).json();
      return run.latest?.['train/loss']?.count ?? 0;
    }, { timeout: 30_000 })
    .toBe(30);
}

/** The tick numbers in the log view, in the order shown. */
async function allTicks(page: Page): Promise<number[]> {
  const text = await page.getByTestId('log-lines').innerText();
  return [...text.matchAll(/tick (\d+)/g)].map((m) => Number(m[1]));
}

async function lastTick(page: Page): Promise<number> {
  const ticks = await allTicks(page);
  return ticks.length ? Math.max(...ticks) : 0;
}

test('dashboard → jobs → job → run: NaN marker, non-finite badge, shared view, live log', async ({ page, browser, request }) => {
  // A whole user journey, 20-30 s on an idle machine: three times the usual limit.
  test.slow();
  const stop = path.join(mkdtempSync(path.join(tmpdir(), 'console-stop-')), 'stop');
  const job = await submitJob(request, 'console-e2e', stop);
  try {
    await followTheJob(page, browser, request, job);
  } finally {
    writeFileSync(stop, '');
  }
  await expect
    .poll(async () => (await (await request.get(`${url()}/api/v1/jobs/${job.id}`, { headers: auth() })).json()).status, { timeout: 30_000 })
    .toBe('SUCCEEDED');
});

async function followTheJob(page: Page, browser: Browser, request: APIRequestContext, job: { id: string; run_id: string }) {
  await waitForPoints(request, job.run_id);

  await signIn(page, '/');
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('nodes')).toContainText(NODE);
  await expect(page.getByTestId('nodes')).toContainText('simulated');
  await expect(page.getByTestId('queue-running')).toHaveText('1');
  await expect(page.getByTestId('maintenance')).toHaveText(MAINTENANCE);
  await page.screenshot({ path: 'artifacts/dashboard.png', fullPage: true });

  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Jobs' }).click();
  await expect(page).toHaveURL(url() + '/jobs');
  await page.getByRole('link', { name: 'console-e2e' }).first().click();
  await expect(page.getByRole('heading', { name: /console-e2e/ })).toBeVisible();
  await expect(page.getByTestId('attempts')).toContainText(NODE);
  await expect(page.getByTestId('time-limit')).toHaveText('1h30m per attempt');

  // The live log: new lines arrive while the page is open.
  const log = page.getByTestId('log-lines');
  await expect(log).toContainText('training started');
  await expect(log.locator('.ansi-2')).toHaveText('training started');
  await expect(page.getByTestId('log-connection')).toHaveText('live');
  // The server ends each stream after 2 s (GPUPLANE_STREAM_MAX_S); the page
  // reconnects with Last-Event-ID. Wait through a few reconnections.
  const seen = await lastTick(page);
  await expect.poll(() => lastTick(page), { timeout: 20_000 }).toBeGreaterThan(seen + 30);
  await expect(page.getByTestId('first-error')).toBeVisible();
  await page.screenshot({ path: 'artifacts/job-live-log.png', fullPage: true });

  // Across the reconnections, and the replay of the lines the page was
  // rendered with, each line is shown once: none lost, none twice.
  const ticks = await allTicks(page);
  expect(ticks).toEqual(Array.from({ length: ticks.length }, (_, i) => i + 1));

  // Streams, search and the agent's whole file.
  await page.getByRole('navigation', { name: 'Stream' }).getByRole('link', { name: 'stderr' }).click();
  await expect(page).toHaveURL(/log=stderr/);
  await expect(log.locator('.line.stderr')).toBeVisible();
  await expect(log.locator('.line.stdout').first()).toBeHidden();
  await page.getByRole('navigation', { name: 'Stream' }).getByRole('link', { name: 'merged' }).click();
  await page.getByLabel('Search the log').fill('tick 3');
  await page.getByLabel('Search the log').press('Enter');
  await expect(page).toHaveURL(/q=tick(\+|%20)3/);
  await hydrated(page);
  await expect(log.locator('mark').first()).toHaveText('tick 3');
  await page.getByRole('button', { name: 'Show full stdout' }).click();
  await expect(page.getByTestId('full-log')).toContainText('training started');

  await page.getByTestId('run-link').click();
  await expect(page).toHaveURL(`${url()}/runs/${job.run_id}`);
  const loss = page.locator('.metric-card[data-key="train/loss"]');
  await expect(loss.getByTestId('non-finite')).toHaveText('non-finite');
  await expect(loss).toContainText('NaN');
  await expect(page.locator('.metric-card[data-key="train/lr"]').getByTestId('non-finite')).toHaveCount(0);
  const lossChart = page.locator('figure.chart[data-key="train/loss"] svg');
  await expect(lossChart).toContainText('NaN at step 20');
  await expect(page.getByTestId('run-live')).toHaveText('live');
  await page.screenshot({ path: 'artifacts/run-nan.png', fullPage: true });
  // Each chart has its own URL, as SVG and PNG, for the signed-in (session cookie).
  const pngUrl = await page.locator('figure.chart[data-key="train/loss"]').getByTestId('chart-png').getAttribute('href');
  const png = await page.request.get(url() + pngUrl);
  expect(png.status()).toBe(200);
  expect(png.headers()['content-type']).toBe('image/png');
  writeFileSync('artifacts/chart-train-loss.png', await png.body());
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: 'artifacts/run-nan-phone-dark.png', fullPage: true });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1280, height: 720 });

  // Change the view; the address carries it.
  const form = page.getByTestId('chart-view');
  await form.getByLabel('Smoothing').fill('0.5');
  await form.getByLabel('From').fill('5');
  await form.getByLabel('To').fill('25');
  await form.getByLabel('train/loss').check();
  await form.getByRole('button', { name: 'Apply' }).click();
  await expect(page).toHaveURL(/smooth=0\.5/);
  await expect(page).toHaveURL(/metric=train%2Floss/);
  await expect(page.locator('figure.chart')).toHaveCount(1);
  await expect(page).toHaveURL(/from=5&to=25|to=25.*from=5|from=5.*to=25/);
  await hydrated(page);
  await page.getByRole('link', { name: 'Diagnosis' }).click();
  await expect(page).toHaveURL(/tab=diagnosis/);
  await expect(page.getByTestId('diagnosis')).toContainText('LOSS_NAN');
  await expect(lossChart).toContainText('NaN at step 20');
  const shared = page.url();
  const chartHere = await lossChart.innerHTML();

  // Another signed-in member opens the link and sees the same view.
  const other = await browser.newContext();
  const second = await other.newPage();
  await signIn(second, shared.slice(url().length));
  await expect(second).toHaveURL(shared);
  await expect(second.getByTestId('chart-view').getByLabel('Smoothing')).toHaveValue('0.5');
  await expect(second.getByTestId('chart-view').getByLabel('From')).toHaveValue('5');
  await expect(second.getByTestId('chart-view').getByLabel('train/loss')).toBeChecked();
  // Only the chosen metric is drawn.
  await expect(second.locator('figure.chart')).toHaveCount(1);
  await expect(second.getByTestId('diagnosis')).toContainText('LOSS_NAN');
  expect(await second.locator('figure.chart[data-key="train/loss"] svg').innerHTML()).toBe(chartHere);
  await second.screenshot({ path: 'artifacts/run-shared.png', fullPage: true });
  await other.close();


  // While the run goes on, the open page follows it: a finite value ends the badge.
  const more = await request.post(`${url()}/api/v1/runs/${job.run_id}/metrics`, {
    headers: auth(),
    data: { batch_id: 'e2e-late', points: [{ key: 'train/loss', step: 31, wall_time: Date.now() / 1000, value: 0.05 }] },
  });
  expect(more.status(), await more.text()).toBe(200);
  await expect(page.locator('.metric-card[data-key="train/loss"] .metric-value')).toHaveText('0.05');
  await expect(page.locator('.metric-card[data-key="train/loss"]').getByTestId('non-finite')).toHaveCount(0);
}
