// A sweep's page: its trials (values, states, links to runs), the best
// trial, its charts drawn from the values the trials logged, and for an
// editor pause and stop (after a confirmation that survives the page's
// 2-second refresh); a viewer reads it without buttons.
import { test, expect } from '@playwright/test';
import { asAdmin, hydrated, projectWith, signIn, url } from './helpers';

const PROJECT = 'e2e-sweeps';
const EDITOR = 'e2e-sweep-editor';
const VIEWER = 'e2e-sweep-viewer';
const PASSWORD = 'e2e-password-5678';

test('a sweep shows its trials, best trial and charts; an editor pauses and stops it, a viewer sees no buttons', async ({ page, browser, request }) => {
  await projectWith(request, PROJECT, [[EDITOR, 'editor'], [VIEWER, 'viewer']], PASSWORD);
  const file = {
    name: 'console-sweep', method: 'grid', project: PROJECT,
    metric: { name: 'loss', goal: 'minimize' },
    parameters: { lr: { values: [0.1, 0.3, 0.9] }, opt: { values: ['sgd', '<b>adam</b>'] } },
    max_trials: 3, max_concurrent: 3,
    job: { command: ['sleep', '300'] },
  };
  const created = await request.post(url() + '/api/v1/sweeps', { headers: asAdmin(), data: file });
  expect(created.status(), await created.text()).toBe(201);
  const sweepId = (await created.json()).id as string;
  try {
    // The trials log their loss (as their SDK would), lowest at lr 0.3.
    let trials: any[] = [];
    await expect.poll(async () => {
      trials = (await (await request.get(url() + `/api/v1/sweeps/${sweepId}`, { headers: asAdmin() })).json()).trials ?? [];
      return trials.length;
    }, { timeout: 30_000 }).toBe(3);
    for (const trial of trials) {
      const lr = trial.params.lr as number;
      const points = Array.from({ length: 5 }, (_, i) => ({ key: 'loss', step: i + 1, wall_time: 1.7e9 + i, value: (lr - 0.3) ** 2 + 1 / (i + 1) }));
      const logged = await request.post(url() + `/api/v1/runs/${trial.run_id}/metrics`, { headers: asAdmin(), data: { batch_id: `t${trial.number}`, points } });
      expect(logged.status(), await logged.text()).toBe(200);
    }

    await signIn(page, `/sweeps/${sweepId}`, EDITOR, PASSWORD);
    await hydrated(page);
    await expect(page.getByRole('heading', { level: 1 })).toHaveText('Sweep console-sweep');
    await expect(page.getByTestId('sweep-state')).toContainText('RUNNING');
    const rows = page.getByTestId('trials').locator('tbody tr');
    await expect(rows).toHaveCount(3);
    await expect(page.getByTestId('sweep-best')).toContainText('trial 2: 0.2', { timeout: 15_000 });
    await expect(page.getByTestId('sweep-parallel').locator('polyline')).toHaveCount(3);
    await expect(page.getByTestId('sweep-scatters').locator('figure')).toHaveCount(2);
    // A categorical value is text on the page, never markup.
    await expect(page.getByTestId('trials')).toContainText('<b>adam</b>');
    await expect(page.getByTestId('sweep-parallel').locator('b')).toHaveCount(0);
    await page.getByTestId('trials').locator('tbody tr').last().getByRole('link', { name: 'run' }).click();
    await expect(page).toHaveURL(new RegExp(`/runs/${trials[0].run_id}`));
    await page.goBack();
    await hydrated(page);

    // A viewer reads it, without buttons.
    const viewerContext = await browser.newContext();
    const viewerPage = await viewerContext.newPage();
    await signIn(viewerPage, `/sweeps/${sweepId}`, VIEWER, PASSWORD);
    await hydrated(viewerPage);
    await expect(viewerPage.getByTestId('trials').locator('tbody tr')).toHaveCount(3);
    await expect(viewerPage.getByTestId('stop-sweep')).toHaveCount(0);
    await viewerContext.close();

    // The sweeps list links to it; a trial's job page names its sweep.
    await page.goto(url() + '/sweeps');
    await page.getByTestId('sweeps').getByRole('link', { name: 'console-sweep' }).click();
    await expect(page).toHaveURL(new RegExp(`/sweeps/${sweepId}`));
    await hydrated(page);
    await page.getByTestId('pause-sweep').click();
    await expect(page.getByTestId('sweep-state')).toContainText('PAUSED');
    await page.getByTestId('stop-sweep').click();
    await page.waitForResponse((response) =>
      response.url().endsWith('/console/fn/api_get') &&
      decodeURIComponent(response.request().postData() ?? '').includes(`/api/v1/sweeps/${sweepId}`));
    await page.getByTestId('confirm-stop-sweep').click();
    await expect(page.getByTestId('sweep-state')).toContainText('STOPPED', { timeout: 30_000 });
    await expect(page.getByTestId('stop-sweep')).toHaveCount(0);
    await page.goto(url() + `/jobs/${trials[0].job_id}`);
    await page.getByTestId('job-sweep').getByRole('link', { name: sweepId }).click();
    await expect(page).toHaveURL(new RegExp(`/sweeps/${sweepId}`));
  } finally {
    await request.post(url() + `/api/v1/sweeps/${sweepId}/stop`, { headers: asAdmin(), data: { confirm: true } });
  }
});
