// The console shell: sign-in, server rendering, then hydration.
import { test, expect } from '@playwright/test';
import { signIn, url } from './helpers';

test('signing in leads to the dashboard, which hydrates', async ({ page }) => {
  await signIn(page, '/');
  await expect(page).toHaveURL(url() + '/');
  await expect(page.getByRole('heading', { name: 'Dashboard' })).toBeVisible();
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('cluster')).toContainText('Nodes online');
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

  test('sign-in works and pages are readable from the first paint', async ({ page }) => {
    await signIn(page, '/');
    await expect(page.getByRole('heading', { name: 'Dashboard' })).toBeVisible();
    await expect(page.locator('body')).not.toHaveAttribute('data-hydrated', 'true');
    await expect(page.getByTestId('cluster')).toContainText('GPUs in use');
    await expect(page.getByTestId('nodes')).toContainText('simulated');
    await page.goto(url() + '/jobs');
    await expect(page.getByRole('heading', { name: 'Jobs' })).toBeVisible();
  });
});

test('unknown pages answer 404 with a way back', async ({ page }) => {
  const response = await page.goto(url() + '/no/such/page');
  expect(response?.status()).toBe(404);
  await expect(page.getByRole('heading', { name: 'Page not found' })).toBeVisible();
  await expect(page.getByRole('link', { name: 'Go to the dashboard' })).toBeVisible();
});

test('missing things and bad filters are explained in place, not a blank page', async ({ page }) => {
  await signIn(page, '/jobs/job_does_not_exist');
  await expect(page.getByRole('alert').first()).toContainText('job_does_not_exist');
  await page.goto(url() + '/runs/run_does_not_exist');
  await expect(page.getByRole('alert').first()).toContainText('run_does_not_exist');
  await page.goto(url() + '/events?severity=loud');
  await expect(page.getByRole('alert')).toContainText('severity');
});

test('nodes and events pages list and filter', async ({ page }) => {
  await signIn(page, '/nodes');
  await expect(page.getByTestId('nodes')).toContainText('simulated');
  await page.goto(url() + '/events');
  await page.getByLabel('Severity').selectOption('info');
  await page.getByRole('button', { name: 'Filter' }).click();
  await expect(page).toHaveURL(/severity=info/);
  await expect(page.getByRole('heading', { name: 'Events' })).toBeVisible();
  await page.screenshot({ path: 'artifacts/events.png', fullPage: true });
});
