// hookgate admin console: plain JS, no build step, no third-party code.
// The admin token lives in sessionStorage (this tab only) and is sent as an
// Authorization header; it never appears in a URL, a cookie or a log.
// Every value from the API is written with textContent (never as HTML).
'use strict';

const TOKEN_KEY = 'hookgate.admin_token';
const REFRESH_MS = 5000;
const $ = (sel) => document.querySelector(sel);

function token() { return sessionStorage.getItem(TOKEN_KEY); }

async function api(path, options = {}) {
  const res = await fetch(path, {
    ...options,
    cache: 'no-store',
    credentials: 'omit',
    referrerPolicy: 'no-referrer',
    headers: { 'Authorization': 'Bearer ' + token(), 'Content-Type': 'application/json' },
  });
  if (res.status === 401) { logout('Your session has ended: sign in again.'); throw new Error('unauthorized'); }
  const text = await res.text();
  if (!res.ok) throw new Error(text.trim() || res.statusText);
  return text ? JSON.parse(text) : null;
}

// ---------- small DOM helpers ----------
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') node.className = v;
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ''));
  return node;
}
function td(text, cls) { return el('td', cls ? { class: cls } : {}, text == null ? '' : String(text)); }
function stateTag(state) { return el('span', { class: 'state ' + state }, state); }
function fill(tbody, rows) { tbody.replaceChildren(...rows); }
// One rule for times everywhere: UTC, written `2026-01-31 12:00:00Z`;
// lists show relative times ("3 min ago") with the UTC time on hover.
function when(iso) { return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : ''; }
function relative(iso) {
  if (!iso) return '—';
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 0) return 'in ' + ago(-s);
  return s < 5 ? 'just now' : ago(s) + ' ago';
}
function timeCell(iso, cls) {
  const cell = td(relative(iso), cls);
  if (iso) cell.title = when(iso);
  return cell;
}
function ago(seconds) {
  if (seconds == null) return '—';
  if (seconds < 120) return seconds + ' s';
  if (seconds < 7200) return Math.round(seconds / 60) + ' min';
  return Math.round(seconds / 3600) + ' h';
}
function eventHref(source, id) {
  return '#/event/' + encodeURIComponent(source) + '/' + encodeURIComponent(id);
}
function eventPath(source, id) {
  return '/admin/events/' + encodeURIComponent(source) + '/' + encodeURIComponent(id);
}

// ---------- login ----------
function showApp(on) {
  $('#login').hidden = on;
  $('#nav').hidden = !on;
  $('#logout').hidden = !on;
  if (!on) for (const s of document.querySelectorAll('section[id^=view-]')) s.hidden = true;
}

function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  stopRefresh();
  showApp(false);
  $('#login-error').textContent = message || '';
  $('#token').value = '';
  $('#token').focus();
}

async function login(ev) {
  ev.preventDefault();
  const given = $('#token').value.trim();
  if (!given) return;
  const res = await fetch('/stats', {
    headers: { 'Authorization': 'Bearer ' + given }, cache: 'no-store', credentials: 'omit',
  });
  if (!res.ok) { $('#login-error').textContent = res.status === 401 ? 'Wrong token.' : 'Gateway unavailable.'; return; }
  sessionStorage.setItem(TOKEN_KEY, given);
  $('#token').value = '';
  $('#login-error').textContent = '';
  showApp(true);
  route();
}

// ---------- routing ----------
let refreshTimer = null;
function stopRefresh() { if (refreshTimer) clearInterval(refreshTimer); refreshTimer = null; }
function every(fn) { stopRefresh(); refreshTimer = setInterval(fn, REFRESH_MS); }

function route() {
  if (!token()) { showApp(false); return; }
  showApp(true);
  const hash = (location.hash || '#/overview').split('?')[0];
  const [, view, ...rest] = hash.split('/');
  for (const s of document.querySelectorAll('section[id^=view-]')) s.hidden = true;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === view);
  stopRefresh();
  if (view === 'events') showEvents();
  else if (view === 'event' && rest.length >= 2) showEvent(decodeURIComponent(rest[0]), decodeURIComponent(rest.slice(1).join('/')));
  else if (view === 'dead') showDead();
  else if (view === 'refused') showRefused();
  else showOverview();
}

function report(node, err) { node.textContent = 'Error: ' + err.message; node.classList.add('error'); }

// ---------- overview ----------
const SVG = 'http://www.w3.org/2000/svg';
let overviewWindow = '1h';

function svgEl(tag, attrs = {}, text) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text != null) n.textContent = text;
  return n;
}

// A line chart with a time axis (UTC) and a count axis, one circle per point
// whose tooltip gives the bucket, the measure and the count. Volumes are
// neutral colours; failures red (classes in app.css).
function chart(series, start, stepSeconds, unit) {
  const w = 320, h = 90, left = 34, bottom = 16, top = 6, right = 6;
  const svg = svgEl('svg', { class: 'chart', width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: 'img' });
  const all = Object.values(series).flat();
  const max = Math.max(1, ...all);
  const n = Math.max(1, ...Object.values(series).map((v) => v.length));
  const x = (i) => left + (n === 1 ? 0 : (i * (w - left - right)) / (n - 1));
  const y = (v) => top + (h - top - bottom) * (1 - v / max);
  svg.append(svgEl('line', { class: 'axis', x1: left, y1: y(0), x2: w - right, y2: y(0) }));
  svg.append(svgEl('line', { class: 'axis', x1: left, y1: top, x2: left, y2: y(0) }));
  svg.append(svgEl('text', { x: left - 3, y: top + 8, 'text-anchor': 'end' }, String(max)));
  svg.append(svgEl('text', { x: left - 3, y: y(0), 'text-anchor': 'end' }, '0'));
  svg.append(svgEl('text', { x: 2, y: h / 2, 'font-size': 9 }, unit));
  const t0 = Date.parse(start);
  const label = (i) => new Date(t0 + i * stepSeconds * 1000).toISOString().slice(n > 200 || stepSeconds >= 3600 ? 5 : 11, 16).replace('T', ' ');
  svg.append(svgEl('text', { x: left, y: h - 3 }, label(0)));
  svg.append(svgEl('text', { x: w - right, y: h - 3, 'text-anchor': 'end' }, label(n - 1) + ' UTC'));
  for (const [name, values] of Object.entries(series)) {
    if (!values.length) continue;
    svg.append(svgEl('polyline', { class: 'line ' + name, points: values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ') }));
    values.forEach((v, i) => {
      if (!v) return;
      const at = new Date(t0 + i * stepSeconds * 1000).toISOString().slice(0, 16).replace('T', ' ');
      const c = svgEl('circle', { class: 'pt ' + name, cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 3 });
      c.append(svgEl('title', {}, `${at}Z +${stepSeconds / 60} min: ${v} ${name}`));
      svg.append(c);
    });
  }
  return svg;
}

function pct(x) { return x == null ? '—' : (x * 100).toFixed(x === 1 || x === 0 ? 0 : 1) + ' %'; }
function ms(x) { return x == null ? '—' : x + ' ms'; }

function healthCell(hl) {
  const cell = el('td', { class: 'health ' + hl.state, dataset: { health: hl.state } });
  cell.textContent = hl.state === 'failing' ? `failing since ${relative(hl.since)}`
    : hl.state === 'recovering' ? `recovering since ${relative(hl.since)}` : 'healthy';
  if (hl.since) cell.title = 'since ' + when(hl.since) + (hl.last_error ? ' — ' + hl.last_error : '');
  return cell;
}

// Whether a source's event id and type come from signed data (/stats
// `signed`, computed from the provider's scheme): an unsigned id or type
// can be changed by whoever relays the request.
function signedCell(signed) {
  const cell = el('td', { class: 'signed' });
  for (const [label, fact] of [['id', signed.event_id], ['type', signed.event_type]]) {
    const cover = fact ? fact.cover : 'none';
    const tag = el('span', { class: 'cover ' + cover, dataset: { fact: label, cover } }, `${label} ${cover}`);
    tag.title = !fact ? 'untyped events'
      : cover === 'signed' ? `the event ${label} is covered by the signature`
        : `not covered by the signature: ${fact.weakest.join(', ')}`;
    cell.append(tag);
  }
  return cell;
}

async function loadOverview() {
  const [stats, series] = await Promise.all([api('/stats'), api('/admin/stats/series?window=' + overviewWindow)]);
  for (const b of document.querySelectorAll('.window button')) b.classList.toggle('active', b.dataset.window === overviewWindow);
  const unit = series.step_seconds >= 3600 ? `per ${series.step_seconds / 3600} h` : `per ${series.step_seconds / 60} min`;
  const targets = Object.entries(series.targets).map(([name, t]) => {
    const fail = t.health.last_failure;
    const lastError = timeCell(fail && fail.at);
    if (fail) lastError.title = when(fail.at) + ' — ' + fail.error;
    const link = el('a', { href: '#/events?target=' + encodeURIComponent(name) }, name);
    const backlog = td(t.backlog, 'num');
    return el('tr', { dataset: { target: name } }, el('td', {}, link), healthCell(t.health),
      td(t.delivered_per_minute, 'num'), td(pct(t.success_rate), 'num'),
      td(`${ms(t.latency_ms.p50)} / ${ms(t.latency_ms.p99)}`, 'num'),
      timeCell(t.health.last_success), lastError, backlog,
      timeCell(t.oldest_pending), td(t.dead, 'num'),
      el('td', {}, chart({ delivered: t.delivered, failed: t.failed_attempts }, series.start, series.step_seconds, unit)));
  });
  fill($('#targets-table tbody'), targets.length ? targets : [el('tr', {}, el('td', { colspan: '11' }, 'No targets configured.'))]);
  const rows = Object.entries(series.sources).map(([name, s]) => {
    const reasons = Object.entries(s.rejected_by_reason).map(([r, n]) => `${r}: ${n}`).join(', ');
    const signed = stats.sources[name] ? signedCell(stats.sources[name].signed) : td('');
    return el('tr', { dataset: { source: name } }, el('td', {}, el('a', { href: '#/events?source=' + encodeURIComponent(name) }, name)),
      timeCell(s.last_received), timeCell(s.last_accepted),
      td(s.per_minute.received, 'num'), td(s.per_minute.unique, 'num'), td(s.per_minute.duplicates, 'num'),
      td(s.per_minute.rejected, 'num'), td(reasons || '—', 'wrap'), signed,
      el('td', {}, chart({ received: s.received, duplicates: s.duplicates, rejected: s.rejected, dead: s.dead }, series.start, series.step_seconds, unit)));
  });
  fill($('#sources-table tbody'), rows);
  const apis = Object.entries(series.apis).map(([name, a]) => el('tr', {}, td(name), td(a.first_calls, 'num'),
    td(a.replays, 'num'), td(a.conflicts, 'num'), td(a.upstream_errors, 'num'),
    td(`${ms(a.upstream_latency_ms.p50)} / ${ms(a.upstream_latency_ms.p99)}`, 'num')));
  fill($('#apis-table tbody'), apis.length ? apis : [el('tr', {}, el('td', { colspan: '6' }, 'No APIs configured.'))]);
  $('#overview-updated').textContent = 'updated ' + when(new Date().toISOString());
}

function showOverview() {
  $('#view-overview').hidden = false;
  loadOverview().catch((e) => report($('#overview-updated'), e));
  every(() => loadOverview().catch(() => {}));
}

// ---------- filters (events and dead letters) ----------
const FILTERS = [
  ['q', 'Event id (prefix)  [/]', 'search'],
  ['object', 'Object id (pi_…, cus_…)', 'search'],
  ['field', 'Body field (/data/object/customer:cus_1; needs Since)', 'text'],
  ['source', 'Source', 'names'],
  ['target', 'Target', 'names'],
  ['state', 'Delivery state', 'select'],
  ['type', 'Event type', 'text'],
  ['recovered', 'Origin', 'origin'],
  ['since', 'Since (UTC)', 'datetime-local'],
  ['until', 'Until (UTC)', 'datetime-local'],
];

// The configured source and target names (/stats), for the drop-downs.
let names = null;
async function configuredNames() {
  if (!names) {
    const stats = await api('/stats');
    names = { source: Object.keys(stats.sources).sort(), target: Object.keys(stats.targets || {}).sort() };
  }
  return names;
}

function buildFilters(form, withState, onChange) {
  if (form.childElementCount) return;
  for (const [name, label, type] of FILTERS) {
    if (name === 'state' && !withState) continue;
    const id = form.id + '-' + name;
    let input;
    if (type === 'origin') {
      input = el('select', { id, name }, el('option', { value: '' }, 'any'),
        el('option', { value: 'true' }, 'recovered by reconciliation'),
        el('option', { value: 'false' }, 'received'));
    } else if (type === 'names') {
      input = el('select', { id, name }, el('option', { value: '' }, 'any'));
      configuredNames().then((n) => {
        const keep = input.value || input.dataset.want || '';
        input.append(...n[name].map((v) => el('option', { value: v }, v)));
        input.value = keep;
      }).catch(() => {});
    } else if (type === 'select') {
      input = el('select', { id, name }, el('option', { value: '' }, 'any'),
        ...['pending', 'retrying', 'delivered', 'dead'].map((s) => el('option', { value: s }, s)));
    } else {
      input = el('input', { id, name, type, autocomplete: 'off', spellcheck: 'false' });
    }
    form.append(el('div', {}, el('label', { for: id }, label), input));
  }
  form.append(el('div', {}, el('button', { type: 'submit' }, 'Apply'),
    ' ', el('button', { type: 'reset', class: 'secondary' }, 'Clear')));
  form.addEventListener('submit', (e) => { e.preventDefault(); onChange(); });
  form.addEventListener('reset', () => setTimeout(onChange, 0));
  form.addEventListener('change', onChange);
  let typing = null;
  form.querySelector('[name=q]').addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(onChange, 250); });
}

function filterQuery(form, extra = {}) {
  const p = new URLSearchParams();
  for (const [k, v] of new FormData(form)) {
    if (!v) continue;
    // datetime-local has no zone: the console's rule is UTC.
    if (k === 'since' || k === 'until') p.set(k, new Date(v + (v.length === 16 ? ':00Z' : 'Z')).toISOString());
    else p.set(k, v.trim());
  }
  for (const [k, v] of Object.entries(extra)) if (v) p.set(k, v);
  return p;
}

function presetFilters(form) {
  const query = (location.hash.split('?')[1]) || '';
  for (const [k, v] of new URLSearchParams(query)) {
    const input = form.querySelector(`[name="${CSS.escape(k)}"]`);
    if (input) { input.value = v; input.dataset.want = v; }
  }
}

// ---------- events ----------
let eventsCursor = null;

function deliveriesCell(e) {
  const cell = el('td');
  for (const d of e.deliveries) {
    const tag = stateTag(d.state);
    tag.textContent = `${d.target} ${d.state}` + (d.attempts ? ` · ${d.attempts} attempt${d.attempts === 1 ? '' : 's'}` : '') +
      (d.overtaken_by ? ` · overtaken by ${d.overtaken_by}` : '');
    tag.title = [d.last_status && `last status ${d.last_status}`, d.last_error,
      d.next_attempt_at && `next ${when(d.next_attempt_at)}`,
      d.order_key != null && `order key ${d.order_key} #${d.order_seq}`].filter(Boolean).join(' · ');
    cell.append(tag);
  }
  return cell;
}

function eventRow(e) {
  return el('tr', {}, timeCell(e.received_at), td(e.source),
    el('td', { class: 'wrap' }, el('a', { href: eventHref(e.source, e.event_id), class: 'event-link' }, e.event_id),
      e.recovered ? el('span', { class: 'recovered', title: 'recovered by reconciliation (read from the provider API, or resent by the provider on request)' }, ' recovered') : ''),
    td(e.type || '—'), td(e.object_id || '—', 'wrap'), td(e.body_size, 'num'),
    td(e.duplicates ? `${e.duplicates}${e.conflicts ? ' (' + e.conflicts + ' conflict)' : ''}` : '', 'num'),
    deliveriesCell(e));
}

async function loadEvents(append) {
  const form = $('#events-filter');
  if (!append) $('#events-more').dataset.paged = '';
  const p = filterQuery(form, { limit: '50', cursor: append ? eventsCursor : '' });
  const page = await api('/admin/events?' + p);
  const rows = page.items.map(eventRow);
  const tbody = $('#events-table tbody');
  if (append) tbody.append(...rows);
  else fill(tbody, rows.length ? rows : [el('tr', {}, el('td', { colspan: '8' }, eventsCursor || page.next_cursor ? 'No match among the events examined: see older ones.' : 'No events match.'))]);
  eventsCursor = page.next_cursor;
  $('#events-more').hidden = !eventsCursor;
}

function showEvents() {
  $('#view-events').hidden = false;
  const form = $('#events-filter');
  buildFilters(form, true, () => loadEvents(false).catch((e) => alertError(e)));
  presetFilters(form);
  loadEvents(false).catch((e) => alertError(e));
  // Live refresh reloads the first page only while the user has not paged on.
  every(() => { if ($('#events-live').checked && !document.hidden && $('#events-more').dataset.paged !== '1') loadEvents(false).catch(() => {}); });
}

function alertError(e) {
  const tbody = document.querySelector('section:not([hidden]) table tbody');
  if (tbody) fill(tbody, [el('tr', {}, el('td', { colspan: '8', class: 'error' }, 'Error: ' + e.message))]);
}

// ---------- one event ----------
let current = null;

function fact(dl, name, value) { dl.append(el('dt', {}, name), el('dd', {}, value == null ? '—' : String(value))); }

function prettyBody(body) {
  if (body.encoding !== 'utf-8') return `(binary, base64)\n${body.data}`;
  try { return JSON.stringify(JSON.parse(body.data), null, 2); } catch { return body.data; }
}

async function loadEvent(source, id) {
  const e = await api(eventPath(source, id));
  current = e;
  $('#event-title').textContent = `${e.source} / ${e.event_id}`;
  const dl = $('#event-facts'); dl.replaceChildren();
  fact(dl, 'type', e.type);
  fact(dl, 'object', e.object_id);
  fact(dl, 'origin', e.recovered ? 'recovered by reconciliation (read from the provider API, or resent on request)' : 'received');
  fact(dl, 'received', when(e.received_at));
  fact(dl, 'body size', e.body_size + ' bytes');
  fact(dl, 'secret matched', e.verification.key_index == null ? null : '#' + e.verification.key_index);
  fact(dl, 'provider time', e.verification.provider_time && when(e.verification.provider_time));
  fact(dl, 'duplicates', `${e.duplicates} (${e.conflicts} with another body)`);
  fill($('#event-deliveries tbody'), e.deliveries.map((d) => el('tr', {},
    td(d.target), el('td', {}, stateTag(d.state)), td(d.attempts, 'num'), td(d.last_status ?? '—', 'num'),
    td(d.next_attempt_at ? when(d.next_attempt_at) : '—'),
    td(d.order_key == null ? '—' : `${d.order_key} #${d.order_seq}` +
      (d.overtaken_by == null ? '' : ` · overtaken by ${d.overtaken_by}`), 'wrap'),
    el('td', {}, el('button', { type: 'button', class: 'secondary redeliver', dataset: { target: d.target },
      onclick: () => redeliver(d.target) }, 'Redeliver')))));
  const attempts = $('#event-attempts'); attempts.replaceChildren();
  for (const [target, list] of Object.entries(e.attempts)) {
    attempts.append(el('h3', {}, target));
    const ol = el('ol', { class: 'timeline', dataset: { target } });
    if (!list.length) ol.append(el('li', {}, 'no attempt yet'));
    for (const a of list) {
      const ok = a.status != null && a.status >= 200 && a.status < 300;
      ol.append(el('li', { class: ok ? 'ok' : 'fail' },
        `#${a.attempt} ${when(a.at)} — ${a.status ?? 'no answer'} in ${a.latency_ms} ms` + (a.error ? ` — ${a.error}` : '')));
    }
    attempts.append(ol);
  }
  const arrivals = $('#event-arrivals');
  arrivals.replaceChildren(...(e.arrivals.length ? e.arrivals.map((a) =>
    el('li', {}, when(a.at) + (a.copies > 1 ? ` … ${when(a.last_at)}, ${a.copies} copies` : '')
      + (a.conflict ? ' — different body (conflict)' : ''))) : [el('li', {}, 'none recorded')]));
  fill($('#event-headers tbody'), e.headers.map(([n, v]) => el('tr', {}, td(n), td(v, 'wrap'))));
  $('#event-body').textContent = prettyBody(e.body);
}

async function redeliver(target) {
  if (!current) return;
  const msg = $('#event-message');
  try {
    const r = await api(eventPath(current.source, current.event_id) + '/redeliver', {
      method: 'POST', body: JSON.stringify(target ? { target } : {}),
    });
    msg.textContent = `Queued ${r.queued} deliver${r.queued === 1 ? 'y' : 'ies'}.`;
    setTimeout(() => loadEvent(current.source, current.event_id).catch(() => {}), 800);
  } catch (e) { report(msg, e); }
}

function showEvent(source, id) {
  $('#view-event').hidden = false;
  $('#event-message').textContent = '';
  loadEvent(source, id).catch((e) => { $('#event-title').textContent = 'Error: ' + e.message; });
  every(() => loadEvent(source, id).catch(() => {}));
}

// ---------- dead letters ----------
let deadCursor = null;

async function replay(body, message) {
  const r = await api('/admin/replay', { method: 'POST', body: JSON.stringify(body) });
  message.textContent = `Queued ${r.replayed} dead deliver${r.replayed === 1 ? 'y' : 'ies'} for replay.`;
  setTimeout(() => loadDead(false).catch(() => {}), 800);
  loadAudit().catch(() => {});
}

async function loadDead(append) {
  const p = filterQuery($('#dead-filter'), { state: 'dead', limit: '50', cursor: append ? deadCursor : '' });
  const page = await api('/admin/events?' + p);
  const wanted = p.get('target');
  const rows = [];
  for (const e of page.items) {
    for (const d of e.deliveries) {
      if (d.state !== 'dead' || (wanted && d.target !== wanted)) continue;
      rows.push(el('tr', {}, timeCell(e.received_at), td(e.source),
        el('td', { class: 'wrap' }, el('a', { href: eventHref(e.source, e.event_id) }, e.event_id)),
        td(e.type || '—'), td(d.target), td(d.attempts, 'num'), td([d.last_error || d.last_status, d.overtaken_by != null && `overtaken by ${d.overtaken_by} (key ${d.order_key})`].filter(Boolean).join(' · '), 'wrap'),
        el('td', {}, el('button', { type: 'button', class: 'secondary replay-one', dataset: { event: e.event_id, target: d.target },
          onclick: () => replay({ source: e.source, event_id: e.event_id, target: d.target }, $('#dead-message')).catch((x) => report($('#dead-message'), x)) },
        'Replay this'))));
    }
  }
  const tbody = $('#dead-table tbody');
  if (append) tbody.append(...rows);
  else fill(tbody, rows.length ? rows : [el('tr', {}, el('td', { colspan: '8' }, 'No dead deliveries match.'))]);
  deadCursor = page.next_cursor;
  $('#dead-more').hidden = !deadCursor;
}

// "Replay all matching" (dead letters) and "Re-verify all matching"
// (refused requests) are bulk actions: a plan (counts per source, and per
// target for a replay) the operator confirms, then a run with progress and
// a cancel. One panel serves both; it moves under the button that asked.
let bulk = null;
const BULK = {
  replay: {
    button: '#replay-all', message: '#dead-message', noun: 'Replay', doing: 'Replaying', done: 'replayed',
    reload: () => { loadDead(false).catch(() => {}); loadAudit().catch(() => {}); },
    summary: (c, scope) => `${c.deliveries} dead deliver${c.deliveries === 1 ? 'y' : 'ies'} of ${c.events} event${c.events === 1 ? '' : 's'} ${scope}.`,
    ended: (b) => `${b.done} of ${b.total} dead deliveries queued.`,
  },
  reverify: {
    button: '#reverify-all', message: '#refused-message', noun: 'Re-verify', doing: 'Re-verifying', done: 'checked',
    reload: () => { loadRefused(false).catch(() => {}); },
    summary: (c, scope) => `${c.requests} refused request${c.requests === 1 ? '' : 's'} ${scope}, checked with the secrets loaded now.`,
    ended: (b) => `${b.done} of ${b.total} refused requests checked.`,
  },
};
let bulkKind = BULK.replay;

function bulkRows(tbody, counts) {
  const rows = Object.entries(counts || {}).map(([k, n]) => el('tr', {}, td(k), td(n, 'num')));
  fill(tbody, rows.length ? rows : [el('tr', {}, el('td', { colspan: '2' }, 'none'))]);
}

async function bulkPlan(kind, body) {
  const plan = await api('/admin/bulk/plan', { method: 'POST', body: JSON.stringify({ kind, ...body }) });
  bulkKind = BULK[kind];
  bulk = plan;
  const panel = $('#bulk-panel');
  $(bulkKind.button).parentElement.after(panel);
  const c = plan.counts;
  const scope = Object.keys(body).length ? 'matching ' + new URLSearchParams(body).toString().replaceAll('&', ', ') : 'of every source and target';
  $('#bulk-title').textContent = `${bulkKind.noun} plan`;
  $('#bulk-summary').textContent = `${bulkKind.summary(c, scope)} Confirm before ${plan.expires_at.slice(11, 19)} UTC.`;
  $('#bulk-sources thead th:last-child').textContent = kind === 'replay' ? 'events' : 'requests';
  bulkRows($('#bulk-sources tbody'), c.by_source);
  $('#bulk-targets').hidden = kind !== 'replay';
  if (kind === 'replay') bulkRows($('#bulk-targets tbody'), c.by_target);
  $('#bulk-confirm').textContent = `Confirm ${bulkKind.noun.toLowerCase()}`;
  $('#bulk-plan-actions').hidden = false;
  $(bulkKind.message).textContent = '';
  $('#bulk-run').hidden = true;
  panel.hidden = false;
  panel.dataset.state = plan.state;
  panel.dataset.kind = kind;
}

async function replayAll() {
  await bulkPlan('replay', Object.fromEntries(filterQuery($('#dead-filter'))));
}

function bulkShow(b) {
  bulk = b;
  const total = Math.max(b.total, 1);
  $('#bulk-progress').max = total;
  $('#bulk-progress').value = Math.min(b.done, total);
  $('#bulk-status').textContent = `${b.done} of ${b.total} ${bulkKind.done} · ${b.state}`;
  $('#bulk-panel').dataset.state = b.state;
  const running = b.state === 'running' || b.state === 'cancelling';
  $('#bulk-stop').hidden = !running;
  return running;
}

async function bulkFollow(id) {
  const b = await api('/admin/bulk/' + encodeURIComponent(id));
  if (bulkShow(b)) { setTimeout(() => bulkFollow(id).catch((x) => report($(bulkKind.message), x)), 500); return; }
  $('#bulk-title').textContent = `Bulk ${bulkKind.noun.toLowerCase()} ${b.state}`;
  $(bulkKind.message).textContent = `Bulk ${bulkKind.noun.toLowerCase()} ${b.state}: ${bulkKind.ended(b)}`;
  bulkKind.reload();
}

async function bulkConfirm() {
  if (!bulk) return;
  const b = await api(`/admin/bulk/${encodeURIComponent(bulk.id)}/start`, { method: 'POST' });
  $('#bulk-title').textContent = bulkKind.doing;
  $('#bulk-summary').textContent = $('#bulk-summary').textContent.replace(/ Confirm before .*$/, '');
  $('#bulk-plan-actions').hidden = true;
  $('#bulk-run').hidden = false;
  bulkShow(b);
  await bulkFollow(b.id);
}

async function bulkCancel(hide) {
  if (!bulk) return;
  const b = await api(`/admin/bulk/${encodeURIComponent(bulk.id)}/cancel`, { method: 'POST' });
  if (hide) {
    $('#bulk-panel').hidden = true;
    $(bulkKind.message).textContent = `${bulkKind.noun} plan cancelled: nothing was ${bulkKind.done}.`;
    bulk = null;
    loadAudit().catch(() => {});
  } else {
    bulkShow(b);
  }
}

async function loadAudit() {
  const page = await api('/admin/audit?limit=20');
  const rows = page.items.map((a) => el('tr', { dataset: { action: a.action } }, timeCell(a.at), td(a.who), td(a.action),
    td(Object.entries(a.filter || {}).filter(([, v]) => v != null).map(([k, v]) => `${k}=${v}`).join(', ') || 'everything', 'wrap'),
    td(a.count, 'num'), td(a.outcome)));
  fill($('#audit-table tbody'), rows.length ? rows : [el('tr', {}, el('td', { colspan: '6' }, 'No operator actions yet.'))]);
}

function showDead() {
  $('#view-dead').hidden = false;
  $('#dead-message').textContent = '';
  buildFilters($('#dead-filter'), false, () => loadDead(false).catch((e) => alertError(e)));
  presetFilters($('#dead-filter'));
  $('#bulk-panel').hidden = true;
  loadDead(false).catch((e) => alertError(e));
  loadAudit().catch((e) => alertError(e));
  every(() => { if (!document.hidden) { loadDead(false).catch(() => {}); loadAudit().catch(() => {}); } });
}

// ---------- refused requests ----------
let refusedCursor = null;

function refusedQuery(extra = {}) {
  const p = new URLSearchParams();
  for (const [k, v] of new FormData($('#refused-filter'))) if (v.trim()) p.set(k, v.trim());
  for (const [k, v] of Object.entries(extra)) if (v) p.set(k, v);
  return p;
}

function reverifiedText(r) {
  if (r.result === 're-verified') return `Re-verified: admitted ${r.event_ids.join(', ') || 'an answer-only request'} (${r.dedup}).`;
  if (r.result === 'refused') return `Still refused: ${r.detail}.`;
  if (r.result === 'already_reverified') return 'Already re-verified.';
  return `Cannot re-verify: ${r.detail}.`;
}

async function reverifyOne(id) {
  const r = await api(`/admin/refused/${id}/reverify`, { method: 'POST', body: '{}' });
  $('#refused-message').textContent = `#${id}: ${reverifiedText(r)}`;
  await loadRefused(false);
}

async function reverifyAll() {
  // A bulk re-verify acts on requests still refused, whatever the state filter shows.
  const p = refusedQuery();
  p.delete('state');
  await bulkPlan('reverify', Object.fromEntries(p));
}

async function loadRefused(append) {
  const page = await api('/admin/refused?' + refusedQuery({ limit: '50', cursor: append ? refusedCursor : '' }));
  const rows = page.items.map((r) => {
    const reason = td(r.reason);
    reason.title = r.detail;
    const done = r.state === 're-verified';
    const button = el('button', { type: 'button', class: 'secondary reverify-one', dataset: { id: String(r.id) },
      onclick: () => reverifyOne(r.id).catch((x) => report($('#refused-message'), x)) }, 'Re-verify');
    if (done) button.disabled = true;
    return el('tr', { dataset: { id: String(r.id) } }, timeCell(r.received_at), td(r.source), reason,
      td(r.peer || '—'), td(r.body_size, 'num'),
      el('td', {}, stateTag(r.state), ...(done && r.event_id ? [' ', el('a', { href: eventHref(r.source, r.event_id) }, r.event_id)] : [])),
      el('td', {}, button));
  });
  const tbody = $('#refused-table tbody');
  if (append) tbody.append(...rows);
  else fill(tbody, rows.length ? rows : [el('tr', {}, el('td', { colspan: '7' }, 'No refused requests match.'))]);
  refusedCursor = page.next_cursor;
  $('#refused-more').hidden = !refusedCursor;
}

function showRefused() {
  $('#view-refused').hidden = false;
  $('#refused-message').textContent = '';
  $('#bulk-panel').hidden = true;
  loadRefused(false).catch((e) => alertError(e));
  every(() => { if (!document.hidden) loadRefused(false).catch(() => {}); });
}

// ---------- start ----------
document.addEventListener('DOMContentLoaded', () => {
  $('#login-form').addEventListener('submit', (e) => login(e).catch((x) => { $('#login-error').textContent = x.message; }));
  $('#logout').addEventListener('click', () => logout(''));
  for (const b of document.querySelectorAll('.window button')) {
    b.addEventListener('click', () => { overviewWindow = b.dataset.window; loadOverview().catch((e) => report($('#overview-updated'), e)); });
  }
  $('#events-more').addEventListener('click', () => { $('#events-more').dataset.paged = '1'; loadEvents(true).catch(alertError); });
  $('#dead-more').addEventListener('click', () => loadDead(true).catch(alertError));
  $('#refused-more').addEventListener('click', () => loadRefused(true).catch(alertError));
  $('#reverify-all').addEventListener('click', () => reverifyAll().catch((x) => report($('#refused-message'), x)));
  $('#refused-filter').addEventListener('change', () => loadRefused(false).catch(alertError));
  $('#refused-filter').addEventListener('submit', (e) => { e.preventDefault(); loadRefused(false).catch(alertError); });
  $('#redeliver-all').addEventListener('click', () => redeliver(null));
  $('#replay-all').addEventListener('click', () => replayAll().catch((x) => report($('#dead-message'), x)));
  $('#bulk-confirm').addEventListener('click', () => bulkConfirm().catch((x) => report($('#dead-message'), x)));
  $('#bulk-discard').addEventListener('click', () => bulkCancel(true).catch((x) => report($('#dead-message'), x)));
  $('#bulk-stop').addEventListener('click', () => bulkCancel(false).catch((x) => report($('#dead-message'), x)));
  document.addEventListener('keydown', (e) => {
    const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
    if (e.key === '/' && !typing && token()) {
      e.preventDefault();
      if (!location.hash.startsWith('#/events') && !location.hash.startsWith('#/dead')) location.hash = '#/events';
      setTimeout(() => document.querySelector('section:not([hidden]) input[name=q]')?.focus(), 0);
    } else if (e.key === 'Escape' && typing) {
      document.activeElement.blur();
    }
  });
  window.addEventListener('hashchange', route);
  route();
});
