// The end of a run's life from the console: a project admin archives a run
// (it leaves the runs table, and the "Archived runs" filter finds it),
// brings it back, then deletes it after a confirmation. The dashboard shows
// what each project keeps.
import { test, expect } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';

test('a project admin archives, unarchives and deletes a run; the dashboard shows storage', async ({ page, request }) => {
  const headers = asAdmin();
  const created = await request.post(url() + '/api/v1/runs', { headers, data: { project: 'default', name: 'short-lived' } });
  expect(created.status()).toBe(201);
  const run = await created.json();
  const points = Array.from({ length: 30 }, (_, step) => ({ key: 'train/loss', step, wall_time: 1.7e9 + step, value: 1 / (1 + step) }));
  expect((await request.post(url() + `/api/v1/runs/${run.id}/metrics`, { headers, data: { batch_id: 'b', points } })).status()).toBe(200);

  await signIn(page, `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  const controls = page.getByTestId('run-lifecycle');
  await controls.getByRole('button', { name: 'Archive' }).click();
  await expect(page.getByTestId('run-archived')).toHaveText('archived');
  await page.goto(url() + '/runs?q=short-lived');
  await expect(page.getByText('short-lived')).toHaveCount(0);
  await page.getByLabel('Archived runs').check();
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page).toHaveURL(/archived=true/);
  await expect(page.getByRole('link', { name: 'short-lived' })).toBeVisible();

  await page.goto(url() + `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await controls.getByRole('button', { name: 'Unarchive' }).click();
  await expect(page.getByTestId('run-archived')).toHaveCount(0);
  await controls.getByRole('button', { name: 'Delete…' }).click();
  await controls.getByRole('button', { name: 'Delete for good' }).click();
  await expect(page).toHaveURL(url() + '/runs');
  expect((await request.get(url() + `/api/v1/runs/${run.id}`, { headers })).status()).toBe(404);

  await page.goto(url() + '/');
  const storage = page.getByTestId('usage').locator('tr[data-project="default"]');
  await expect(storage).toBeVisible();
  await expect(storage.locator('td').last()).toHaveText(/\d+(\.\d)? (B|KiB|MiB)/);
  await page.screenshot({ path: 'artifacts/storage.png', fullPage: true });
});
