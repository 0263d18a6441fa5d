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
function when(iso) { return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : ''; }
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
  else showOverview();
}

function report(node, err) { node.textContent = 'Error: ' + err.message; node.classList.add('error'); }

// ---------- overview ----------
const SVG = 'http://www.w3.org/2000/svg';
function spark(series) {
  const w = 240, h = 36, svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark'); svg.setAttribute('width', w); svg.setAttribute('height', h);
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  const all = Object.values(series).flat();
  const max = Math.max(1, ...all);
  for (const [name, values] of Object.entries(series)) {
    if (!values.length) continue;
    const step = w / Math.max(1, values.length - 1);
    const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`);
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('class', 'line ' + name); line.setAttribute('points', pts.join(' '));
    const title = document.createElementNS(SVG, 'title');
    title.textContent = `${name}: ${values.reduce((a, b) => a + b, 0)} in the last hour (max ${Math.max(...values)}/min)`;
    line.append(title);
    svg.append(line);
  }
  return svg;
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
  const [stats, series] = await Promise.all([api('/stats'), api('/admin/stats/series?window=1h')]);
  const rows = Object.entries(stats.sources).map(([name, s]) => {
    const reasons = Object.entries(s.rejected_by_reason).filter(([, n]) => n > 0)
      .map(([r, n]) => `${r}: ${n}`).join(', ');
    const rejected = td(s.rejected, 'num');
    if (reasons) rejected.title = reasons;
    const perMinute = series.sources[name] || {};
    const chart = el('td');
    chart.append(spark({
      received: perMinute.received || [], duplicates: perMinute.duplicates || [],
      rejected: perMinute.rejected || [], dead: perMinute.dead || [],
    }));
    return el('tr', {}, el('td', {}, el('a', { href: '#/events?source=' + encodeURIComponent(name) }, name)),
      td(s.received, 'num'), td(s.unique, 'num'), td(s.duplicates, 'num'),
      rejected, td(s.delivered, 'num'), td(s.dead, 'num'), signedCell(s.signed), chart);
  });
  fill($('#sources-table tbody'), rows);
  const targets = Object.entries(series.targets).map(([name, t]) => el('tr', {},
    td(name), td(t.backlog, 'num'), td(ago(t.oldest_pending_age_s)), td(t.dead, 'num')));
  fill($('#targets-table tbody'), targets.length ? targets : [el('tr', {}, td('no deliveries yet'))]);
  $('#overview-updated').textContent = 'updated ' + new Date().toLocaleTimeString();
}

function showOverview() {
  $('#view-overview').hidden = false;
  loadOverview().catch((e) => report($('#overview-updated'), e));
  every(() => loadOverview().catch(() => {}));
}

// ---------- filters (events and dead letters) ----------
const FILTERS = [
  ['q', 'Event id (prefix)  [/]', 'search'],
  ['source', 'Source', 'text'],
  ['target', 'Target', 'text'],
  ['state', 'Delivery state', 'select'],
  ['type', 'Event type', 'text'],
  ['recovered', 'Origin', 'origin'],
  ['since', 'Since (local time)', 'datetime-local'],
  ['until', 'Until (local time)', 'datetime-local'],
];

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
    if (k === 'since' || k === 'until') p.set(k, new Date(v).toISOString());
    else p.set(k, v.trim());
  }
  for (const [k, v] of Object.entries(extra)) if (v) p.set(k, v);
  return p;
}

function presetFilters(form) {
  const query = (location.hash.split('?')[1]) || '';
  for (const [k, v] of new URLSearchParams(query)) {
    const input = form.querySelector(`[name="${CSS.escape(k)}"]`);
    if (input) input.value = v;
  }
}

// ---------- events ----------
let eventsCursor = null;

function deliveriesCell(e) {
  const cell = el('td');
  for (const d of e.deliveries) {
    const tag = stateTag(d.state);
    tag.textContent = `${d.target} ${d.state}` + (d.attempts ? ` ×${d.attempts}` : '') +
      (d.overtaken_by ? ` · overtaken by ${d.overtaken_by}` : '');
    tag.title = [d.last_status && `last status ${d.last_status}`, d.last_error,
      d.next_attempt_at && `next ${when(d.next_attempt_at)}`,
      d.order_key != null && `order key ${d.order_key} #${d.order_seq}`].filter(Boolean).join(' · ');
    cell.append(tag);
  }
  return cell;
}

function eventRow(e) {
  return el('tr', {}, td(when(e.received_at)), td(e.source),
    el('td', { class: 'wrap' }, el('a', { href: eventHref(e.source, e.event_id), class: 'event-link' }, e.event_id),
      e.recovered ? el('span', { class: 'recovered', title: 'recovered by reconciliation (read from the provider API, or resent by the provider on request)' }, ' recovered') : ''),
    td(e.type || '—'), td(e.body_size, 'num'),
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
  else fill(tbody, rows.length ? rows : [el('tr', {}, el('td', { colspan: '7' }, 'No events match.'))]);
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
}

async function loadDead(append) {
  const p = filterQuery($('#dead-filter'), { state: 'dead', limit: '50', cursor: append ? deadCursor : '' });
  const page = await api('/admin/events?' + p);
  const wanted = p.get('target');
  const rows = [];
  for (const e of page.items) {
    for (const d of e.deliveries) {
      if (d.state !== 'dead' || (wanted && d.target !== wanted)) continue;
      rows.push(el('tr', {}, td(when(e.received_at)), td(e.source),
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

async function replayAll() {
  const p = filterQuery($('#dead-filter'));
  const body = Object.fromEntries(p);
  const scope = Object.keys(body).length ? 'matching ' + p.toString().replaceAll('&', ', ') : 'of every source and target';
  if (!window.confirm(`Replay ALL dead deliveries ${scope}?`)) return;
  await replay(body, $('#dead-message'));
}

function showDead() {
  $('#view-dead').hidden = false;
  $('#dead-message').textContent = '';
  buildFilters($('#dead-filter'), false, () => loadDead(false).catch((e) => alertError(e)));
  presetFilters($('#dead-filter'));
  loadDead(false).catch((e) => alertError(e));
  every(() => { if (!document.hidden) loadDead(false).catch(() => {}); });
}

// ---------- start ----------
document.addEventListener('DOMContentLoaded', () => {
  $('#login-form').addEventListener('submit', (e) => login(e).catch((x) => { $('#login-error').textContent = x.message; }));
  $('#logout').addEventListener('click', () => logout(''));
  $('#events-more').addEventListener('click', () => { $('#events-more').dataset.paged = '1'; loadEvents(true).catch(alertError); });
  $('#dead-more').addEventListener('click', () => loadDead(true).catch(alertError));
  $('#redeliver-all').addEventListener('click', () => redeliver(null));
  $('#replay-all').addEventListener('click', () => replayAll().catch((x) => report($('#dead-message'), x)));
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
