// The Recipes page: the catalog, a recipe's keys and rules, and the
// experiment form generated from its schema: three mistakes shown beside
// their fields at once (the server's own check), fixed, submitted, and
// SUCCEEDED on the real agent. The Hugging Face page links a token and
// never shows it back.
import { test, expect } from '@playwright/test';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { asAdmin, hydrated, signIn, url } from './helpers';

const RECIPE = 'e2e-sft';
const FIXTURE = path.resolve(__dirname, '..', '..', 'recipe', 'tests', 'fixtures', 'sft.v1.toml');

test('an experiment from the Recipes page: each mistake beside its field, then a job that succeeds', async ({ page, request }) => {
  // With a key that takes one of a few values: the form offers them in a list.
  const source = fs.readFileSync(FIXTURE, 'utf8')
    .replace('name = "sft"', `name = "${RECIPE}"`)
    .replace('[template.env]\n', '[template.env]\nPRECISION = "${config.precision}"\n')
    .replace('[[rules]]', '[schema.properties.precision]\ntype = "string"\nenum = ["bf16", "fp16", "fp32"]\ndefault = "bf16"\n\n[[rules]]');
  const published = await request.post(url() + '/api/v1/recipes', { headers: asAdmin(), data: { source } });
  expect([200, 201], await published.text()).toContain(published.status());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'e2e-exp-'));
  fs.writeFileSync(path.join(dir, 'train.sh'), 'echo "lr=$LEARNING_RATE in $GPUCTL_EXP_DIR"\n');

  await signIn(page, `/recipes?recipe=${RECIPE}`);
  await hydrated(page);
  await expect(page.locator(`tr[data-recipe="${RECIPE}"]`)).toContainText('v1');
  await expect(page.getByTestId('recipe-keys')).toContainText('global_batch_size');
  await expect(page.getByTestId('recipe-rules')).toContainText('global_batch_size divisible by micro_batch_size × gpus');

  const form = page.getByTestId('experiment-form');
  await expect(form.locator('input[name="learning_rate"]')).toHaveValue('0.0001');
  await form.locator('input[name="base_model"]').fill('org/model');
  await form.locator('input[name="learning_rate"]').fill('3');
  await form.locator('input[name="global_batch_size"]').fill('60');
  await form.locator('input[name="warmup_steps"]').fill('5000');
  await form.locator('input[name="exp_dir"]').fill(dir);
  await page.getByTestId('experiment-check').click();
  await expect(page.getByTestId('error-config.learning_rate')).toContainText('greater than the maximum of 1');
  await expect(page.getByTestId('error-config.global_batch_size')).toContainText('must be divisible by micro_batch_size × gpus');
  await expect(page.getByTestId('error-config.warmup_steps')).toContainText('warmup_steps <= max_steps');
  await expect(page.getByTestId('experiment-refused')).toContainText('3 problems shown beside their fields');
  await page.screenshot({ path: 'artifacts/recipes-errors.png', fullPage: true });

  const precision = form.locator('select[name="precision"]');
  await expect(precision).toHaveValue('bf16');
  await expect(precision.locator('option')).toHaveText(['bf16', 'fp16', 'fp32']);
  await precision.selectOption('fp16');
  await form.locator('input[name="learning_rate"]').fill('0.0003');
  await form.locator('input[name="global_batch_size"]').fill('64');
  await form.locator('input[name="warmup_steps"]').fill('10');
  await page.getByTestId('experiment-check').click();
  await expect(page.getByTestId('experiment-valid')).toBeVisible();
  await page.getByTestId('experiment-submit').click();
  const link = page.getByTestId('experiment-job');
  await expect(link).toBeVisible();
  await expect(page.locator('.field-error')).toHaveCount(0);
  const jobId = (await link.textContent())!.trim();
  await expect
    .poll(async () => (await (await request.get(url() + `/api/v1/jobs/${jobId}`, { headers: asAdmin() })).json()).status,
      { timeout: 30_000 })
    .toBe('SUCCEEDED');
  const job = await (await request.get(url() + `/api/v1/jobs/${jobId}`, { headers: asAdmin() })).json();
  expect(job.spec.recipe.name).toBe(RECIPE);
  expect(job.spec.env.LEARNING_RATE).toBe('0.0003');
  expect(job.spec.env.PRECISION).toBe('fp16');
});

test('the Hugging Face page links a token without ever showing it back', async ({ page }) => {
  await signIn(page, '/hf');
  await hydrated(page);
  await expect(page.getByTestId('hub-status')).toContainText('checks no Hub');
  await expect(page.getByTestId('hub-linked')).toContainText('No Hub token linked');
  await page.getByTestId('hub-link').locator('input[name="token"]').fill('hf_e2e_secret_token');
  await page.getByTestId('hub-link').getByRole('button', { name: 'Link', exact: true }).click();
  await expect(page.getByTestId('hub-linked')).toContainText('is linked');
  expect(await page.content()).not.toContain('hf_e2e_secret_token');
  await page.getByTestId('hub-unlink').click();
  await expect(page.getByTestId('hub-linked')).toContainText('No Hub token linked');
});
