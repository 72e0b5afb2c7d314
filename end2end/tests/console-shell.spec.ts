// The console shell: server-rendered, then hydrated; the check button only works once hydrated.
import { test, expect } from '@playwright/test';

const url = () => process.env.GPUPLANE_URL!;

test('the dashboard hydrates and its button asks the server', async ({ page }) => {
  await page.goto(url() + '/');
  await expect(page.getByRole('heading', { name: 'Dashboard' })).toBeVisible();
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');

  await page.getByTestId('check-server').click();
  await expect(page.getByTestId('server-check-result')).toHaveText(/^Server \d+\.\d+\.\d+ answered: ok\.$/);
  await page.screenshot({ path: 'artifacts/dashboard-hydrated.png', fullPage: true });
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('the page is readable but the button does nothing', async ({ page }) => {
    await page.goto(url() + '/');
    await expect(page.getByRole('heading', { name: 'Dashboard' })).toBeVisible();
    await expect(page.locator('body')).not.toHaveAttribute('data-hydrated', 'true');
    await page.getByTestId('check-server').click();
    // Give a (non-existent) handler time to act before checking nothing changed.
    await page.waitForTimeout(500);
    await expect(page.getByTestId('server-check-result')).toHaveText('Not checked yet.');
  });
});

test('unknown pages answer 404 with a way back', async ({ page }) => {
  const response = await page.goto(url() + '/no/such/page');
  expect(response?.status()).toBe(404);
  await expect(page.getByRole('heading', { name: 'Page not found' })).toBeVisible();
  await expect(page.getByRole('link', { name: 'Go to the dashboard' })).toBeVisible();
});
