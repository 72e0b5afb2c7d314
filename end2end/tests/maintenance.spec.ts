// Maintenance mode from the console: an admin pauses dispatch, every queued
// job says why, and ending it dispatches at once. Quotas on the dashboard.
import { test, expect } from '@playwright/test';
import { signIn, url } from './helpers';
import { MAINTENANCE } from '../global-setup';

test('an admin pauses dispatch from the dashboard and queued jobs say why', async ({ page, request }) => {
  const headers = { authorization: `Bearer ${process.env.GPUPLANE_TOKEN}` };
  await signIn(page, '/');
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.getByLabel('Maintenance message').fill('Switch firmware until 14:00');
  await page.getByRole('button', { name: 'Pause dispatch for maintenance' }).click();
  await expect(page.getByTestId('maintenance')).toHaveText(
    'Maintenance: nothing new starts, running jobs continue. Switch firmware until 14:00');

  const submitted = await request.post(url() + '/api/v1/jobs', {
    headers, data: { name: 'waits-for-maintenance', command: ['true'] } });
  expect(submitted.status()).toBe(201);
  const job = await submitted.json();
  await expect.poll(async () => (await (await request.get(url() + `/api/v1/jobs/${job.id}`, { headers })).json()).queued_reason)
    .toMatch(/^maintenance: dispatch paused since .* by .*: Switch firmware until 14:00$/);
  await page.screenshot({ path: 'artifacts/maintenance.png', fullPage: true });

  await page.getByRole('button', { name: 'End maintenance: dispatch again' }).click();
  await expect(page.getByTestId('maintenance')).toHaveText(MAINTENANCE);
  await expect.poll(async () => (await (await request.get(url() + `/api/v1/jobs/${job.id}`, { headers })).json()).status)
    .toBe('SUCCEEDED');

  // Both switches are in the audit log, as the console user's session.
  const audit = await (await request.get(url() + '/api/v1/audit?target=cluster&limit=2', { headers })).json();
  expect(audit.items.map((e: { action: string; token: string; detail: string }) => [e.action, e.token, e.detail]))
    .toEqual([['maintenance.off', 'console', ''], ['maintenance.on', 'console', 'Switch firmware until 14:00']]);
  expect(audit.items[0].address).toBe('127.0.0.1');
});

test('the dashboard shows each quota with what is in use', async ({ page, request }) => {
  const headers = { authorization: `Bearer ${process.env.GPUPLANE_TOKEN}` };
  // Generous, so jobs of the other tests never wait on it.
  const set = await request.put(url() + '/api/v1/quotas/project/default', {
    headers, data: { max_gpus: 64, max_running_jobs: 100 } });
  expect(set.status(), await set.text()).toBe(200);
  try {
    await signIn(page, '/');
    await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
    const row = page.getByTestId('quotas').getByRole('row', { name: /project default/ });
    await expect(row).toContainText(/\d+ \/ 64/);
    await expect(row).toContainText(/\d+ \/ 100/);
    await page.screenshot({ path: 'artifacts/quotas.png', fullPage: true });
  } finally {
    const cleared = await request.delete(url() + '/api/v1/quotas/project/default', { headers });
    expect(cleared.status()).toBe(204);
  }
});
