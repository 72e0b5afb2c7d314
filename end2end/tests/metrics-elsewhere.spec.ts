// The run page says where a job's metrics went when they did not reach its
// run: a script that logs into another team's run has those points refused,
// and the page shows the METRICS_REFUSED notice above the charts, naming the
// quarantine file, instead of the generic "call run.log()" advice.
import { test, expect } from '@playwright/test';
import { PYTHON } from '../global-setup';
import { asAdmin, hydrated, signIn, url } from './helpers';

test('a run whose metrics the server refused says so above its charts', async ({ page, request }) => {
  const project = `elsewhere-${Date.now()}`;
  const created = await request.post(`${url()}/api/v1/projects`, { headers: asAdmin(), data: { name: project } });
  expect(created.status(), await created.text()).toBe(201);
  const theirs = await (
    await request.post(`${url()}/api/v1/runs`, { headers: asAdmin(), data: { project, name: 'their-run' } })
  ).json();
  const script = [
    'import os, gpuplane',
    `theirs = gpuplane.Run(os.environ["GPUCTL_SERVER"], os.environ["GPUCTL_TOKEN"], run_id="${theirs.id}")`,
    'theirs.log({"train/loss": 1.0}, step=0)',
    'theirs.finish()',
  ].join('\n');
  const submitted = await request.post(`${url()}/api/v1/jobs`, {
    headers: asAdmin(),
    data: { name: 'logs-elsewhere', command: [PYTHON, '-c', script] },
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const job = await submitted.json();
  await expect
    .poll(async () => (await (await request.get(`${url()}/api/v1/jobs/${job.id}`, { headers: asAdmin() })).json()).status,
      { timeout: 30_000 })
    .toBe('SUCCEEDED');

  await signIn(page, `/runs/${job.run_id}`);
  await hydrated(page);
  const notice = page.getByTestId('metrics-elsewhere');
  await expect(notice).toContainText('METRICS_REFUSED');
  await expect(notice).toContainText('quarantine');
  await expect(notice).toContainText('gpuctl sync --quarantined');
  await expect(page.getByTestId('no-metrics')).toContainText('the notice above says where');
});
