// A run's config, tags and notes on its page, as the SDK or a job recorded them.
import { test, expect } from '@playwright/test';
import { asAdmin, signIn, url } from './helpers';

test('the run page shows the config, tags and notes', async ({ page, request }) => {
  const created = await request.post(url() + '/api/v1/runs', {
    headers: asAdmin(),
    data: {
      name: 'with-config',
      config: { lr: 0.001, optimizer: 'adam', 'model.depth': 12, amp: true },
      tags: ['baseline', 'sweep:lr'],
      notes: 'first try with warmup',
    },
  });
  expect(created.status(), await created.text()).toBe(201);
  const run = await created.json();

  await signIn(page, `/runs/${run.id}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('run-tags')).toHaveText('baseline sweep:lr');
  await expect(page.getByTestId('run-notes')).toHaveText('first try with warmup');
  const config = page.getByTestId('run-config');
  await expect(config.getByRole('row')).toHaveCount(5);
  await expect(config.getByRole('row', { name: 'lr 0.001' })).toBeVisible();
  await expect(config.getByRole('row', { name: 'model.depth 12' })).toBeVisible();
  await expect(config.getByRole('row', { name: 'optimizer adam' })).toBeVisible();
  await page.screenshot({ path: 'artifacts/run-config.png', fullPage: true });
});
