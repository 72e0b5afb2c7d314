// Where a job came from: the git source gpuctl records at submit, shown on
// the job and run pages, with a warning when the agent ran another commit.
import { test, expect } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { signIn, url } from './helpers';

const SUBMITTED = '0123456789abcdef0123456789abcdef01234567';

test('job and run pages show the submitted source and warn when the agent ran another commit', async ({ page, request }) => {
  const headers = { authorization: `Bearer ${process.env.GPUPLANE_TOKEN}` };
  // The agent's working_dir: a checkout at another commit than the one submitted from.
  const dir = mkdtempSync(path.join(tmpdir(), 'traced-'));
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', '-C', dir, ...args]).toString().trim();
  git('init', '-q');
  writeFileSync(path.join(dir, 'train.py'), 'print(1)\n');
  git('add', 'train.py');
  git('commit', '-q', '-m', 'v1');
  const ran = git('rev-parse', 'HEAD');

  const submitted = await request.post(url() + '/api/v1/jobs', {
    headers,
    data: {
      name: 'traced', command: ['true'], working_dir: dir,
      git: { repository: 'https://git.example.com/team/repo.git', branch: 'main', commit: SUBMITTED, dirty: true },
    },
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const job = await submitted.json();
  await expect.poll(async () => (await (await request.get(url() + `/api/v1/jobs/${job.id}`, { headers })).json()).status)
    .toBe('SUCCEEDED');

  // No request fails on the way (a run without metrics once made the charts' read 500).
  const failed: string[] = [];
  page.on('response', (response) => { if (response.status() >= 500) failed.push(response.url()); });
  await signIn(page, `/jobs/${job.id}`);
  await expect(page.getByTestId('git-source')).toHaveText(
    'https://git.example.com/team/repo.git @ main 0123456789ab (dirty: uncommitted changes)');
  await expect(page.getByTestId('git-mismatch')).toHaveText(
    `attempt 1 ran commit ${ran.slice(0, 12)} but the job was submitted from 0123456789ab: the agent's working_dir is checked out at another commit`);
  await page.getByTestId('run-link').click();
  await expect(page.getByTestId('git-commit')).toHaveText(ran);
  await expect(page.getByTestId('git-source')).toContainText('@ main 0123456789ab');
  await expect(page.getByTestId('git-mismatch')).toContainText(`attempt 1 ran commit ${ran.slice(0, 12)}`);
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
  await page.waitForLoadState('networkidle');
  expect(failed).toEqual([]);
});
