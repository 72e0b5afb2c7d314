// Alerts in the console: a run's alert goes to a real local webhook that
// refuses the first try; /alerts shows the delivery retried, then sent,
// with the subscription and channel it went through.
import { test, expect } from '@playwright/test';
import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { AddressInfo } from 'node:net';
import { asAdmin, signIn, url } from './helpers';

test('a delivery that failed once is retried and shown sent on /alerts', async ({ page, request }) => {
  const received: string[] = [];
  let tries = 0;
  const receiver = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (chunk) => { body += chunk; });
    req.on('end', () => {
      tries += 1;
      if (tries === 1) {
        res.writeHead(503).end('busy');
        return;
      }
      received.push(body);
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const port = (receiver.address() as AddressInfo).port;
  const headers = asAdmin();
  try {
    const channel = await request.post(url() + '/api/v1/alerts/channels', {
      headers, data: { name: 'e2e-hook', kind: 'webhook', url: `http://127.0.0.1:${port}/hook` } });
    expect(channel.status(), await channel.text()).toBe(201);
    const subscription = await request.post(url() + '/api/v1/alerts/subscriptions', {
      headers, data: { channel: 'e2e-hook', kinds: ['RUN_ALERT'], min_severity: 'info' } });
    expect(subscription.status(), await subscription.text()).toBe(201);
    const run = await (await request.post(url() + '/api/v1/runs', {
      headers, data: { project: 'default', name: 'alerting-run' } })).json();
    const raised = await request.post(url() + `/api/v1/runs/${run.id}/alerts`, {
      headers, data: { title: 'eval/accuracy dropped', text: '0.41 is below 0.5', level: 'warning' } });
    expect(raised.status(), await raised.text()).toBe(200);
    await expect.poll(() => received.length, { timeout: 20_000 }).toBe(1);
    expect(JSON.parse(received[0]).url).toBe(`${url()}/runs/${run.id}`);

    await signIn(page, `/alerts?run_id=${run.id}`);
    const row = page.getByTestId('deliveries').locator('tbody tr');
    await expect(row).toHaveCount(1);
    await expect(row).toContainText('sent');
    await expect(row).toContainText('e2e-hook');
    await expect(row).toContainText('RUN_ALERT');
    await expect(row).toContainText('eval/accuracy dropped: 0.41 is below 0.5');
    // Two tries: the refused one's error stays on record.
    await expect(row.locator('td').nth(4)).toHaveText('2');
    // The status only: what the receiver answered ("busy") is its own business.
    await expect(row).toContainText('answered 503 Service Unavailable');
    await expect(row).not.toContainText('busy');
    await expect(page.getByTestId('subscriptions')).toContainText("e2e-admin's jobs and runs");
    await expect(page.getByTestId('channels')).toContainText(`http://127.0.0.1:${port}/hook`);
    await page.screenshot({ path: 'artifacts/alerts.png', fullPage: true });

    // The filter is in the URL: failed deliveries of this run are none.
    await page.getByLabel('Status').selectOption('failed');
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect(page).toHaveURL(/status=failed/);
    await expect(page.getByText('No deliveries match.')).toBeVisible();
  } finally {
    await request.delete(url() + '/api/v1/alerts/channels/e2e-hook', { headers });
    receiver.close();
  }
});
