// Starts a real gpuplane-server on a free port with a fresh data dir and a
// bootstrapped admin, and hands its URL and token to the tests through the
// environment. Returns the teardown that stops it.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { startIssuer, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET } from './oidc';
import { tmpdir } from 'node:os';
import path from 'node:path';

const root = path.resolve(__dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? path.join(root, 'target');
const serverBin = path.join(targetDir, 'debug', 'gpuplane-server');
const agentBin = path.join(targetDir, 'debug', 'gpuplane-agent');
/** The virtualenv `scripts/test.sh` makes, with the Python SDK installed. */
export const PYTHON = path.join(root, '.venv', 'bin', 'python');
/** The operators' notice the dashboard shows. */
export const MAINTENANCE = 'Driver upgrade Saturday 10:00 UTC';
/** The name of the agent's node (two simulated GPUs). */
export const NODE = 'e2e-node';
export const GPUCTL = path.join(targetDir, 'debug', 'gpuctl');

export const ADMIN_USER = 'e2e-admin';
export const ADMIN_PASSWORD = 'e2e-password-1234';

export default async function globalSetup(): Promise<() => Promise<void>> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'gpuplane-e2e-'));
  const admin = (args: string[], input?: string) =>
    execFileSync(serverBin, ['--data-dir', dataDir, 'admin', ...args], { input, encoding: 'utf8' }).trim();
  admin(['create-user', ADMIN_USER, '--admin', '--password-stdin'], ADMIN_PASSWORD + '\n');
  const token = admin(['create-token', '--user', ADMIN_USER, '--scope', 'write']);
  const agentToken = admin(['create-agent-token', '--name', NODE]);

  const oidc = await startIssuer();
  const server = spawn(
    serverBin,
    ['--data-dir', dataDir, 'serve', '--bind', '127.0.0.1:0', '--site-root', path.join(targetDir, 'site'),
     '--device-poll-interval-s', '1', '--alert-retry-initial-s', '1'],
    {
      stdio: ['ignore', 'inherit', 'pipe'],
      env: {
        ...process.env,
        GPUPLANE_LOG: 'info,rmcp=warn',
        GPUPLANE_OIDC_ISSUER: oidc.issuer,
        GPUPLANE_OIDC_CLIENT_ID: OIDC_CLIENT_ID,
        GPUPLANE_OIDC_CLIENT_SECRET: OIDC_CLIENT_SECRET,
        GPUPLANE_OIDC_ALLOWED_DOMAINS: 'example.com',
        GPUPLANE_OIDC_NAME: 'Test SSO',
        GPUPLANE_MAINTENANCE_MESSAGE: MAINTENANCE,
        // Streams end every 2 s, so pages prove they resume without losing or repeating anything.
        GPUPLANE_STREAM_MAX_S: '2',
        // The alert receivers of the tests run on this host: an admin allows webhooks into it.
        GPUPLANE_ALERT_PRIVATE_HOSTS: 'true',
        // No Hugging Face Hub here: empty turns the precheck off (the Rust tests use a stand-in).
        GPUPLANE_HF_ENDPOINT: '',
      },
    },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let log = '';
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30_000);
    server.stderr!.on('data', (chunk: Buffer) => {
      log += chunk.toString();
      const match = log.match(/listening on (http:\/\/\S+)/);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    server.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
  });
  server.stderr!.on('data', (chunk: Buffer) => process.stderr.write(chunk));

  // A real agent with simulated GPUs, for the pages that show jobs running.
  const agent = spawn(
    agentBin,
    ['--server', url, '--token', agentToken, '--name', NODE, '--fake-gpus', '2',
     // Telemetry every half second (sent every 2.5 s), so a short job has a System tab.
     '--telemetry-interval', '0.5',
     '--jobs-dir', mkdtempSync(path.join(tmpdir(), 'gpuplane-e2e-jobs-'))],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, GPUPLANE_LOG: 'warn' } },
  );

  await oidc.attach(url);
  process.env.GPUPLANE_URL = url;
  process.env.GPUPLANE_TOKEN = token;
  process.env.GPUPLANE_DATA_DIR = dataDir;

  return async () => {
    oidc.close();
    agent.kill('SIGTERM');
    await new Promise((resolve) => agent.once('exit', resolve));
    server.kill('SIGTERM');
    await new Promise((resolve) => server.once('exit', resolve));
  };
}
