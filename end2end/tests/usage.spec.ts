// The Usage page: GPU-hours allocated and used as bars and a table, by
// project and by node, agreeing with GET /api/v1/usage.
import { test, expect } from '@playwright/test';
import { asAdmin, hydrated, signIn, url } from './helpers';

test('the usage page shows allocated and used GPU-hours by project and by node', async ({ page, request }) => {
  const api = await (await request.get(url() + '/api/v1/usage?by=project&since=30d', { headers: asAdmin() })).json();
  await signIn(page, '/usage');
  await hydrated(page);
  await expect(page.getByTestId('usage-chart')).toBeVisible();
  const total = page.locator('[data-testid="usage"] tr[data-key="total"]');
  await expect(total).toContainText(api.total.allocated_gpu_hours.toFixed(2));
  for (const row of api.rows) {
    await expect(page.locator(`[data-testid="usage"] tr[data-key="${row.key}"]`)).toContainText(row.used_gpu_hours.toFixed(2));
  }
  await page.getByTestId('usage-by').filter({ hasText: 'node' }).click();
  await expect(page).toHaveURL(/by=node/);
  await expect(page.locator('[data-testid="usage"] thead')).toContainText('node');
  await page.screenshot({ path: 'artifacts/usage.png', fullPage: true });
});
