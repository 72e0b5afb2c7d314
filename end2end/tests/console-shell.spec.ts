// The console shell: sign-in, server rendering, then hydration; the check
// button only works once hydrated.
import { test, expect } from '@playwright/test';
import { signIn, url } from './helpers';

test('signing in leads to the dashboard, which hydrates and asks the server', async ({ page }) => {
  await signIn(page, '/');
  await expect(page).toHaveURL(url() + '/');
  await expect(page.getByRole('heading', { name: 'Dashboard' })).toBeVisible();
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');

  await page.getByTestId('check-server').click();
  await expect(page.getByTestId('server-check-result')).toHaveText(/^Server \d+\.\d+\.\d+ answered: ok\.$/);
  await page.screenshot({ path: 'artifacts/dashboard-hydrated.png', fullPage: true });
});

test('a wrong password says so and keeps the user out', async ({ page }) => {
  await page.goto(url() + '/login');
  await page.getByLabel('User name').fill('e2e-admin');
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('login-message')).toHaveText('Wrong user name or password.');
  await page.screenshot({ path: 'artifacts/login-error.png' });
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('sign-in works and pages are readable, but the button does nothing', async ({ page }) => {
    await signIn(page, '/');
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
