// The approvals console: signs in with a bearer token, follows each reviewable tenant's calls
// over /api/v1/tenants/{t}/watch, and decides through /api/v1/calls/{id}/{verb}.
// Every value from the server is set as text, never as markup.
'use strict';

const UNFINISHED = new Set(['pending', 'approved', 'executing', 'outcome_unknown']);
const FINISHED = ['succeeded', 'failed', 'rejected', 'cancelled', 'expired'];
const HISTORY_LIMIT = 50;

const state = {
  token: null,
  me: null,
  calls: new Map(), // call id -> record
  tools: new Map(), // "tenant/tool" -> {description, input_schema} or null
  history: [],
  abort: null,
};
const cards = new Map(); // call id -> {node, key, facts, kind, offer}: the waiting list's cards

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === 'class') node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class Refusal extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: 'Bearer ' + state.token };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = {};
  try {
    json = text ? JSON.parse(text) : {};
  } catch (_) {
    json = { error: { code: 'HTTP_' + response.status, message: text } };
  }
  if (!response.ok) {
    const error = json.error || {};
    throw new Refusal(error.code || 'HTTP_' + response.status, error.message || text);
  }
  return json;
}

// ---- time ------------------------------------------------------------------------------

function span(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
}

function ago(unixMs) {
  const delta = Date.now() - unixMs;
  return delta >= 0 ? span(delta) + ' ago' : 'in ' + span(-delta);
}

function tick() {
  for (const node of document.querySelectorAll('[data-expires]')) {
    const left = Number(node.dataset.expires) - Date.now();
    node.textContent = left > 0 ? 'expires in ' + span(left) : 'expired';
    node.classList.toggle('soon', left < 60000);
  }
}

// ---- rendering -------------------------------------------------------------------------

function reviewer(tenant) {
  return (state.me.tenants.find((t) => t.tenant === tenant) || {}).approver === true;
}

// A string as it is (the schema column says it is one); anything else as indented JSON.
function pretty(value) {
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

// The arguments as a table, each beside what the tool's schema says of it; arguments the
// schema does not name are marked.
function argumentsTable(call, tool) {
  const schema = (tool && tool.input_schema) || {};
  const properties = schema.properties || {};
  const required = new Set(schema.required || []);
  const args = call.args && typeof call.args === 'object' ? call.args : {};
  const table = el('table', { class: 'args' });
  table.append(el('tr', {}, el('th', {}, 'argument'), el('th', {}, 'value'), el('th', {}, 'schema')));
  const names = Object.keys(args);
  for (const name of names) {
    const declared = properties[name];
    const about = declared
      ? [declared.type || '', required.has(name) ? 'required' : '', declared.description || '']
          .filter(Boolean)
          .join(' · ')
      : 'not in the tool\'s schema';
    table.append(
      el('tr', { class: declared ? '' : 'undeclared' },
        el('td', { class: 'name' }, name),
        el('td', {}, el('pre', {}, pretty(args[name]))),
        el('td', { class: 'about' }, about)),
    );
  }
  if (names.length === 0) {
    table.append(el('tr', {}, el('td', { colspan: '3', class: 'empty' }, 'no arguments')));
  }
  return table;
}

function people(actions) {
  return actions
    .map((a) => (a.person && a.person !== a.principal ? a.person + ' (as ' + a.principal + ')' : a.principal)
      + (a.reason ? ': ' + a.reason : ''))
    .join('; ');
}

// What a card says of its call.
function facts(call, tool) {
  const who = call.principals || {};
  const chain = ['agent ' + who.agent];
  if (who.end_user) chain.push('for user ' + who.end_user);
  if (who.a2a_peer) chain.push('delegated by ' + who.a2a_peer);
  return el('div', { class: 'facts' },
    el('header', {},
      el('span', { class: 'tool' }, call.tool),
      el('span', { class: 'mode mode-' + call.effective_mode }, call.effective_mode),
      el('span', { class: 'state' }, call.state.replace('_', ' ')),
      el('span', { class: 'tenant' }, 'tenant ' + call.tenant)),
    tool && tool.description ? el('p', { class: 'description' }, tool.description) : null,
    el('p', { class: 'who' }, 'Proposed by ' + chain.join(', ') + ', ' + ago(call.proposed_at_unix_ms)),
    argumentsTable(call, tool),
    el('p', { class: 'approvals' },
      'Approvals ' + call.approvals.length + ' of ' + call.required_approvals
        + (call.approvals.length ? ': ' + people(call.approvals) : '')),
    call.state === 'pending'
      ? el('p', { class: 'expiry', 'data-expires': String(call.expires_at_unix_ms) })
      : null,
    el('p', { class: 'hash' }, 'arguments sha256 ' + call.args_sha256),
  );
}

// Whether the signed-in person already approved the call: approvals count once per person.
function approvedByMe(call) {
  return call.approvals.some((a) => (a.person || a.principal) === state.me.person);
}

// What the card offers below its facts: a reviewer of a pending call may approve or reject it,
// or, having approved it, still reject it; a call whose outcome is unknown gets a note.
function offerFor(call) {
  if (call.state === 'pending' && reviewer(call.tenant)) return approvedByMe(call) ? 'approved' : 'decide';
  if (call.state === 'outcome_unknown') return 'resolve';
  return null;
}

function offer(call, kind) {
  if (kind === 'resolve') {
    return [el('p', { class: 'note' },
      'The outcome is unknown: check the upstream, then resolve it with gatehouse approvals resolve.')];
  }
  if (kind !== 'decide' && kind !== 'approved') return [];
  const reason = el('input', { class: 'reason', type: 'text', placeholder: 'Reason (kept in the audit log)' });
  const reject = el('button', { class: 'reject', type: 'button' }, 'Reject');
  const refusal = el('p', { class: 'refusal', role: 'alert' });
  reject.addEventListener('click', () => decide(call.call_id, 'reject',
    { reason: reason.value }, refusal));
  if (kind === 'approved') {
    return [
      el('p', { class: 'note mine' }, 'You approved this call; it waits for the approvals still missing.'),
      el('div', { class: 'actions' }, reason, reject), refusal,
    ];
  }
  const approve = el('button', { class: 'approve', type: 'button' }, 'Approve');
  // The approval is bound to the arguments this card shows (a call's arguments never change).
  const shown = call.args_sha256;
  approve.addEventListener('click', () => decide(call.call_id, 'approve',
    { args_sha256: shown, reason: reason.value }, refusal));
  return [el('div', { class: 'actions' }, reason, approve, reject), refusal];
}

// Brings the call's card up to date and gives it back, making it on first sight. Its facts are
// rebuilt when the call or its tool changes; its reason box, buttons and refusal stay the same
// elements for as long as the call waits for a decision, so what an approver types, focuses or
// is about to click survives every event the page gets.
function card(call) {
  let shown = cards.get(call.call_id);
  if (!shown) {
    shown = { node: el('article', { 'data-call-id': call.call_id }), key: null, facts: null, kind: null, offer: [] };
    cards.set(call.call_id, shown);
  }
  // A notice's link (`/console#call=ID`) marks the call it is about.
  const linked = location.hash === '#call=' + call.call_id;
  shown.node.className = linked ? 'call linked' : 'call';
  shown.node.dataset.state = call.state;
  const tool = state.tools.get(call.tenant + '/' + call.tool);
  const key = JSON.stringify([call, tool || null]);
  if (key !== shown.key) {
    const fresh = facts(call, tool);
    if (shown.facts) shown.facts.replaceWith(fresh);
    else shown.node.prepend(fresh);
    shown.facts = fresh;
    shown.key = key;
  }
  const kind = offerFor(call);
  if (kind !== shown.kind) {
    for (const node of shown.offer) node.remove();
    shown.offer = offer(call, kind);
    shown.node.append(...shown.offer);
    shown.kind = kind;
  }
  return shown.node;
}

function render() {
  const list = $('pending');
  const calls = [...state.calls.values()].sort((a, b) => a.proposed_at_unix_ms - b.proposed_at_unix_ms);
  const nodes = calls.map(card);
  for (const [id, shown] of cards) {
    if (!state.calls.has(id)) {
      shown.node.remove();
      cards.delete(id);
    }
  }
  // Only a card out of place moves: moving one takes the focus from whatever it holds.
  nodes.forEach((node, i) => {
    if (list.children[i] !== node) list.insertBefore(node, list.children[i] || null);
  });
  $('pending-count').textContent = String(calls.length);
  $('pending-empty').hidden = calls.length > 0;
  const history = $('history');
  history.replaceChildren(...state.history.map((call) => {
    const decidedBy = call.rejections.length ? 'rejected by ' + people(call.rejections)
      : call.cancellation ? 'cancelled by ' + people([call.cancellation])
        : call.approvals.length ? 'approved by ' + people(call.approvals) : '';
    return el('li', { 'data-call-id': call.call_id, 'data-state': call.state },
      el('span', { class: 'state' }, call.state.replace('_', ' ')), ' ',
      el('span', { class: 'tool' }, call.tool), ' ',
      el('span', { class: 'tenant' }, call.tenant), ' ',
      el('span', { class: 'when' }, ago(call.proposed_at_unix_ms)), ' ',
      decidedBy ? el('span', { class: 'by' }, decidedBy) : null,
      call.error ? el('span', { class: 'error' }, ' ' + call.error) : null);
  }));
  tick();
}

// ---- data ------------------------------------------------------------------------------

async function toolOf(call) {
  const key = call.tenant + '/' + call.tool;
  if (state.tools.has(key)) return;
  state.tools.set(key, null);
  try {
    const answer = await api('GET', '/api/v1/calls/' + encodeURIComponent(call.call_id));
    state.tools.set(key, answer.tool);
    render();
  } catch (_) {
    state.tools.delete(key);
  }
}

function remember(call) {
  state.history = [call, ...state.history.filter((c) => c.call_id !== call.call_id)]
    .sort((a, b) => b.proposed_at_unix_ms - a.proposed_at_unix_ms)
    .slice(0, HISTORY_LIMIT);
}

function apply(event, seen) {
  if (event.resync) {
    // The unfinished set was just sent whole: what it left out has finished meanwhile.
    for (const [id, call] of state.calls) {
      if (call.tenant === event.tenant && !seen.has(id)) state.calls.delete(id);
    }
    return;
  }
  const call = event.call;
  seen.add(call.call_id);
  if (event.kind === 'removed' || !UNFINISHED.has(call.state)) {
    state.calls.delete(call.call_id);
    remember(call);
  } else {
    state.calls.set(call.call_id, call);
    toolOf(call);
  }
}

function parse(block) {
  const event = { name: 'message', id: null, data: '' };
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') event.name = value;
    else if (field === 'id') event.id = value;
    else if (field === 'data') event.data += (event.data ? '\n' : '') + value;
  }
  return event.data ? event : null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Follows one tenant until signed out, resuming after the last index whose events all came.
async function watch(tenant, signal) {
  let complete = 0;
  let current = 0;
  while (!signal.aborted) {
    const seen = new Set();
    try {
      const response = await fetch('/api/v1/tenants/' + encodeURIComponent(tenant) + '/watch?from=' + complete,
        { headers: { Authorization: 'Bearer ' + state.token }, signal });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        status('Cannot follow ' + tenant + ': ' + ((body.error && body.error.message) || response.status));
        if ([401, 403, 404].includes(response.status)) return;
      } else {
        status('');
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const event = parse(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
            if (!event) continue;
            const data = JSON.parse(event.data);
            if (event.name === 'error') {
              status(data.message);
              continue;
            }
            if (data.index !== current) {
              complete = current;
              current = data.index;
            }
            if (event.name === 'resync') complete = data.index;
            data.tenant = tenant;
            apply(data, seen);
            render();
          }
        }
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    status('Connection lost; reconnecting…');
    await sleep(1000);
  }
}

async function loadHistory(tenant) {
  for (const finished of FINISHED) {
    try {
      const page = await api('GET', '/api/v1/tenants/' + encodeURIComponent(tenant) + '/calls?page_size=20&state=' + finished);
      page.calls.forEach(remember);
    } catch (_) { /* the live list matters more */ }
  }
  render();
}

async function decide(id, verb, body, refusal) {
  refusal.textContent = '';
  try {
    const answer = await api('POST', '/api/v1/calls/' + encodeURIComponent(id) + '/' + verb, body);
    const call = answer.call;
    if (UNFINISHED.has(call.state)) state.calls.set(call.call_id, call);
    else {
      state.calls.delete(call.call_id);
      remember(call);
    }
    render();
  } catch (error) {
    refusal.textContent = error instanceof Refusal ? error.code + ': ' + error.message : String(error);
  }
}

function status(text) {
  $('link').textContent = text;
}

// ---- sign in ---------------------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  try {
    state.me = await api('GET', '/api/v1/me');
  } catch (error) {
    state.token = null;
    sessionStorage.removeItem('gatehouse-token');
    $('sign-in-error').textContent = error instanceof Refusal ? error.code + ': ' + error.message : String(error);
    return;
  }
  sessionStorage.setItem('gatehouse-token', token);
  $('sign-in').hidden = true;
  $('console').hidden = false;
  $('who').hidden = false;
  $('who-name').textContent = state.me.person === state.me.principal
    ? state.me.principal : state.me.person + ' (as ' + state.me.principal + ')';
  if (state.me.tenants.length === 0) status('You review no tenant\'s calls.');
  state.abort = new AbortController();
  for (const { tenant } of state.me.tenants) {
    watch(tenant, state.abort.signal);
    loadHistory(tenant);
  }
  render();
}

function signOut() {
  if (state.abort) state.abort.abort();
  sessionStorage.removeItem('gatehouse-token');
  state.token = null;
  state.me = null;
  state.calls.clear();
  state.history = [];
  $('console').hidden = true;
  $('who').hidden = true;
  $('sign-in').hidden = false;
  $('token').value = '';
}

document.addEventListener('DOMContentLoaded', () => {
  $('sign-in-form').addEventListener('submit', (event) => {
    event.preventDefault();
    $('sign-in-error').textContent = '';
    signIn($('token').value.trim());
  });
  $('sign-out').addEventListener('click', signOut);
  window.addEventListener('hashchange', render);
  setInterval(tick, 1000);
  const kept = sessionStorage.getItem('gatehouse-token');
  if (kept) signIn(kept);
});
