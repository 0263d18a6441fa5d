// The admin console in a real headless Chromium (playwright-core driving
// Debian's /usr/bin/chromium). Starts the hookgate binary on a temp SQLite
// config and a loopback node target, sends signed Stripe events (one target
// fails), then: login, find an event by id, open it and see its attempts,
// replay the dead delivery from the console and see the target receive it;
// "replay all matching" shows a plan (cancelled: nothing replayed; confirmed:
// a progress bar to done) and the audit log names the token;
// the overview says which sources sign their event id and type (Stripe
// does, a GitHub source does not).
// Then reconciliation for real: a loopback fake of Stripe's events API has
// one more event than the gateway received, `hookgate reconcile` (a child
// process, same config) recovers it, and the console shows it with the
// "recovered" badge and finds it with the Origin filter. Last, a request
// signed with a secret the gateway lacks is refused, listed in the Refused
// view, and re-verified there after the secret is added and reloaded; two
// more are re-verified by "re-verify all matching" (a plan, then a run).
// Screenshots go to target/browser-artifacts/. Everything it starts is
// stopped by PID; the whole run is bounded by DEADLINE_MS.
//
// Run: scripts/browser-test.sh (builds the binary, installs this folder's
// locked dependencies). Env: HOOKGATE_BIN (default target/debug/hookgate),
// CHROMIUM (default /usr/bin/chromium).

import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = process.env.HOOKGATE_BIN || join(ROOT, 'target/debug/hookgate');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = join(ROOT, 'target/browser-artifacts');
const DEADLINE_MS = 120_000;
const STRIPE_SECRET = 'whsec_browser_test_secret';
const ADMIN_TOKEN = randomBytes(18).toString('hex');
// The `rotated` source's secret before and after the provider rotated it.
const ROTATED_OLD = 'whsec_browser_before_rotation';
const ROTATED_NEW = 'whsec_browser_after_rotation';
const ROTATED_LATER = 'whsec_browser_later_rotation';
const STRIPE_API_KEY = `rk_test_${randomBytes(12).toString('hex')}`;

let passed = 0;
let failed = 0;
const cleanups = [];

async function step(name, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`not ok - ${name}\n  ${String(e && e.stack || e).split('\n').join('\n  ')}`);
    throw e;
  }
}

function assert(cond, msg) { if (!cond) throw new Error(msg); }

async function until(check, what, ms = 15_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A loopback target: `/billing` answers 200, `/flaky` 500 until `flaky.ok`. */
function startTarget() {
  const got = { billing: [], flaky: [] };
  const flaky = { ok: false };
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const name = req.url.slice(1);
      const id = req.headers['hookgate-event-id'];
      if (got[name]) got[name].push(id);
      res.statusCode = name === 'flaky' && !flaky.ok ? 500 : 200;
      res.end();
    });
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok({ server, got, flaky, port: server.address().port })));
}

/**
 * A loopback Stripe API with what reconciliation reads: `GET /v1/events`
 * (https://docs.stripe.com/api/events/list): `created[gte]`, `limit`
 * (1..100), `starting_after`, newest first, answered as
 * `{object: "list", url, has_more, data}`; 401 unless
 * `Authorization: Bearer <key>` (https://docs.stripe.com/api/authentication).
 * `events` is what Stripe has; `calls` records each request.
 */
function startStripe(key) {
  const events = [];
  const calls = [];
  const error = (res, status, type, message) => {
    res.statusCode = status;
    res.end(JSON.stringify({ error: { type, message } }));
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    const authorized = req.headers.authorization === `Bearer ${key}`;
    calls.push({ method: req.method, path: url.pathname, authorized });
    res.setHeader('content-type', 'application/json');
    if (!authorized) return error(res, 401, 'invalid_request_error', 'Invalid API Key provided.');
    if (req.method !== 'GET' || url.pathname !== '/v1/events') {
      return error(res, 404, 'invalid_request_error', 'Unrecognized request URL.');
    }
    const gte = Number(url.searchParams.get('created[gte]') || 0);
    const limit = Math.min(Math.max(Number(url.searchParams.get('limit') || 10), 1), 100);
    let list = events.filter((e) => e.created >= gte).sort((a, b) => b.created - a.created);
    const after = url.searchParams.get('starting_after');
    if (after) {
      const i = list.findIndex((e) => e.id === after);
      if (i < 0) return error(res, 400, 'invalid_request_error', `No such event: '${after}'`);
      list = list.slice(i + 1);
    }
    res.end(JSON.stringify({ object: 'list', url: '/v1/events', has_more: list.length > limit, data: list.slice(0, limit) }));
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok({ server, events, calls, port: server.address().port })));
}

/** An event object as the list returns it (https://docs.stripe.com/api/events/object). */
function stripeEvent(id, type, created) {
  return {
    id,
    object: 'event',
    api_version: '2024-06-20',
    created,
    data: { object: { id: `in_${id.slice(4)}`, object: 'invoice', status: 'paid' } },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
  };
}

/** Runs `BIN args` to its end (killed by PID past `ms`): {code, stdout, stderr}. */
function runHookgate(args, ms) {
  const child = spawn(BIN, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...withoutBackends(process.env), RUST_LOG: 'warn' },
  });
  cleanups.push(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`hookgate ${args[0]} still running after ${ms} ms`));
    }, ms);
    child.on('close', (code) => { clearTimeout(timer); ok({ code, stdout, stderr }); });
  });
}

/** This environment without DATABASE_URL / REDIS_URL (the temp config decides). */
function withoutBackends(env) {
  const { DATABASE_URL, REDIS_URL, ...rest } = env;
  return rest;
}

function freePort() {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => ok(p)); });
  });
}

function stripeHeaders(body, secret = STRIPE_SECRET) {
  const t = Math.floor(Date.now() / 1000);
  const sig = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
  return { 'content-type': 'application/json', 'stripe-signature': `t=${t},v1=${sig}` };
}

async function main() {
  const target = await startTarget();
  cleanups.push(() => target.server.close());
  const stripe = await startStripe(STRIPE_API_KEY);
  cleanups.push(() => stripe.server.close());
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const dir = mkdtempSync(join(tmpdir(), 'hookgate-browser-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const config = join(dir, 'hookgate.toml');
  const configText = `
[server]
listen = "127.0.0.1:${port}"
admin_token = "${ADMIN_TOKEN}"
shutdown_grace = "2s"
[storage]
database_url = "sqlite://${join(dir, 'hookgate.db')}"
[dedup]
stats_flush_interval = "200ms"
[delivery]
poll_interval = "200ms"
backoff_base = "20ms"
backoff_max = "200ms"
[sources.stripe]
provider = "stripe"
secrets = ["${STRIPE_SECRET}"]
targets = ["billing", "flaky"]
[sources.stripe.reconcile]
api_key = "${STRIPE_API_KEY}"
api_base = "http://127.0.0.1:${stripe.port}"
interval = "1h"
[sources.github]
provider = "github"
secrets = ["github-browser-secret"]
[targets.billing]
url = "http://127.0.0.1:${target.port}/billing"
[targets.flaky]
url = "http://127.0.0.1:${target.port}/flaky"
max_attempts = 1
[sources.rotated]
provider = "stripe"
secrets = ["${ROTATED_OLD}"]
[refused]
capture_body = true
`;
  writeFileSync(config, configText);
  const gateway = spawn(BIN, ['serve', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...withoutBackends(process.env), RUST_LOG: 'warn' },
  });
  let log = '';
  gateway.stdout.on('data', (d) => { log += d; });
  gateway.stderr.on('data', (d) => { log += d; });
  cleanups.push(() => { if (gateway.exitCode === null) gateway.kill('SIGTERM'); });
  // The token and the API key must never reach the gateway's logs.
  cleanups.push(() => { if (log.includes(ADMIN_TOKEN)) { failed += 1; console.log('not ok - admin token found in gateway logs'); } });
  cleanups.push(() => { if (log.includes(STRIPE_API_KEY)) { failed += 1; console.log('not ok - Stripe API key found in gateway logs'); } });

  await step('gateway starts', () => until(async () => {
    if (gateway.exitCode !== null) throw new Error(`gateway exited: ${log}`);
    try { return (await fetch(`${base}/healthz`)).ok; } catch { return false; }
  }, 'gateway /healthz'));

  const ids = ['evt_browser_001', 'evt_browser_002', 'evt_browser_found'];
  await step('signed events are accepted', async () => {
    for (const [i, id] of ids.entries()) {
      const body = JSON.stringify({ id, object: 'event', type: i === 2 ? 'invoice.paid' : 'charge.succeeded',
        data: { object: { id: `pi_browser_${i}`, customer: 'cus_browser' } } });
      const r = await fetch(`${base}/webhooks/stripe`, { method: 'POST', headers: stripeHeaders(body), body });
      assert(r.status === 200 && r.headers.get('hookgate-dedup') === 'new', `event ${id}: ${r.status}`);
    }
    await until(() => target.got.billing.length === 3 && target.got.flaky.length === 3, 'first deliveries');
  });

  await step('console headers are strict', async () => {
    const r = await fetch(`${base}/console/`);
    const csp = r.headers.get('content-security-policy') || '';
    assert(csp.includes("default-src 'self'") && csp.includes("frame-ancestors 'none'"), csp);
    assert(!csp.includes('unsafe-inline'), csp);
    assert(r.headers.get('x-frame-options') === 'DENY', 'x-frame-options');
    assert(r.headers.get('referrer-policy') === 'no-referrer', 'referrer-policy');
  });

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  cleanups.push(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1366, height: 860 } });
  const violations = [];
  page.on('console', (m) => { if (/Content Security Policy|Refused/.test(m.text())) violations.push(m.text()); });
  page.on('dialog', (d) => d.accept());
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  mkdirSync(ARTIFACTS, { recursive: true });

  await step('without a token only the login shows', async () => {
    await page.goto(`${base}/console/#/events`);
    await page.locator('#token').waitFor({ state: 'visible' });
    assert(await page.locator('#nav').isHidden(), 'nav hidden');
    assert(await page.locator('#view-events').isHidden(), 'events hidden');
  });

  await step('a wrong token is refused, the right one signs in', async () => {
    await page.fill('#token', 'not-the-token');
    await page.press('#token', 'Enter');
    await page.locator('#login-error', { hasText: 'Wrong token' }).waitFor();
    await page.fill('#token', ADMIN_TOKEN);
    await page.click('#login-form button[type=submit]');
    await page.locator('#nav').waitFor({ state: 'visible' });
    const stored = await page.evaluate(() => sessionStorage.getItem('hookgate.admin_token'));
    assert(stored === ADMIN_TOKEN, 'token kept in sessionStorage');
    assert(!(await page.context().cookies()).length, 'no cookie set');
  });

  await step('overview shows sources and targets', async () => {
    await page.goto(`${base}/console/#/overview`);
    await page.locator('#sources-table tbody tr', { hasText: 'stripe' }).waitFor();
    await page.locator('#targets-table tbody tr', { hasText: 'flaky' }).waitFor();
    await page.screenshot({ path: join(ARTIFACTS, 'overview.png'), fullPage: true });
  });

  await step('overview lists a healthy and a failing target with their numbers', async () => {
    // flaky answered 500 three times in a row: failing; billing delivered.
    await page.locator('#targets-table tr[data-target=billing] td[data-health=healthy]').waitFor();
    await page.locator('#targets-table tr[data-target=flaky] td[data-health=failing]', { hasText: 'failing since' }).waitFor();
    const flaky = await page.locator('#targets-table tr[data-target=flaky]').innerText();
    assert(flaky.includes('0 %'), `flaky success rate: ${flaky}`);
    await until(async () => (await page.locator('#targets-table tr[data-target=billing]').innerText()).includes('100 %'),
      'billing success rate (counters flushed)', 20_000);
    assert(await page.locator('#targets-table tr[data-target=billing] svg.chart').count() === 1, 'a chart per target');
    await page.screenshot({ path: join(ARTIFACTS, 'overview-targets.png'), fullPage: true });
  });

  await step('the chart window changes and reads the series API', async () => {
    const asked = requests.length;
    await page.click('.window button[data-window="24h"]');
    await page.locator('.window button.active[data-window="24h"]').waitFor();
    assert(requests.slice(asked).some((u) => u.includes('/admin/stats/series?window=24h')), 'series asked for 24h');
    // 24 h in 10-minute buckets: the axis says so, the points carry tooltips.
    await page.locator('#sources-table tr[data-source=stripe] svg.chart text', { hasText: 'per 10 min' }).waitFor();
    const tip = await page.locator('#sources-table tr[data-source=stripe] svg.chart circle.received title').first().textContent();
    assert(/\d{4}-\d\d-\d\d \d\d:\d\dZ \+10 min: \d+ received/.test(tip), tip);
    await page.screenshot({ path: join(ARTIFACTS, 'overview-24h.png'), fullPage: true });
  });

  await step('overview shows whether each source\'s event id and type are signed', async () => {
    const cover = async (source, fact) => {
      const tag = page.locator('#sources-table tbody tr', { hasText: source }).locator(`span.cover[data-fact=${fact}]`);
      return { cover: await tag.getAttribute('data-cover'), text: await tag.innerText(), title: await tag.getAttribute('title') };
    };
    // Stripe signs the body, which holds both.
    const sid = await cover('stripe', 'id');
    const stype = await cover('stripe', 'type');
    assert(sid.cover === 'signed' && sid.text === 'id signed', JSON.stringify(sid));
    assert(stype.cover === 'signed' && stype.text === 'type signed', JSON.stringify(stype));
    // GitHub signs the body only: the delivery GUID and event name are headers.
    const gid = await cover('github', 'id');
    const gtype = await cover('github', 'type');
    assert(gid.cover === 'unsigned' && gid.title.includes('header:x-github-delivery'), JSON.stringify(gid));
    assert(gtype.cover === 'unsigned' && gtype.title.includes('header:x-github-event'), JSON.stringify(gtype));
  });

  await step('"/" focuses search and finds an event by id', async () => {
    await page.click('nav a[data-view=events]');
    await page.locator('#events-table tbody tr').first().waitFor();
    // Nothing focused, as after reading the page; the shortcut focuses the
    // search box on the next tick, so wait for it rather than race it.
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    await page.keyboard.press('/');
    await until(async () => (await page.evaluate(() => document.activeElement && document.activeElement.name)) === 'q',
      '"/" to focus the search box');
    await page.keyboard.type('evt_browser_f');
    await until(async () => (await page.locator('#events-table tbody tr').count()) === 1
      && (await page.locator('#events-table tbody').innerText()).includes('evt_browser_found'), 'one search hit');
    await page.screenshot({ path: join(ARTIFACTS, 'events.png'), fullPage: true });
  });

  await step('finds events by the object they are about', async () => {
    await page.goto(`${base}/console/#/events`);
    await page.locator('#events-table tbody tr').first().waitFor();
    await page.fill('#events-filter-q', '');
    await page.fill('#events-filter-object', 'pi_browser_1');
    await page.press('#events-filter-object', 'Enter');
    await until(async () => (await page.locator('#events-table tbody tr').count()) === 1
      && (await page.locator('#events-table tbody').innerText()).includes('evt_browser_002'), 'one object hit');
    const row = await page.locator('#events-table tbody tr').innerText();
    assert(/1 attempt\b/.test(row) && !row.includes('×'), `attempts, not deliveries: ${row}`);
    await page.screenshot({ path: join(ARTIFACTS, 'events-by-object.png'), fullPage: true });
    await page.fill('#events-filter-object', '');
    await page.press('#events-filter-object', 'Enter');
    await page.click('nav a[data-view=events]');
  });

  await step('event detail shows attempts per target and redacted headers', async () => {
    await page.click('a.event-link:has-text("evt_browser_found")');
    await page.locator('#event-title', { hasText: 'evt_browser_found' }).waitFor();
    await page.locator('ol.timeline[data-target=billing] li', { hasText: '200' }).waitFor();
    await page.locator('ol.timeline[data-target=flaky] li', { hasText: '500' }).waitFor();
    const headers = await page.locator('#event-headers').innerText();
    assert(/stripe-signature\s+\[redacted\]/.test(headers), headers);
    assert((await page.locator('#event-body').innerText()).includes('"invoice.paid"'), 'pretty body');
    await page.screenshot({ path: join(ARTIFACTS, 'event.png'), fullPage: true });
  });

  await step('replaying the dead delivery from the console reaches the target', async () => {
    target.flaky.ok = true;
    await page.click('nav a[data-view=dead]');
    const row = page.locator('#dead-table tbody tr', { hasText: 'evt_browser_found' });
    await row.waitFor();
    assert((await page.locator('#dead-table tbody tr').count()) === 3, 'three dead deliveries');
    await row.locator('button.replay-one').click();
    await page.locator('#dead-message', { hasText: 'Queued 1' }).waitFor();
    await until(() => target.got.flaky.filter((id) => id === 'evt_browser_found').length === 2, 'redelivered event');
    assert(target.got.flaky.length === 4, `only that one was replayed: ${target.got.flaky}`);
    await until(async () => (await page.locator('#dead-table tbody tr').count()) === 2, 'dead list refresh');
  });

  await step('"replay all matching" shows a plan per source and target; Cancel replays nothing', async () => {
    await page.click('#replay-all');
    await page.locator('#bulk-panel[data-state=planned]').waitFor();
    const summary = await page.locator('#bulk-summary').innerText();
    assert(summary.startsWith('2 dead deliveries of 2 events'), summary);
    const targets = await page.locator('#bulk-targets tbody').innerText();
    assert(/flaky\s+2/.test(targets), targets);
    const sources = await page.locator('#bulk-sources tbody').innerText();
    assert(/stripe\s+2/.test(sources), sources);
    await page.screenshot({ path: join(ARTIFACTS, 'bulk-plan.png'), fullPage: true });
    await page.click('#bulk-discard');
    await page.locator('#dead-message', { hasText: 'nothing was replayed' }).waitFor();
    assert(await page.locator('#bulk-panel').isHidden(), 'plan panel closed');
    await new Promise((r) => setTimeout(r, 1000));
    assert(target.got.flaky.length === 4, `a cancelled plan replays nothing: ${target.got.flaky}`);
    assert((await page.locator('#dead-table tbody tr').count()) === 2, 'still two dead');
  });

  await step('a confirmed plan replays the rest with a progress bar, and the audit log names the token', async () => {
    await page.click('#replay-all');
    await page.locator('#bulk-panel[data-state=planned]').waitFor();
    await page.click('#bulk-confirm');
    await page.locator('#bulk-panel[data-state=done]').waitFor();
    const status = await page.locator('#bulk-status').innerText();
    assert(status.startsWith('2 of 2 replayed'), status);
    assert((await page.locator('#bulk-progress').getAttribute('max')) === '2', 'progress max');
    await page.locator('#dead-message', { hasText: 'Bulk replay done' }).waitFor();
    await until(() => target.got.flaky.length === 6, 'bulk replay delivered');
    const audit = page.locator('#audit-table tbody tr[data-action="bulk.replay"]');
    await audit.waitFor();
    const text = await audit.innerText();
    assert(/admin\s+bulk\.replay/.test(text) && /\b2\s+done/.test(text), text);
    await page.locator('#audit-table tbody tr[data-action=replay]').waitFor();
    await page.screenshot({ path: join(ARTIFACTS, 'dead-letters.png'), fullPage: true });
  });

  await step('hookgate reconcile recovers the event Stripe has and the gateway never received', async () => {
    // The gateway's own scheduled run (at start, then hourly) is over: it
    // found nothing, as Stripe had nothing yet.
    await until(async () => {
      const r = await fetch(`${base}/stats`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      return r.ok && (await r.json()).sources.stripe.reconcile_last_run != null;
    }, 'the scheduled reconciliation at start');
    // Stripe has the three events the gateway received and one it never did.
    const now = Math.floor(Date.now() / 1000);
    stripe.events.push(...ids.map((id, i) => stripeEvent(id, i === 2 ? 'invoice.paid' : 'charge.succeeded', now - 1500 + i)));
    // Twenty minutes old: past the grace in which Stripe itself may still
    // be delivering it.
    stripe.events.push(stripeEvent('evt_browser_recovered', 'invoice.paid', now - 1200));
    const before = stripe.calls.length;
    const run = await runHookgate(['reconcile', '--config', config, '--source', 'stripe', '--since', '1h'], 30_000);
    assert(run.code === 0, `exit code ${run.code}: ${run.stdout}${run.stderr}`);
    const row = (run.stdout.split('\n')[1] || '').trim().split(/\s+/).join(' ');
    assert(row === 'stripe 4 3 1 0 0', `found/already/recovered/failed/too young: ${run.stdout}`);
    const calls = stripe.calls.slice(before);
    assert(calls.length >= 1 && calls.every((c) => c.authorized && c.path === '/v1/events'), JSON.stringify(calls));
    assert(!`${run.stdout}${run.stderr}`.includes(STRIPE_API_KEY), 'API key printed');
    // The serving gateway delivers it (SQLite: on its next poll).
    await until(() => target.got.billing.includes('evt_browser_recovered'), 'the recovered event delivered');
  });

  await step('the recovered event has the "recovered" badge, a received one does not', async () => {
    await page.click('nav a[data-view=events]');
    // Clear the earlier search.
    await page.click('#events-filter button[type=reset]');
    const recovered = page.locator('#events-table tbody tr', { hasText: 'evt_browser_recovered' });
    const received = page.locator('#events-table tbody tr', { hasText: 'evt_browser_001' });
    await recovered.waitFor();
    await received.waitFor();
    assert((await recovered.locator('span.recovered').count()) === 1, 'no badge on the recovered event');
    assert((await received.locator('span.recovered').count()) === 0, 'a badge on a received event');
    assert((await page.locator('#events-table tbody span.recovered').count()) === 1, 'one badge in all');
  });

  await step('the Origin filter lists only the recovered event', async () => {
    const rows = page.locator('#events-table tbody tr');
    await page.selectOption('#events-filter-recovered', 'true');
    await until(async () => (await rows.count()) === 1
      && (await rows.first().innerText()).includes('evt_browser_recovered'), 'only the recovered event listed');
    await page.screenshot({ path: join(ARTIFACTS, 'recovered.png'), fullPage: true });
    await page.selectOption('#events-filter-recovered', 'false');
    await until(async () => (await rows.count()) === 3
      && !(await page.locator('#events-table tbody').innerText()).includes('evt_browser_recovered'), 'only received events listed');
  });

  await step('a refused request is re-verified after its secret is added', async () => {
    // The provider signs with a secret the gateway does not have yet.
    const body = JSON.stringify({ id: 'evt_browser_rotated', object: 'event', type: 'invoice.paid' });
    const r = await fetch(`${base}/webhooks/rotated`, { method: 'POST', headers: stripeHeaders(body, ROTATED_NEW), body });
    assert(r.status === 401, `refused first: ${r.status}`);
    await page.click('nav a[data-view=refused]');
    const row = page.locator('#refused-table tbody tr', { hasText: 'rotated' });
    await row.waitFor();
    const text = await row.innerText();
    assert(text.includes('invalid_signature') && text.includes('127.0.0.1') && text.includes('refused'), text);
    // Before the fix, re-verifying says it still fails.
    await row.locator('button.reverify-one').click();
    await page.locator('#refused-message', { hasText: 'Still refused' }).waitFor();
    // The operator adds the new secret and reloads.
    writeFileSync(config, configText.replace(`secrets = ["${ROTATED_OLD}"]`, `secrets = ["${ROTATED_OLD}", "${ROTATED_NEW}"]`));
    const reload = await fetch(`${base}/admin/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert(reload.ok, `reload: ${reload.status} ${await reload.text()}`);
    await row.locator('button.reverify-one').click();
    await page.locator('#refused-message', { hasText: 'Re-verified' }).waitFor();
    await until(async () => (await row.innerText()).includes('re-verified'), 'the row marked re-verified');
    assert(await row.locator('button.reverify-one').isDisabled(), 'a re-verified row cannot be re-verified again');
    await page.screenshot({ path: join(ARTIFACTS, 'refused.png'), fullPage: true });
    // Admitted once, through dedup: the provider's retry is a duplicate.
    const again = await fetch(`${base}/webhooks/rotated`, { method: 'POST', headers: stripeHeaders(body, ROTATED_NEW), body });
    assert(again.headers.get('hookgate-dedup') === 'duplicate', `retry after re-verify: ${again.status} ${again.headers.get('hookgate-dedup')}`);
  });

  await step('"re-verify all matching" shows a plan, then re-verifies with a progress bar', async () => {
    // Two more requests the gateway now verifies were refused while it could not
    // (sent with a secret it does not know: a later rotation, for the test).
    const bodies = ['evt_browser_bulk_a', 'evt_browser_bulk_b'].map((id) => JSON.stringify({ id, object: 'event', type: 'invoice.paid' }));
    for (const b of bodies) {
      const r = await fetch(`${base}/webhooks/rotated`, { method: 'POST', headers: stripeHeaders(b, ROTATED_LATER), body: b });
      assert(r.status === 401, `refused first: ${r.status}`);
    }
    // The log is written off the request path: wait until both are stored.
    await until(async () => {
      const r = await fetch(`${base}/admin/refused?source=rotated&state=refused`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      return (await r.json()).items.length === 2;
    }, 'two refused requests stored');
    writeFileSync(config, configText.replace(`secrets = ["${ROTATED_OLD}"]`, `secrets = ["${ROTATED_OLD}", "${ROTATED_NEW}", "${ROTATED_LATER}"]`));
    const reload = await fetch(`${base}/admin/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert(reload.ok, `reload: ${reload.status} ${await reload.text()}`);
    await page.fill('#refused-filter input[name=source]', 'rotated');
    await page.click('#reverify-all');
    await page.locator('#bulk-panel[data-kind=reverify][data-state=planned]').waitFor();
    const summary = await page.locator('#bulk-summary').innerText();
    assert(/^2 refused requests matching source=rotated/.test(summary), summary);
    assert(await page.locator('#bulk-targets').isHidden(), 'no target counts for a re-verify');
    await page.screenshot({ path: join(ARTIFACTS, 'reverify-plan.png'), fullPage: true });
    await page.click('#bulk-confirm');
    await page.locator('#bulk-panel[data-state=done]').waitFor();
    await page.locator('#refused-message', { hasText: 'Bulk re-verify done' }).waitFor();
    const status = await page.locator('#bulk-status').innerText();
    assert(status.startsWith('2 of 2 checked'), status);
    for (const b of bodies) {
      const again = await fetch(`${base}/webhooks/rotated`, { method: 'POST', headers: stripeHeaders(b, ROTATED_LATER), body: b });
      assert(again.headers.get('hookgate-dedup') === 'duplicate', `admitted by the bulk re-verify: ${again.headers.get('hookgate-dedup')}`);
    }
  });

  await step('no CSP violation, no token in any URL', async () => {
    assert(!violations.length, violations.join('\n'));
    assert(!requests.some((u) => u.includes(ADMIN_TOKEN)), 'token in a URL');
    assert(requests.every((u) => u.startsWith(base)), 'only this origin');
  });
}

const deadline = setTimeout(() => {
  console.log('not ok - browser test over its time limit');
  failed += 1;
  finish();
}, DEADLINE_MS);

let finishing = false;
async function finish() {
  if (finishing) return;
  finishing = true;
  clearTimeout(deadline);
  for (const c of cleanups.reverse()) {
    try { await c(); } catch { /* already gone */ }
  }
  console.log(`${passed} passed, ${failed} failed; screenshots in ${ARTIFACTS}`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { if (!failed) { failed += 1; console.log(`not ok - ${e.stack || e}`); } }).finally(finish);
