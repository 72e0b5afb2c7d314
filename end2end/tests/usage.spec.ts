// The Usage page: GPU-hours allocated and used as bars and a table, by
// project and by node, agreeing with GET /api/v1/usage.
import { test, expect } from '@playwright/test';
import { asAdmin, hydrated, signIn, url } from './helpers';

test('the usage page shows allocated and used GPU-hours by project and by node', async ({ page, request }) => {
  // A job that holds a GPU of the harness's agent for a second.
  const submitted = await request.post(url() + '/api/v1/jobs', {
    headers: asAdmin(),
    data: { name: 'e2e-usage', command: ['sleep', '1'], resources: { gpu: 1 } },
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const id = (await submitted.json()).id;
  await expect.poll(async () => (await (await request.get(url() + `/api/v1/jobs/${id}`, { headers: asAdmin() })).json()).status,
    { timeout: 30_000 }).toBe('SUCCEEDED');
  const api = await (await request.get(url() + '/api/v1/usage?by=project&since=30d', { headers: asAdmin() })).json();
  await signIn(page, '/usage');
  await hydrated(page);
  await expect(page.getByTestId('usage-chart')).toBeVisible();
  const total = page.locator('[data-testid="usage"] tr[data-key="total"]');
  await expect(total).toContainText(api.total.allocated_gpu_hours.toFixed(2));
  expect(api.rows.length).toBeGreaterThan(0);
  await expect(page.locator('[data-testid="usage-chart"] rect.bar-allocated').first()).toBeVisible();
  for (const row of api.rows) {
    await expect(page.locator(`[data-testid="usage"] tr[data-key="${row.key}"]`)).toContainText(row.used_gpu_hours.toFixed(2));
  }
  await page.getByTestId('usage-by').filter({ hasText: 'node' }).click();
  await expect(page).toHaveURL(/by=node/);
  await expect(page.locator('[data-testid="usage"] thead')).toContainText('node');
  await page.screenshot({ path: 'artifacts/usage.png', fullPage: true });
});
