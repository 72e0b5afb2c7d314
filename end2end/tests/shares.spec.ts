// Share links: an editor makes a read-only link on the run page's Share
// tab; someone without an account opens it in a fresh browser and sees the
// run's page, its chart and the job's real output; the view is counted;
// after a revoke the link is gone.
import { test, expect } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';

const PYTHON = process.env.PYTHON ?? 'python3';

test('a run shared by link opens without an account until it is revoked', async ({ page, browser, request }) => {
  const headers = asAdmin();
  const code = [
    'import json, os, urllib.request',
    'print("epoch 1: loss 0.50", flush=True)',
    'body = {"batch_id": "b", "points": [{"key": "train/loss", "step": s, "wall_time": 1.7e9 + s, "value": 1 / (1 + s)} for s in range(40)]}',
    'request = urllib.request.Request(os.environ["GPUCTL_SERVER"] + "/api/v1/runs/" + os.environ["GPUCTL_RUN_ID"] + "/metrics",',
    '  data=json.dumps(body).encode(), headers={"Authorization": "Bearer " + os.environ["GPUCTL_TOKEN"], "Content-Type": "application/json"})',
    'urllib.request.urlopen(request)',
    'print("saved the model", flush=True)',
  ].join('\n');
  const submitted = await request.post(url() + '/api/v1/jobs', {
    headers, data: { name: 'shared-job', command: [PYTHON, '-c', code], resources: { gpu: 1 } } });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const job = await submitted.json();
  await expect.poll(async () => (await (await request.get(`${url()}/api/v1/jobs/${job.id}`, { headers })).json()).status,
    { timeout: 30_000 }).toBe('SUCCEEDED');
  await expect.poll(async () => (await (await request.get(`${url()}/api/v1/jobs/${job.id}/logs`, { headers })).json()).lines.length,
    { timeout: 15_000 }).toBe(2);

  await signIn(page, `/runs/${job.run_id}?tab=share`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByText('No share links.')).toBeVisible();
  await page.getByLabel('Expires in (days, 1–90)').fill('3');
  await page.getByRole('button', { name: 'Make a read-only link' }).click();
  const shareUrl = (await page.getByTestId('share-url').textContent())!;
  expect(shareUrl).toMatch(new RegExp(`^${url()}/s/gps_[A-Za-z0-9_-]{43}$`));
  const row = page.getByTestId('share-links').locator('tbody tr');
  await expect(row).toHaveCount(1);
  await expect(row).toContainText('open');
  await expect(row).toContainText('e2e-admin');

  // Someone without an account, in a browser of their own.
  const stranger = await (await browser.newContext()).newPage();
  const opened = await stranger.goto(shareUrl);
  expect(opened!.status()).toBe(200);
  await expect(stranger.getByRole('heading', { level: 1 })).toHaveText('shared-job');
  await expect(stranger.getByTestId('shared-status')).toHaveText('SUCCEEDED');
  await expect(stranger.getByTestId('shared-latest')).toContainText('train/loss');
  await expect(stranger.getByTestId('shared-log')).toHaveText('epoch 1: loss 0.50\nsaved the model\n');
  const chart = stranger.locator('img[alt="train/loss"]');
  await expect.poll(() => chart.evaluate((img: HTMLImageElement) => img.complete && img.naturalWidth)).toBeGreaterThan(0);
  // Nothing else of the console opens for them.
  await stranger.goto(url() + `/runs/${job.run_id}`);
  await expect(stranger).toHaveURL(/\/login\?next=/);
  await stranger.goto(shareUrl);
  await stranger.screenshot({ path: 'artifacts/shared-run.png', fullPage: true });

  // The views are counted on the Share tab; revoking closes the link.
  await page.reload();
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(row.locator('td').nth(5)).toHaveText('4');
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row).toContainText('revoked');
  await expect(row.getByRole('button', { name: 'Revoke' })).toHaveCount(0);
  const closed = await stranger.goto(shareUrl);
  expect(closed!.status()).toBe(404);
  await expect(stranger.getByRole('heading', { level: 1 })).toHaveText('Link not found');
});
