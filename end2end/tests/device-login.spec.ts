// The real `gpuctl login --device-flow` binary, approved or denied on the
// console's /device page in Chromium; then `gpuctl whoami` works (or not).
import { test, expect } from '@playwright/test';
import { ChildProcess, spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir, hostname } from 'node:os';
import path from 'node:path';
import { GPUCTL, ADMIN_USER } from '../global-setup';
import { signIn, url } from './helpers';

/** Starts `gpuctl login --device-flow`; resolves with the user code it prints. */
function startLogin(home: string): { cli: ChildProcess; code: Promise<string>; exit: Promise<number | null>; stderr: () => string } {
  const env = { ...process.env, GPUCTL_HOME: home };
  delete env.GPUCTL_TOKEN;
  delete env.GPUCTL_SERVER;
  const cli = spawn(GPUCTL, ['--server', url(), 'login', '--device-flow'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  const code = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no code printed:\n${stderr}`)), 20_000);
    cli.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = stderr.match(/enter the code ([A-Z]{4}-[A-Z]{4})/);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
  });
  const exit = new Promise<number | null>((resolve) => cli.on('exit', resolve));
  return { cli, code, exit, stderr: () => stderr };
}

test('a terminal signs in with a code approved in the browser', async ({ page }) => {
  const home = mkdtempSync(path.join(tmpdir(), 'gpuctl-home-'));
  const login = startLogin(home);
  const code = await login.code;

  await signIn(page, `/device?user_code=${code}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.getByTestId('device-code')).toHaveText(code);
  await expect(page.getByTestId('device-host')).toHaveText(hostname());
  await page.screenshot({ path: 'artifacts/device-approval.png', fullPage: true });
  await page.getByTestId('approve').click();
  await expect(page.getByTestId('device-result')).toHaveText('Approved: the terminal is signed in.');

  expect(await login.exit).toBe(0);
  const credentials = JSON.parse(readFileSync(path.join(home, 'credentials.json'), 'utf8'));
  expect(credentials.token).toMatch(/^gpp_/);
  const env = { ...process.env, GPUCTL_HOME: home };
  delete env.GPUCTL_TOKEN;
  delete env.GPUCTL_SERVER;
  const whoami = JSON.parse(execFileSync(GPUCTL, ['whoami', '--json'], { env, encoding: 'utf8' }));
  expect(whoami.user).toBe(ADMIN_USER);
  expect(whoami.token_name).toBe(`gpuctl on ${hostname()}`);
});

test('a denied code leaves the terminal signed out', async ({ page }) => {
  const home = mkdtempSync(path.join(tmpdir(), 'gpuctl-home-'));
  const login = startLogin(home);
  const code = await login.code;
  await signIn(page, `/device?user_code=${code}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.getByTestId('deny').click();
  await expect(page.getByTestId('device-result')).toHaveText('Denied: the terminal was refused.');
  expect(await login.exit).toBe(3);
  expect(login.stderr()).toContain('the sign-in was denied in the browser');
});

test('a wrong code says so on the page', async ({ page }) => {
  await signIn(page, '/device?user_code=BBBB-BBBB');
  await expect(page.getByTestId('device-error')).toContainText('no pending sign-in has this code');
});
