// agentbus console: an operator's view of the admin API. No framework and no build step.
// Everything received is shown with textContent, never as HTML; the charts are SVG elements made
// here. The key is sent only in the Authorization header, never in a URL.
'use strict';

(() => {
  const KEY_STORE = 'agentbus.console.key';
  const PAGES = ['hosts', 'agents', 'instances', 'instance', 'deadletters', 'limits'];
  // How often a page reads its data again while it is shown, in milliseconds.
  const REFRESH = {hosts: 3000, agents: 5000, instance: 5000, limits: 5000};
  // The queue charts of the limits page: the samples of the last QUEUE_WINDOW, in slots of
  // QUEUE_SLOT (each slot shows the most its samples held).
  const QUEUE_WINDOW = 5 * 60 * 1000;
  const QUEUE_SLOT = 10 * 1000;
  const SVG = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);

  // The key lives in this closure; sessionStorage holds it only when the user asks.
  const state = {
    key: '',
    role: '', // 'tenant' (a tenant admin) or 'system' (a system admin), once the key is checked
    tenant: '',
    tenants: [],
    agents: [], // every agent GET /api/user/agents listed for the key
    page: 'hosts',
    params: new URLSearchParams(),
    gen: 0, // changes with the key, tenant and page: answers of an older one are dropped
    loading: 0,
    lastLoad: 0,
    inst: {cursors: [''], index: 0, next: ''},
    dl: {after: '', next: ''},
    // The limits page: its tenant's record as last read, whether the form shows it, and the
    // samples of its queues from the hosts view ({at, agents: {name: {queued, running, oldestWaitMs, crowding}}}).
    lim: {tenant: '', record: null, filled: false, samples: []},
    hostColours: new Map(), // host id -> index, stable while the page is open
  };

  // ---- small helpers ------------------------------------------------------------------------

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) { e.className = className; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function append(parent, ...children) {
    for (const c of children) {
      if (c !== null && c !== undefined) {
        parent.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
      }
    }
    return parent;
  }

  function link(href, text, className) {
    const a = el('a', className, text);
    a.href = href;
    return a;
  }

  function setStatus(text, kind) {
    const s = $('status');
    s.textContent = text;
    s.className = kind || '';
  }

  function setNote(id, text, kind) {
    const n = $(id);
    n.textContent = text || '';
    n.className = 'note' + (kind ? ' ' + kind : '');
  }

  function badge(id, text, kind) {
    const b = $(id);
    b.textContent = text;
    b.className = 'badge ' + (kind || '');
  }

  // ApiError is a failed API call: its HTTP status (0 when the API could not be reached), a
  // line for the reader, and the problem's detail when the answer was a problem.
  class ApiError extends Error {
    constructor(status, message, detail) {
      super(message);
      this.status = status;
      this.detail = detail || '';
    }
  }

  // failure turns a failed answer into an ApiError: a problem's status, title and detail.
  async function failure(resp) {
    const text = await resp.text().catch(() => '');
    try {
      const p = JSON.parse(text);
      if (p && p.title) {
        return new ApiError(resp.status, `${p.status || resp.status} ${p.title}${p.detail ? ': ' + p.detail : ''}`, p.detail);
      }
    } catch (_) { /* not JSON */ }
    return new ApiError(resp.status, `${resp.status} ${resp.statusText}${text ? ': ' + text.slice(0, 200) : ''}`);
  }

  // call calls the admin API with the key in the Authorization header, and body, when given, as
  // JSON. It answers the status and the decoded JSON (null for an empty body), or throws an
  // ApiError.
  async function call(method, path, body) {
    const headers = {Authorization: 'Bearer ' + state.key};
    const init = {method, headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer'};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, 'cannot reach the API: ' + err.message);
    }
    if (!resp.ok) {
      throw await failure(resp);
    }
    const text = await resp.text();
    return {status: resp.status, value: text ? JSON.parse(text) : null};
  }

  // api calls the admin API without a body and answers the decoded JSON.
  async function api(method, path) {
    return (await call(method, path)).value;
  }

  function tenantPath(rest, tenant) {
    return `/api/v1/admin/tenants/${encodeURIComponent(tenant || state.tenant)}${rest}`;
  }

  const pad = (n) => String(n).padStart(2, '0');

  // time shows an RFC 3339 time as UTC, to the second.
  function time(iso) {
    if (!iso) { return '–'; }
    const d = new Date(iso);
    if (isNaN(d)) { return iso; }
    return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
      `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
  }

  function clock(d) {
    return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
  }

  function age(ms) {
    if (ms === null || ms === undefined) { return '–'; }
    if (ms < 1000) { return `${Math.round(ms)} ms`; }
    if (ms < 120000) { return `${(ms / 1000).toFixed(1)} s`; }
    if (ms < 7200000) { return `${Math.round(ms / 60000)} min`; }
    return `${(ms / 3600000).toFixed(1)} h`;
  }

  function fmtMs(v) {
    if (v === null || v === undefined) { return '–'; }
    if (v < 10) { return `${v.toFixed(2)} ms`; }
    if (v < 1000) { return `${Math.round(v)} ms`; }
    return `${(v / 1000).toFixed(2)} s`;
  }

  function fmtRate(v) {
    if (v === null || v === undefined) { return '–'; }
    return v < 10 ? `${v.toFixed(2)}/s` : `${Math.round(v)}/s`;
  }

  function fmtPct(v) {
    if (v === null || v === undefined) { return '–'; }
    return v < 10 && v !== 0 ? `${v.toFixed(1)} %` : `${Math.round(v)} %`;
  }

  const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

  // fmtBytes shows a number of bytes in binary units, to three figures.
  function fmtBytes(v) {
    if (v === null || v === undefined) { return '–'; }
    let i = 0;
    while (v >= 1024 && i < BYTE_UNITS.length - 1) {
      v /= 1024;
      i++;
    }
    if (i === 0 || Number.isInteger(v)) { return `${v} ${BYTE_UNITS[i]}`; }
    return `${v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : Math.round(v)} ${BYTE_UNITS[i]}`;
  }

  // exactBytes writes a number of bytes in the largest binary unit that holds it whole, for the
  // form: 536870912 is '512 MiB'; parseBytes reads it back.
  function exactBytes(v) {
    let i = 0;
    while (v > 0 && v % 1024 === 0 && i < BYTE_UNITS.length - 1) {
      v /= 1024;
      i++;
    }
    return i === 0 ? String(v) : `${v} ${BYTE_UNITS[i]}`;
  }

  function parseBytes(text) {
    const m = /^(\d+(?:\.\d+)?)\s*([kmgtp]i?b|b)?$/i.exec(text);
    if (!m) { return null; }
    const unit = (m[2] || 'b').toLowerCase();
    const binary = BYTE_UNITS.findIndex((u) => u.toLowerCase() === unit);
    const decimal = ['b', 'kb', 'mb', 'gb', 'tb', 'pb'].indexOf(unit);
    return Math.round(Number(m[1]) * (binary >= 0 ? Math.pow(1024, binary) : Math.pow(1000, decimal)));
  }

  function pretty(value) {
    return JSON.stringify(value, null, 2);
  }

  function table(headers, rows, caption) {
    const t = el('table');
    if (caption) { t.appendChild(el('caption', 'note', caption)); }
    const head = el('tr');
    // A header starting with '#' heads a column of numbers, aligned right: '#Events'.
    for (const h of headers) {
      const num = h.startsWith('#') && h.length > 1;
      const th = el('th', num ? 'num' : '', num ? h.slice(1) : h);
      th.scope = 'col';
      head.appendChild(th);
    }
    append(t, append(el('thead'), head));
    const body = el('tbody');
    for (const r of rows) { body.appendChild(r); }
    t.appendChild(body);
    return t;
  }

  function row(cells, attrs) {
    const tr = el('tr');
    for (const c of cells) {
      const td = el('td');
      if (c instanceof Node) {
        td.appendChild(c);
      } else if (c && typeof c === 'object' && 'text' in c) {
        td.textContent = c.text;
        if (c.className) { td.className = c.className; }
      } else {
        td.textContent = c === null || c === undefined ? '–' : String(c);
      }
      tr.appendChild(td);
    }
    for (const [k, v] of Object.entries(attrs || {})) {
      tr.dataset[k] = v;
    }
    return tr;
  }

  function option(select, value, label) {
    const o = document.createElement('option');
    o.value = value;
    o.textContent = label || value;
    select.appendChild(o);
  }

  function requestLabel(type, method) {
    if (method && method.length > 60) {
      method = method.slice(0, 59) + '…';
    }
    return method ? `${type} ${method}` : type;
  }

  // A button that acts on the second press: the first arms it for 5 seconds.
  function twoStep(button, label, armedLabel, action) {
    let timer = null;
    button.textContent = label;
    button.addEventListener('click', () => {
      if (!button.classList.contains('armed')) {
        button.classList.add('armed');
        button.textContent = armedLabel;
        timer = setTimeout(() => {
          button.classList.remove('armed');
          button.textContent = label;
        }, 5000);
        return;
      }
      clearTimeout(timer);
      button.classList.remove('armed');
      button.textContent = label;
      action();
    });
  }

  // keepFocus runs render, which rebuilds what is inside box, and gives the focus back to the
  // same link or button when it was inside: a refresh does not throw a keyboard user out.
  function keepFocus(box, render) {
    const f = document.activeElement;
    let sel = null;
    if (f && f !== box && box.contains(f)) {
      if (f.getAttribute('href')) {
        sel = `[href="${CSS.escape(f.getAttribute('href'))}"]`;
      } else if (f.getAttribute('aria-label')) {
        sel = `[aria-label="${CSS.escape(f.getAttribute('aria-label'))}"]`;
      }
    }
    render();
    if (sel) {
      const again = box.querySelector(sel);
      if (again) { again.focus(); }
    }
  }

  // hostClass gives each host a colour class, h0…h7, and a short label, H1, H2, …: kept while
  // the page is open, so a host keeps its colour across refreshes.
  function hostMark(id) {
    if (!state.hostColours.has(id)) {
      state.hostColours.set(id, state.hostColours.size);
    }
    const i = state.hostColours.get(id);
    return {cls: 'h' + (i % 8), label: 'H' + (i + 1)};
  }

  function hostLabel(id) {
    const m = hostMark(id);
    const s = el('span', 'hostlabel ' + m.cls, m.label);
    s.title = id;
    return s;
  }

  // ---- key, role and tenant -----------------------------------------------------------------

  function rememberKey() {
    try {
      if ($('remember').checked && state.key) {
        sessionStorage.setItem(KEY_STORE, state.key);
      } else {
        sessionStorage.removeItem(KEY_STORE);
      }
    } catch (_) { /* storage disabled: memory only */ }
  }

  function forgetKey() {
    state.key = '';
    state.role = '';
    state.tenant = '';
    state.tenants = [];
    state.agents = [];
    state.gen++;
    $('key').value = '';
    $('remember').checked = false;
    rememberKey();
    fillTenants();
    $('who').textContent = '';
    setStatus('Key forgotten.');
    route();
  }

  // openKey finds out what the key may see: a tenant admin's tenant, or a system admin's
  // tenants. A user key, or an unknown one, is refused with the API's answer.
  async function openKey() {
    state.gen++;
    state.role = '';
    setStatus('Checking the key…');
    try {
      const ans = await api('GET', '/api/user/agents');
      state.agents = ans.agents || [];
      if (ans.tenant) {
        try {
          await api('GET', tenantPath('', ans.tenant));
        } catch (err) {
          if (err.status === 403) {
            throw new ApiError(403, `a key of tenant ${ans.tenant}, but not an admin key (${err.message})`);
          }
          throw err;
        }
        state.role = 'tenant';
        state.tenants = [ans.tenant];
        state.tenant = ans.tenant;
      } else {
        const t = await api('GET', '/api/v1/admin/tenants');
        state.role = 'system';
        state.tenants = (t.tenants || []).map((x) => x.id).sort();
        if (!state.tenants.includes(state.tenant)) {
          state.tenant = state.tenants.includes('default') ? 'default' : (state.tenants[0] || '');
        }
      }
    } catch (err) {
      state.role = '';
      fillTenants();
      $('who').textContent = '';
      setStatus('The key cannot open the console: ' + err.message, 'error');
      route();
      return;
    }
    fillTenants();
    $('who').textContent = state.role === 'system' ?
      'System admin: every tenant; pick one above.' : `Tenant admin of ${state.tenant}.`;
    setStatus(state.tenant ? `Showing tenant ${state.tenant}.` : 'No tenant exists yet.', 'ok');
    route();
  }

  function fillTenants() {
    const sel = $('tenant');
    sel.replaceChildren();
    for (const t of state.tenants) {
      option(sel, t);
    }
    sel.value = state.tenant;
    sel.disabled = state.role !== 'system';
  }

  // visibleAgents are the agents of the shown tenant: a tenant key is given only those; a
  // system key gets all, with the tenants each is restricted to.
  function visibleAgents() {
    return state.agents.filter((a) => state.role !== 'system' || !a.tenants || a.tenants.length === 0 ||
      a.tenants.includes(state.tenant)).map((a) => a.name).sort();
  }

  function fillAgentSelect(id, chosen, withAll) {
    const sel = $(id);
    sel.replaceChildren();
    if (withAll) { option(sel, '', 'every agent'); }
    const names = visibleAgents();
    for (const n of names) { option(sel, n); }
    if (chosen && !names.includes(chosen)) { option(sel, chosen); }
    sel.value = chosen || (withAll ? '' : (names.includes('Echo') ? 'Echo' : names[0] || ''));
  }

  // ---- pages and refreshing -----------------------------------------------------------------

  function parseHash() {
    const h = location.hash;
    if (!h.startsWith('#/')) {
      return null;
    }
    const q = h.indexOf('?');
    const name = q < 0 ? h.slice(2) : h.slice(2, q);
    return {page: PAGES.includes(name) ? name : 'hosts', params: new URLSearchParams(q < 0 ? '' : h.slice(q + 1))};
  }

  function go(page, params) {
    const q = params ? params.toString() : '';
    const target = '#/' + page + (q ? '?' + q : '');
    if (location.hash === target) {
      route();
    } else {
      location.hash = target;
    }
  }

  function route() {
    const r = parseHash() || {page: state.page, params: state.params};
    state.page = r.page;
    state.params = r.params;
    state.gen++;
    for (const p of PAGES) {
      $('page-' + p).hidden = p !== state.page;
    }
    const nav = state.page === 'instance' ? 'instances' : state.page;
    for (const a of document.querySelectorAll('header nav a')) {
      if (a.id === 'nav-' + nav) {
        a.setAttribute('aria-current', 'page');
      } else {
        a.removeAttribute('aria-current');
      }
    }
    const titles = {hosts: 'Hosts', agents: 'Agents', instances: 'Instances', instance: 'Instance', deadletters: 'Dead letters',
      limits: 'Limits'};
    document.title = `${titles[state.page]} · agentbus console`;
    if (!state.role || !state.tenant) {
      noKey();
      return;
    }
    enter[state.page]();
    load();
  }

  // noKey shows, on every page, that it has nothing to show yet.
  function noKey() {
    const why = !state.role ? 'No key yet: paste a tenant-admin or system-admin key above.' : 'No tenant to show.';
    for (const id of ['hosts-error', 'agents-error', 'instances-error', 'instance-error', 'dl-error', 'limits-error']) {
      setNote(id, why, 'error');
    }
    badge('hosts-live', 'not loaded');
    badge('agents-live', 'not loaded');
    badge('limits-live', 'not loaded');
    for (const id of ['host-list', 'partition-maps', 'agent-stats', 'inst-queue', 'inst-recent', 'inst-dead', 'inst-timers', 'inst-runs',
      'limits-agents', 'usage-box', 'queue-charts']) {
      $(id).replaceChildren();
    }
    for (const id of ['instances-table', 'dl-table', 'tenant-table', 'limits-table']) {
      $(id).tBodies[0].replaceChildren();
    }
    for (const id of ['hosts-meta', 'agents-meta', 'agents-quiet', 'instances-empty', 'dl-empty', 'instances-caption', 'limits-caption',
      'queues-quiet', 'limits-action']) {
      $(id).textContent = '';
    }
    $('instance-body').hidden = true;
    $('tenant-ranking').hidden = true;
    $('limits-edit').hidden = true;
    state.lim = {tenant: '', record: null, filled: false, samples: []};
  }

  // load reads the shown page's data; answers that arrive after the page, tenant or key changed
  // are dropped by the page (its gen no longer matches).
  async function load() {
    const page = state.page;
    if (!state.role || !state.tenant || !loaders[page]) {
      return;
    }
    state.loading++;
    try {
      await loaders[page](state.gen);
    } catch (err) {
      setStatus('The page failed: ' + err.message, 'error');
    } finally {
      state.loading--;
      state.lastLoad = Date.now();
    }
  }

  function loaded(page) {
    const s = $('page-' + page);
    s.dataset.loaded = String(Number(s.dataset.loaded || '0') + 1);
    s.dataset.tenant = state.tenant;
  }

  function tick() {
    const every = REFRESH[state.page];
    if (!every || !state.role || document.hidden || state.loading > 0) {
      return;
    }
    if (Date.now() - state.lastLoad >= every) {
      load();
    }
  }

  // enter prepares a page when it is opened (its forms from the address); loaders read and show
  // its data, and are called again to refresh it.
  const enter = {
    hosts() {},
    agents() {},
    instances() {
      fillAgentSelect('inst-agent', state.params.get('agent') || $('inst-agent').value);
      state.inst = {cursors: [''], index: 0, next: ''};
    },
    instance() {
      const id = state.params.get('id') || '';
      $('inst-id').textContent = id || '–';
      $('instance-body').hidden = true;
      setNote('inst-action', '');
      const agent = id.split(':')[1] || '';
      $('inst-back').href = '#/instances' + (agent ? '?agent=' + encodeURIComponent(agent) : '');
    },
    deadletters() {
      fillAgentSelect('dl-agent', state.params.get('agent') || '', true);
      state.dl = {after: '', next: ''};
    },
    limits() {
      state.lim.filled = false;
      setNote('limits-action', '');
      $('limits-edit').hidden = state.role !== 'system';
    },
  };

  const loaders = {
    hosts: loadHosts,
    agents: loadAgents,
    instances: loadInstances,
    instance: loadInstance,
    deadletters: loadDeadLetters,
    limits: loadLimits,
  };

  // ---- hosts and partitions -----------------------------------------------------------------

  async function loadHosts(gen) {
    const system = state.role === 'system';
    let view;
    try {
      view = await api('GET', system ? '/api/v1/admin/hosts' : tenantPath('/hosts'));
    } catch (err) {
      if (gen !== state.gen) { return; }
      setNote('hosts-error', 'Reading the hosts failed: ' + err.message, 'error');
      badge('hosts-live', 'error', 'error');
      return;
    }
    if (gen !== state.gen) { return; }
    setNote('hosts-error', '');
    renderHosts(view, system);
    badge('hosts-live', 'updated ' + clock(new Date()), 'live');
    loaded('hosts');
  }

  function renderHosts(view, system) {
    const hosts = (view.hosts || []).slice().sort((a, b) => a.id.localeCompare(b.id));
    for (const h of hosts) { hostMark(h.id); }
    $('hosts-meta').textContent = `${hosts.length} live host${hosts.length === 1 ? '' : 's'} at ${time(view.at)}; ` +
      (system ? 'every agent (the system view).' : `the agents tenant ${state.tenant} may use; the counts cover every tenant's requests.`);

    const list = $('host-list');
    list.replaceChildren();
    if (hosts.length === 0) {
      list.appendChild(el('li', 'note', 'No live workflow host: no heartbeat is fresh.'));
    }
    for (const h of hosts) {
      const m = hostMark(h.id);
      const li = el('li', 'card ' + m.cls);
      li.dataset.host = h.id;
      const title = append(el('h4'), hostLabel(h.id), el('code', '', h.id));
      if (h.leaving) { title.appendChild(el('span', 'badge loading', 'leaving')); }
      li.appendChild(title);
      const owned = Object.entries(h.partitions || {}).map(([a, ps]) => `${a}: ${ps.length ? ps.join(', ') : 'none'}`);
      const dl = el('dl');
      const item = (k, v) => append(dl, el('dt', '', k), el('dd', '', v));
      item('started', time(h.startedAt));
      item('agents', (h.agents || []).join(', ') || 'none');
      item('partitions', owned.join('; ') || 'none');
      item('in flight', h.inFlight === null || h.inFlight === undefined ? 'not reported' : String(h.inFlight));
      item('heartbeat', age(h.heartbeatAgeMs) + ' ago');
      li.appendChild(dl);
      list.appendChild(li);
    }

    const maps = $('partition-maps');
    maps.replaceChildren();
    const agents = view.agents || [];
    if (agents.length === 0) {
      maps.appendChild(el('p', 'note', 'No agent has partitions: no workflow host runs an agent this view shows.'));
    }
    for (const a of agents) {
      const box = el('div', 'pmap');
      box.dataset.agent = a.agent;
      const parts = a.partitions || [];
      const pending = parts.reduce((s, p) => s + (p.pending || 0), 0);
      const ack = parts.reduce((s, p) => s + (p.ackPending || 0), 0);
      const orphans = parts.filter((p) => !p.holders || p.holders.length === 0).length;
      box.appendChild(el('h4', '', a.agent));
      box.appendChild(el('p', 'note', `${parts.length} partitions; ${pending} pending, ${ack} delivered and not acknowledged` +
        (orphans ? `; ${orphans} without a live holder` : '') + '.'));
      const grid = el('ul', 'pgrid');
      grid.setAttribute('aria-label', `Partitions of ${a.agent}`);
      for (const p of parts) {
        const holders = p.holders || [];
        const cell = el('li', 'pcell');
        cell.dataset.partition = String(p.partition);
        cell.dataset.holders = holders.join(' ');
        if (holders.length === 0) {
          cell.classList.add('none');
        } else {
          cell.classList.add(hostMark(holders[0]).cls);
          if (holders.length > 1) { cell.classList.add('split'); }
        }
        if (p.pending > 0) { cell.classList.add('backlog'); }
        const top = append(el('div'), el('span', 'pnum', `p${p.partition} `));
        if (holders.length === 0) {
          top.appendChild(el('strong', '', 'none'));
        }
        for (const h of holders) { append(top, hostLabel(h), ' '); }
        if (holders.length > 1) { top.appendChild(el('span', '', '2 hosts')); }
        cell.appendChild(top);
        cell.appendChild(el('div', 'counts', `pend ${p.pending} · ack ${p.ackPending}`));
        if (p.redelivered > 0) { cell.appendChild(el('div', '', `${p.redelivered} redelivered`)); }
        if (p.noConsumer) { cell.appendChild(el('div', '', 'never pulled')); }
        cell.title = `partition ${p.partition}: ${holders.length ? 'held by ' + holders.join(', ') : 'no live holder'}; ` +
          `${p.pending} pending, ${p.ackPending} not acknowledged, ${p.redelivered} redelivered`;
        grid.appendChild(cell);
      }
      box.appendChild(grid);
      maps.appendChild(box);
    }
  }

  // ---- agents: stats and charts -------------------------------------------------------------

  async function loadAgents(gen) {
    const system = state.role === 'system';
    const q = '?window=' + encodeURIComponent($('stats-window').value);
    const calls = [api('GET', tenantPath('/stats') + q)];
    if (system) { calls.push(api('GET', '/api/v1/admin/stats' + q)); }
    const [mine, all] = await Promise.allSettled(calls);
    if (gen !== state.gen) { return; }
    if (mine.status === 'rejected') {
      setNote('agents-error', 'Reading the stats failed: ' + mine.reason.message, 'error');
      badge('agents-live', 'error', 'error');
      return;
    }
    setNote('agents-error', '');
    keepFocus($('agent-stats'), () => renderStats(mine.value));
    $('tenant-ranking').hidden = !system;
    if (system) {
      if (all.status === 'rejected') {
        setNote('agents-error', 'Reading every tenant\'s stats failed: ' + all.reason.message, 'error');
      } else {
        renderTenants(all.value);
      }
    }
    badge('agents-live', 'updated ' + clock(new Date()), 'live');
    loaded('agents');
  }

  function renderStats(s) {
    const from = new Date(s.from);
    const to = new Date(s.to);
    const span = Math.max(1, (to - from) / 1000);
    let meta = `Tenant ${s.tenant}, ${time(s.from)} to ${time(s.to)}, ${s.slotSeconds}-second slots; ` +
      `merged from ${s.ingresses.answered} ingress instance${s.ingresses.answered === 1 ? '' : 's'}`;
    if (s.ingresses.unanswered) { meta += `, ${s.ingresses.unanswered} did not answer in time (their calls are missing)`; }
    if (s.overCap) { meta += '; an ingress held as many agents as it keeps, so some calls are not counted'; }
    $('agents-meta').textContent = meta + '.';

    const box = $('agent-stats');
    box.replaceChildren();
    const agents = s.agents || [];
    if (agents.length === 0) {
      box.appendChild(el('p', 'note', `No calls to any agent of tenant ${s.tenant} in the window.`));
    }
    const grid = el('div', 'agents');
    for (const a of agents) {
      grid.appendChild(agentCard(a, s, span));
    }
    box.appendChild(grid);

    const called = new Set(agents.map((a) => a.agent));
    const quiet = visibleAgents().filter((n) => !called.has(n));
    $('agents-quiet').textContent = quiet.length ? `No calls in the window: ${quiet.join(', ')}.` : '';
  }

  function agentCard(a, s, span) {
    const card = el('article', 'agent-card');
    card.dataset.agent = a.agent;
    const q = new URLSearchParams({agent: a.agent});
    card.appendChild(append(el('h3'), el('span', '', a.agent),
      link('#/instances?' + q, 'instances'), link('#/deadletters?' + q, 'dead letters')));

    const t = a.totals;
    const figures = el('dl', 'figures');
    const fig = (k, v, name) => {
      const d = append(el('div'), el('dt', '', k), el('dd', '', v));
      d.dataset.figure = name;
      figures.appendChild(d);
    };
    fig('requests', String(t.requests), 'requests');
    fig('average rate', fmtRate(t.requests / span), 'rate');
    fig('errors', `${t.errors} (${fmtPct(t.requests ? 100 * t.errors / t.requests : 0)})`, 'errors');
    fig('client errors', String(t.clientErrors), 'clientErrors');
    fig('p50', fmtMs(t.p50Ms), 'p50');
    fig('p99', fmtMs(t.p99Ms), 'p99');
    card.appendChild(figures);

    const slots = a.slots || [];
    const to = new Date(s.to);
    const rate = slots.map((sl, i) => {
      if (i < slots.length - 1) { return sl.requests / s.slotSeconds; }
      // The current slot is still filling: its rate so far, over at least 5 seconds.
      return sl.requests / Math.max(5, (to - new Date(sl.start)) / 1000);
    });
    const errors = slots.map((sl) => sl.requests ? 100 * sl.errors / sl.requests : null);
    const p50 = slots.map((sl) => sl.p50Ms === undefined ? null : sl.p50Ms);
    const p99 = slots.map((sl) => sl.p99Ms === undefined ? null : sl.p99Ms);
    const minutes = Math.round(s.windowSeconds / 60);
    const charts = el('div', 'charts');
    charts.appendChild(chart({name: 'rate', title: 'Request rate', unit: fmtRate, minTop: 1, minutes,
      series: [{key: 'rate', label: 'requests per second', values: rate}]}));
    charts.appendChild(chart({name: 'errors', title: 'Error rate (5xx)', unit: fmtPct, minTop: 10, minutes,
      series: [{key: 'errors', label: 'errors per request', values: errors}]}));
    charts.appendChild(chart({name: 'latency', title: 'Latency p50 / p99', unit: fmtMs, minTop: 1, minutes,
      series: [{key: 'p50', label: 'p50', values: p50}, {key: 'p99', label: 'p99', values: p99}]}));
    card.appendChild(charts);
    return card;
  }

  // niceTop rounds a chart's highest value up to 1, 2 or 5 times a power of ten.
  function niceTop(v, min) {
    v = Math.max(v, min);
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) {
      if (v <= m * p) { return m * p; }
    }
    return 10 * p;
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      e.setAttribute(k, String(v));
    }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  // chart draws series of values, one per slot (null where there is none), as lines in a small
  // SVG: the y axis from 0 to a round top, the x axis the window, now at the right.
  function chart(c) {
    const W = 300, H = 90, L = 46, R = 8, T = 8, B = 16;
    const n = Math.max(...c.series.map((s) => s.values.length), 2);
    const all = c.series.flatMap((s) => s.values.filter((v) => v !== null));
    const top = niceTop(all.length ? Math.max(...all) : 0, c.minTop);
    const x = (i) => L + (W - L - R) * i / (n - 1);
    const y = (v) => T + (H - T - B) * (1 - v / top);

    const fig = el('figure');
    fig.dataset.chart = c.name;
    const capId = `cap-${c.name}-${Math.random().toString(36).slice(2, 8)}`;
    const cap = el('figcaption', '', c.title);
    cap.id = capId;
    if (c.series.length > 1) {
      cap.appendChild(document.createTextNode(' '));
      for (const s of c.series) {
        append(cap, el('span', 'legend k-' + s.key, '■ ' + s.label), ' ');
      }
    }
    const svg = svgEl('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-labelledby': capId});
    const described = c.series.map((s) => {
      const vals = s.values.filter((v) => v !== null);
      return vals.length ? `${s.label}: latest ${c.unit(vals[vals.length - 1])}, highest ${c.unit(Math.max(...vals))}` :
        `${s.label}: ${c.none || 'no calls'}`;
    }).join('; ');
    svg.appendChild(svgEl('title', {}, `${c.title} over the last ${c.minutes} minutes. ${described}.`));
    for (const v of [0, top / 2, top]) {
      svg.appendChild(svgEl('line', {class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v)}));
    }
    svg.appendChild(svgEl('text', {class: 'axis', x: L - 3, y: y(top) + 3, 'text-anchor': 'end'}, c.unit(top).replace(' ', '')));
    svg.appendChild(svgEl('text', {class: 'axis', x: L - 3, y: y(0) + 3, 'text-anchor': 'end'}, '0'));
    svg.appendChild(svgEl('text', {class: 'axis', x: L, y: H - 3}, `-${c.minutes}m`));
    svg.appendChild(svgEl('text', {class: 'axis', x: W - R, y: H - 3, 'text-anchor': 'end'}, 'now'));

    for (const s of c.series) {
      let d = '';
      let points = 0;
      let prev = false;
      let last = null;
      s.values.forEach((v, i) => {
        if (v === null) {
          prev = false;
          return;
        }
        d += `${prev ? 'L' : 'M'}${x(i).toFixed(1)} ${y(Math.min(v, top)).toFixed(1)} `;
        prev = true;
        points++;
        last = i;
      });
      const path = svgEl('path', {class: 's-' + s.key, d: d.trim() || 'M0 0'});
      path.dataset.series = s.key;
      path.dataset.points = String(points);
      svg.appendChild(path);
      if (last !== null) {
        // The newest point, drawn also when it has no neighbour to make a line with.
        svg.appendChild(svgEl('circle', {class: 's-' + s.key, cx: x(last).toFixed(1), cy: y(Math.min(s.values[last], top)).toFixed(1), r: 2.5}));
      }
    }
    fig.appendChild(cap);
    fig.appendChild(svg);
    return fig;
  }

  function renderTenants(all) {
    const body = $('tenant-table').tBodies[0];
    body.replaceChildren();
    const t = all.tenants || [];
    for (const x of t) {
      body.appendChild(row([x.tenant, {text: x.totals.requests, className: 'num'}, {text: x.totals.errors, className: 'num'},
        {text: x.totals.clientErrors, className: 'num'}, fmtMs(x.totals.p50Ms), fmtMs(x.totals.p99Ms)], {tenant: x.tenant}));
    }
    if (all.otherTenants) {
      const o = all.otherTenants;
      body.appendChild(row([`${o.tenants} other tenant${o.tenants === 1 ? '' : 's'}`, {text: o.totals.requests, className: 'num'},
        {text: o.totals.errors, className: 'num'}, {text: o.totals.clientErrors, className: 'num'}, fmtMs(o.totals.p50Ms), fmtMs(o.totals.p99Ms)]));
    }
    if (t.length === 0) {
      body.appendChild(row([{text: 'No calls in the window.', className: 'note'}, '', '', '', '', '']));
    }
  }

  // ---- instances ----------------------------------------------------------------------------

  function localToISO(v) {
    if (!v) { return ''; }
    const d = new Date(v);
    return isNaN(d) ? '' : d.toISOString();
  }

  async function loadInstances(gen) {
    const agent = $('inst-agent').value;
    const body = $('instances-table').tBodies[0];
    if (!agent) {
      body.replaceChildren();
      setNote('instances-error', '');
      $('instances-empty').textContent = `Tenant ${state.tenant} has no agent to list.`;
      return;
    }
    const q = new URLSearchParams({limit: $('inst-limit').value});
    for (const [k, v] of [['status', $('inst-status').value], ['prefix', $('inst-prefix').value.trim()],
      ['activeAfter', localToISO($('inst-after').value)], ['activeBefore', localToISO($('inst-before').value)],
      ['cursor', state.inst.cursors[state.inst.index]]]) {
      if (v) { q.set(k, v); }
    }
    let page;
    try {
      page = await api('GET', tenantPath(`/agents/${encodeURIComponent(agent)}/instances?${q}`));
    } catch (err) {
      if (gen !== state.gen) { return; }
      setNote('instances-error', 'Listing the instances failed: ' + err.message, 'error');
      return;
    }
    if (gen !== state.gen) { return; }
    setNote('instances-error', '');
    state.inst.next = page.next || '';
    body.replaceChildren();
    const items = page.instances || [];
    for (const i of items) {
      const a = link('#/instance?' + new URLSearchParams({id: i.workflowId}), i.activation);
      a.title = i.workflowId;
      const status = el('span', 'badge status-' + i.status, i.status);
      body.appendChild(row([a, i.workflowType, status, time(i.startedAt), time(i.lastActiveAt), {text: i.events, className: 'num'}],
        {workflowId: i.workflowId, status: i.status}));
    }
    $('instances-caption').textContent = `Instances of ${agent} in tenant ${state.tenant}, newest run first; page ${state.inst.index + 1}.`;
    $('instances-empty').textContent = items.length ? '' : (state.inst.next ?
      'No instance on this page matches; Older looks further.' : `No instance of ${agent} matches.`);
    $('inst-older').disabled = !state.inst.next;
    $('inst-newer').disabled = state.inst.index === 0;
    loaded('instances');
  }

  function listInstances() {
    const agent = $('inst-agent').value;
    state.inst = {cursors: [''], index: 0, next: ''};
    if (state.params.get('agent') !== agent) {
      go('instances', new URLSearchParams({agent}));
    } else {
      load();
    }
  }

  // ---- one instance -------------------------------------------------------------------------

  function instancePath(id, rest) {
    return tenantPath(`/instances/${encodeURIComponent(id)}${rest || ''}`);
  }

  async function loadInstance(gen) {
    const id = state.params.get('id');
    if (!id) {
      setNote('instance-error', 'No instance given: pick one in the instance list.', 'error');
      return;
    }
    const [inst, queue] = await Promise.allSettled([api('GET', instancePath(id)), api('GET', instancePath(id, '/queue'))]);
    if (gen !== state.gen) { return; }
    if (inst.status === 'rejected') {
      setNote('instance-error', 'Reading the instance failed: ' + inst.reason.message, 'error');
      $('instance-body').hidden = true;
      return;
    }
    setNote('instance-error', '');
    keepFocus($('instance-body'), () => {
      renderInstance(inst.value);
      renderQueue(queue);
    });
    $('instance-body').hidden = false;
    loaded('instance');
  }

  function renderInstance(i) {
    const dl = $('inst-summary');
    dl.replaceChildren();
    const item = (k, v, name) => {
      const dd = el('dd');
      if (v instanceof Node) { dd.appendChild(v); } else { dd.textContent = v === undefined || v === null ? '–' : String(v); }
      if (name) { dd.dataset.field = name; }
      append(dl, el('dt', '', k), dd);
    };
    item('agent', i.agentName, 'agent');
    item('workflow type', i.workflowType);
    item('activation', i.activation);
    item('status', el('span', 'badge status-' + i.status, i.status), 'status');
    item('run', i.runId, 'run');
    item('started', time(i.startedAt));
    item('last active', time(i.lastActiveAt));
    if (i.completedAt) { item('completed', time(i.completedAt)); }
    item('events in this run', i.events, 'events');
    item('partition', i.partition, 'partition');
    item('host', i.host || 'no live host runs the agent', 'host');
    $('inst-complete').disabled = i.status === 'completed';

    $('inst-state').textContent = i.state === null || i.state === undefined ? 'null (nothing saved in this run)' : pretty(i.state);

    const recent = i.recentRequests || [];
    $('inst-recent').replaceChildren(recent.length ? table(['Received', 'Participant', 'Request', 'Status', 'Duration', 'Request id'],
      recent.map((r) => row([time(r.receivedAt), r.participantId, requestLabel(r.type, r.method) + (r.timer ? ` (timer ${r.timer})` : ''),
        r.status === undefined ? 'running or not answered yet' : r.status, r.durationMs === undefined ? '–' : `${r.durationMs} ms`,
        el('code', '', r.requestId)], {requestId: r.requestId}))) : el('p', 'note', 'No request in the instance\'s threads.'));

    // A waiting request's method is known when it is among the recent requests.
    const methods = new Map(recent.map((r) => [r.requestId, r.method]));
    const waits = i.waits || [];
    $('inst-waits').replaceChildren(waits.length ? table(['Participant', 'Request', 'Waits for', 'Deadline', 'Since', 'Request id', 'Queued behind'],
      waits.map((w) => row([w.participantId, `${requestLabel(w.type, methods.get(w.requestId))} (wait ${w.name})`, waitsFor(w),
        time(w.deadline), time(w.since), el('code', '', w.requestId), {text: w.held || 0, className: 'num'}],
        {participant: w.participantId, requestId: w.requestId}))) :
      el('p', 'note', 'None: no request of the instance waits for an event.'));

    const dead = i.deadLetters || [];
    $('inst-dead').replaceChildren(dead.length ? table(['Id', 'Dead at', 'Request', '#Attempts', 'Error'],
      dead.map((d) => row([link('#/deadletters?' + new URLSearchParams({agent: i.agentName}), String(d.id)), time(d.deadAt),
        requestLabel(d.type, d.method), d.attempts, {text: d.error, className: 'error-text'}], {id: String(d.id)}))) :
      el('p', 'note', 'None.'));

    const timers = i.schedules || [];
    $('inst-timers').replaceChildren(timers.length ? table(['Name', 'Schedule', 'Participant', 'Sends', 'Created'],
      timers.map((s) => row([s.name, s.schedule, s.participantId, requestLabel(s.type, s.method), time(s.createdAt)]))) :
      el('p', 'note', 'None.'));

    const runs = i.earlierRuns || [];
    $('inst-runs').replaceChildren(runs.length ? table(['Run', 'Started', 'Ended', '#Events'],
      runs.map((r) => row([el('code', '', r.runId), time(r.startedAt), time(r.completedAt), {text: r.events, className: 'num'}]))) :
      el('p', 'note', 'None: this is the first run.'));
  }

  // waitsFor says what ends a wait besides its deadline: a Chat message, a Data call, a signal.
  function waitsFor(w) {
    const what = [];
    if (w.chat) { what.push('Chat message'); }
    for (const m of w.methods || []) { what.push('Data ' + m); }
    for (const sig of w.signals || []) { what.push('signal ' + sig); }
    return what.length ? what.join(' / ') : 'its deadline only';
  }

  function renderQueue(result) {
    const box = $('inst-queue');
    box.replaceChildren();
    if (result.status === 'rejected') {
      box.appendChild(el('p', 'note error', 'Reading the queue failed: ' + result.reason.message));
      return;
    }
    const q = result.value;
    const meta = `Partition ${q.partition}, owned by ${q.owner || 'no live host'}; as of ${time(q.at)}.`;
    box.appendChild(el('p', 'note', meta));
    if (q.unansweredHosts && q.unansweredHosts.length) {
      box.appendChild(el('p', 'note warn', `No answer from ${q.unansweredHosts.join(', ')}: what they hold is missing here.`));
    }
    const convs = q.conversations || [];
    if (convs.length === 0) {
      box.appendChild(el('p', 'note', 'Nothing queued: no request of this instance is stored in the inbox.'));
      return;
    }
    for (const c of convs) {
      const div = el('div', 'conversation');
      div.dataset.participant = c.participantId;
      div.appendChild(el('h4', '', `Participant ${c.participantId}: ${c.stored} stored` +
        (c.stored ? `, the oldest ${age(c.oldestAgeMs)} ago` : '') + (c.notHeld ? `, ${c.notHeld} not held by a host` : '')));
      const rows = (c.requests || []).map((r) => {
        let why = r.reason || '';
        if (r.earlierSequence) { why += ` (behind #${r.earlierSequence})`; }
        if (r.call) { why += ` (${r.call.agent} ${r.call.method} since ${time(r.call.since)})`; }
        let when = '–';
        if (r.until) { when = 'next attempt ' + time(r.until); } else if (r.since) { when = 'since ' + time(r.since); }
        let action = '';
        if (r.reason === 'retry-backoff') {
          const b = el('button', 'small', 'Retry now');
          b.type = 'button';
          b.setAttribute('aria-label', `Retry request ${r.requestId} now`);
          b.addEventListener('click', () => retryNow(r.requestId, b));
          action = b;
        }
        return row([{text: r.sequence, className: 'num'}, el('code', '', r.requestId), requestLabel(r.type, r.method),
          `${r.state}${why ? ': ' + why : ''}`, {text: r.attempt, className: 'num'}, age(r.ageMs), r.host, when, action],
        {requestId: r.requestId, state: r.state, reason: r.reason || ''});
      });
      div.appendChild(rows.length ? table(['#Seq', 'Request', 'Type', 'State', '#Attempt', 'Age', 'Host', 'When', ''], rows) :
        el('p', 'note', 'No host that answered holds a request of this conversation.'));
      box.appendChild(div);
    }
  }

  async function retryNow(requestId, button) {
    const id = state.params.get('id');
    button.disabled = true;
    try {
      const ans = await api('POST', instancePath(id, `/queue/${encodeURIComponent(requestId)}/retry`));
      setNote('inst-action', `Request ${requestId} runs again now (attempt ${ans.request.attempt}).`, 'ok');
    } catch (err) {
      setNote('inst-action', 'Retry failed: ' + err.message, 'error');
    }
    load();
  }

  async function completeRun() {
    const id = state.params.get('id');
    try {
      const ans = await api('POST', instancePath(id, '/complete'));
      setNote('inst-action', `Run ${ans.runId} completed at ${time(ans.completedAt)}; the next message starts a new run.`, 'ok');
    } catch (err) {
      setNote('inst-action', 'Completing the run failed: ' + err.message, 'error');
    }
    load();
  }

  // ---- dead letters -------------------------------------------------------------------------

  async function loadDeadLetters(gen) {
    const agent = $('dl-agent').value;
    const q = new URLSearchParams({limit: '50'});
    if (agent) { q.set('agent', agent); }
    const after = state.dl.after;
    if (after) { q.set('after', after); }
    let page;
    try {
      page = await api('GET', tenantPath('/deadletters?' + q));
    } catch (err) {
      if (gen !== state.gen) { return; }
      setNote('dl-error', 'Listing the dead letters failed: ' + err.message, 'error');
      return;
    }
    if (gen !== state.gen) { return; }
    setNote('dl-error', '');
    const body = $('dl-table').tBodies[0];
    if (!after) { body.replaceChildren(); }
    for (const d of page.deadLetters || []) {
      const wf = link('#/instance?' + new URLSearchParams({id: d.workflowId}), d.workflowId);
      const replay = el('button', 'small', 'Replay');
      replay.type = 'button';
      replay.setAttribute('aria-label', `Replay dead letter ${d.id}`);
      replay.addEventListener('click', () => deadLetterAction(d.id, 'replay', replay));
      const discard = el('button', 'small danger');
      discard.type = 'button';
      discard.setAttribute('aria-label', `Discard dead letter ${d.id}`);
      twoStep(discard, 'Discard', 'Confirm discard', () => deadLetterAction(d.id, 'discard', discard));
      body.appendChild(row([{text: d.id, className: 'num'}, time(d.deadAt), d.agentName, wf, d.participantId,
        requestLabel(d.type, d.method || d.text), {text: d.attempts, className: 'num'}, {text: d.error, className: 'error-text'},
        append(el('div', 'buttons'), replay, discard)], {id: String(d.id), agent: d.agentName}));
    }
    state.dl.next = page.next ? String(page.next) : '';
    $('dl-more').hidden = !state.dl.next;
    $('dl-empty').textContent = body.rows.length ? '' :
      `No dead letters${agent ? ' of ' + agent : ''} in tenant ${state.tenant}.`;
    loaded('deadletters');
  }

  async function deadLetterAction(id, what, button) {
    button.disabled = true;
    try {
      if (what === 'replay') {
        const ans = await api('POST', tenantPath(`/deadletters/${encodeURIComponent(id)}/replay`));
        setNote('dl-action', `Dead letter ${id} replayed: request ${ans.requestId} to ${ans.workflowId}; its answer goes to the thread.`, 'ok');
      } else {
        await api('DELETE', tenantPath(`/deadletters/${encodeURIComponent(id)}`));
        setNote('dl-action', `Dead letter ${id} discarded.`, 'ok');
      }
    } catch (err) {
      setNote('dl-action', `${what === 'replay' ? 'Replaying' : 'Discarding'} dead letter ${id} failed: ${err.message}`, 'error');
      button.disabled = false;
      return;
    }
    state.dl = {after: '', next: ''};
    load();
  }

  // ---- limits, usage and queues -------------------------------------------------------------

  async function loadLimits(gen) {
    const tenant = state.tenant;
    const [rec, use, hosts] = await Promise.allSettled([api('GET', tenantPath('/limits')), api('GET', tenantPath('/usage')),
      api('GET', tenantPath('/hosts'))]);
    if (gen !== state.gen) { return; }
    if (state.lim.tenant !== tenant) {
      state.lim = {tenant, record: null, filled: false, samples: []};
    }
    const failed = [];
    if (rec.status === 'fulfilled') {
      state.lim.record = rec.value;
      renderLimits(rec.value);
      if (!state.lim.filled) {
        fillLimitsForm(rec.value);
        state.lim.filled = true;
      }
    } else {
      failed.push('the limits failed: ' + rec.reason.message);
    }
    if (use.status === 'fulfilled') {
      renderUsage(use.value);
    } else {
      failed.push('the usage failed: ' + use.reason.message);
    }
    if (hosts.status === 'fulfilled') {
      sampleQueues(hosts.value, Date.now());
    } else {
      failed.push('the queues failed: ' + hosts.reason.message);
    }
    keepFocus($('queue-charts'), () => renderQueues(Date.now()));
    if (failed.length) {
      setNote('limits-error', 'Reading ' + failed.join('; reading '), 'error');
      badge('limits-live', 'error', 'error');
      return;
    }
    setNote('limits-error', '');
    badge('limits-live', 'updated ' + clock(new Date()), 'live');
    loaded('limits');
  }

  const noLimit = (v) => v ? String(v) : 'no limit';
  const noQuota = (fmt) => (v) => v ? fmt(v) : 'no quota';

  function fmtLimitRate(r) {
    if (!r || !r.perSecond) { return 'no limit'; }
    return `${fmtRate(r.perSecond)}, burst ${r.burst ? r.burst : 'twice the rate'}`;
  }

  // LIMITS are the rows of the limits table: the field, what it is, and how its value reads.
  const LIMITS = [
    ['weight', 'Weight: its share of an agent\'s handler slots while tenants wait', String],
    ['maxConcurrent', 'Requests of an agent running at once, over every host', noLimit],
    ['maxQueued', 'Requests of an agent queued (past it: 429 too-many-queued)', noLimit],
    ['rate', 'Rate of all its requests', fmtLimitRate],
    ['keyRate', 'Rate of each of its keys', fmtLimitRate],
    ['writeRate', 'Rate of its configuration writes (keys, remote agents, subscriptions)', fmtLimitRate],
    ['listenRate', 'Rate of the listen streams it opens', fmtLimitRate],
    ['maxBytes', 'Stored bytes quota', noQuota(fmtBytes)],
    ['maxInstances', 'Instances quota', noQuota(String)],
  ];

  function renderLimits(rec) {
    const set = rec.limits || {};
    const eff = rec.effective || {};
    const body = $('limits-table').tBodies[0];
    body.replaceChildren();
    for (const [field, label, fmt] of LIMITS) {
      const mine = set[field] === undefined || set[field] === null ? {text: 'not set: the deployment\'s', className: 'note'} : fmt(set[field]);
      body.appendChild(row([label, fmt(eff[field] === undefined ? 0 : eff[field]), mine], {limit: field}));
    }
    $('limits-caption').textContent = rec.updatedAt ? `Tenant ${rec.tenant}: set at ${time(rec.updatedAt)} by ${rec.updatedBy}.` :
      `Tenant ${rec.tenant}: nothing is set, the deployment's settings hold.`;

    const box = $('limits-agents');
    box.replaceChildren();
    const names = Object.keys(set.agents || {}).sort();
    if (names.length) {
      box.appendChild(table(['Agent', '#Weight', 'Running at once', 'Queued', 'Rate of its calls'], names.map((n) => {
        const e = (eff.agents || {})[n] || {};
        return row([n, {text: e.weight, className: 'num'}, noLimit(e.maxConcurrent), noLimit(e.maxQueued), fmtLimitRate(e.rate)], {agent: n});
      }), 'Agents with values of their own: what holds for the tenant\'s requests of each.'));
    }
  }

  function renderUsage(u) {
    const box = $('usage-box');
    box.replaceChildren();
    const bytes = u.bytes || {};
    const quota = u.quota || {};
    box.appendChild(usageBar('bytes', 'Stored bytes', bytes.total || 0, quota.bytes || 0, fmtBytes));
    box.appendChild(usageBar('instances', 'Instances', u.instances || 0, quota.instances || 0, String));
    const figures = el('dl', 'figures');
    for (const [k, name] of [['history', 'history'], ['files', 'files'], ['large payloads', 'payloads'], ['dead letters and undelivered events', 'kept'], ['instance records', 'state'], ['timers', 'timers']]) {
      const d = append(el('div'), el('dt', '', k), el('dd', '', fmtBytes(bytes[name] || 0)));
      d.dataset.figure = name;
      figures.appendChild(d);
    }
    box.appendChild(figures);
  }

  // usageBar shows what is used of a quota as a meter, and in words.
  function usageBar(name, label, used, quota, fmt) {
    const div = el('div', 'usage');
    div.dataset.usage = name;
    const id = 'usage-' + name;
    const lab = el('label', '', label);
    lab.htmlFor = id;
    div.appendChild(lab);
    if (quota > 0) {
      const m = el('meter');
      m.id = id;
      m.min = 0;
      m.max = quota;
      m.value = Math.min(used, quota);
      m.low = quota * 0.75;
      m.high = quota * 0.9;
      m.optimum = 0;
      div.appendChild(m);
    }
    const pct = 100 * used / quota;
    const words = el('span', 'usage-text', quota > 0 ? `${fmt(used)} of ${fmt(quota)} (${pct > 0 && pct < 0.1 ? 'under 0.1 %' : fmtPct(pct)})` :
      `${fmt(used)}; no quota`);
    if (quota <= 0) { words.id = id; }
    div.appendChild(words);
    return div;
  }

  // sampleQueues keeps what the hosts view says the tenant's requests of each agent are, and
  // drops the samples older than the window.
  function sampleQueues(view, now) {
    const agents = {};
    for (const a of view.agents || []) {
      const q = (a.tenants || []).find((t) => t.tenant === state.lim.tenant) || {};
      agents[a.agent] = {queued: q.queued || 0, running: q.running || 0, oldestWaitMs: q.oldestWaitMs || 0, crowding: q.crowding === true};
    }
    state.lim.samples = state.lim.samples.filter((s) => now - s.at < QUEUE_WINDOW);
    state.lim.samples.push({at: now, agents});
  }

  // capsOf are the caps of the tenant's requests of an agent, from its limits record.
  function capsOf(agent) {
    const eff = (state.lim.record && state.lim.record.effective) || {};
    const e = (eff.agents || {})[agent] || eff;
    return {maxQueued: e.maxQueued || 0, maxConcurrent: e.maxConcurrent || 0};
  }

  // renderQueues draws, per agent that had requests queued or running in the window, its figures
  // now and charts of its queued and running requests and its oldest wait, per slot.
  function renderQueues(now) {
    const samples = state.lim.samples;
    const box = $('queue-charts');
    box.replaceChildren();
    if (samples.length === 0) {
      $('queues-quiet').textContent = 'No sample yet: the hosts view could not be read.';
      return;
    }
    const latest = samples[samples.length - 1];
    const names = Object.keys(latest.agents).sort();
    const busy = names.filter((n) => samples.some((s) => s.agents[n] && (s.agents[n].queued || s.agents[n].running)));
    const n = QUEUE_WINDOW / QUEUE_SLOT;
    const last = Math.floor(now / QUEUE_SLOT);
    const grid = el('div', 'agents');
    for (const name of busy) {
      const series = {queued: new Array(n).fill(null), running: new Array(n).fill(null), wait: new Array(n).fill(null)};
      for (const s of samples) {
        const q = s.agents[name];
        const i = n - 1 - (last - Math.floor(s.at / QUEUE_SLOT));
        if (!q || i < 0 || i >= n) { continue; }
        series.queued[i] = Math.max(series.queued[i] || 0, q.queued);
        series.running[i] = Math.max(series.running[i] || 0, q.running);
        series.wait[i] = Math.max(series.wait[i] || 0, q.oldestWaitMs);
      }
      grid.appendChild(queueCard(name, latest.agents[name] || {queued: 0, running: 0, oldestWaitMs: 0}, series, samples));
    }
    box.appendChild(grid);
    const quiet = names.filter((x) => !busy.includes(x));
    const n0 = samples.length;
    $('queues-quiet').textContent = `Sampled ${n0} time${n0 === 1 ? '' : 's'} since ${clock(new Date(samples[0].at))}. ` +
      (!busy.length ? 'Nothing of the tenant was queued or running.' : quiet.length ? `Nothing queued or running: ${quiet.join(', ')}.` : '');
  }

  function queueCard(name, now, series, samples) {
    const card = el('article', 'agent-card');
    card.dataset.agent = name;
    card.appendChild(append(el('h3'), el('span', '', name), link('#/instances?' + new URLSearchParams({agent: name}), 'instances')));
    const caps = capsOf(name);
    const longest = Math.max(...samples.map((s) => (s.agents[name] || {}).oldestWaitMs || 0));
    const figures = el('dl', 'figures');
    const fig = (k, v, field) => {
      const d = append(el('div'), el('dt', '', k), el('dd', '', v));
      d.dataset.figure = field;
      figures.appendChild(d);
    };
    fig('queued', String(now.queued), 'queued');
    fig('running', String(now.running), 'running');
    fig('oldest wait', now.queued ? fmtMs(now.oldestWaitMs) : '–', 'oldestWait');
    fig('longest wait seen', longest ? fmtMs(longest) : '–', 'longestWait');
    fig('queued cap', noLimit(caps.maxQueued), 'maxQueued');
    fig('running cap', noLimit(caps.maxConcurrent), 'maxConcurrent');
    // A host reports the tenant crowding a partition of the agent: its new calls are refused.
    fig('crowding a partition', now.crowding ? 'yes: new calls refused' : 'no', 'crowding');
    card.appendChild(figures);
    const minutes = QUEUE_WINDOW / 60000;
    const count = (v) => String(Math.round(v));
    const charts = el('div', 'charts');
    charts.appendChild(chart({name: 'queue', title: 'Requests queued / running', unit: count, minTop: 1, minutes, none: 'no sample',
      series: [{key: 'queued', label: 'queued', values: series.queued}, {key: 'running', label: 'running', values: series.running}]}));
    charts.appendChild(chart({name: 'wait', title: 'Oldest wait', unit: fmtMs, minTop: 100, minutes, none: 'no sample',
      series: [{key: 'wait', label: 'oldest wait', values: series.wait}]}));
    card.appendChild(charts);
    return card;
  }

  // The form's inputs: each input's id (lim-…) and the field of the record it sets.
  const LIMIT_INPUTS = [['weight', 'weight'], ['maxConcurrent', 'maxConcurrent'], ['maxQueued', 'maxQueued'],
    ['rate', 'rate.perSecond'], ['burst', 'rate.burst'], ['keyRate', 'keyRate.perSecond'], ['keyBurst', 'keyRate.burst'],
    ['writeRate', 'writeRate.perSecond'], ['writeBurst', 'writeRate.burst'],
    ['listenRate', 'listenRate.perSecond'], ['listenBurst', 'listenRate.burst'], ['maxBytes', 'maxBytes'], ['maxInstances', 'maxInstances']];

  function fillLimitsForm(rec) {
    const l = rec.limits || {};
    const put = (id, v) => { $('lim-' + id).value = v === undefined || v === null ? '' : String(v); };
    put('weight', l.weight);
    put('maxConcurrent', l.maxConcurrent);
    put('maxQueued', l.maxQueued);
    put('rate', l.rate && l.rate.perSecond);
    put('burst', l.rate && l.rate.burst);
    put('keyRate', l.keyRate && l.keyRate.perSecond);
    put('keyBurst', l.keyRate && l.keyRate.burst);
    put('writeRate', l.writeRate && l.writeRate.perSecond);
    put('writeBurst', l.writeRate && l.writeRate.burst);
    put('listenRate', l.listenRate && l.listenRate.perSecond);
    put('listenBurst', l.listenRate && l.listenRate.burst);
    put('maxBytes', l.maxBytes === undefined ? undefined : exactBytes(l.maxBytes));
    put('maxInstances', l.maxInstances);
    markField('');
  }

  // markField marks the input of field as invalid (and only it; none for ''), and focuses it.
  function markField(field) {
    for (const [id, f] of LIMIT_INPUTS) {
      const input = $('lim-' + id);
      if (f === field) {
        input.setAttribute('aria-invalid', 'true');
        input.setAttribute('aria-describedby', 'limits-action');
        input.focus();
      } else {
        input.removeAttribute('aria-invalid');
        input.removeAttribute('aria-describedby');
      }
    }
  }

  // FieldProblem is a value of the form that is not a number at all; the API checks the rest.
  class FieldProblem extends Error {
    constructor(field, message) {
      super(message);
      this.field = field;
    }
  }

  // limitsBody reads the form into the record to PUT: the fields filled in, and the agents'
  // values as last read.
  function limitsBody() {
    const text = (id) => $('lim-' + id).value.trim();
    const num = (id, field) => {
      const v = text(id);
      if (!v) { return undefined; }
      const n = Number(v);
      if (!Number.isFinite(n)) { throw new FieldProblem(field, `${field} must be a number`); }
      return n;
    };
    const rate = (id, burstId, field) => {
      const perSecond = num(id, field + '.perSecond');
      const burst = num(burstId, field + '.burst');
      if (perSecond === undefined && burst === undefined) { return undefined; }
      if (perSecond === undefined) { throw new FieldProblem(field + '.perSecond', `${field}.perSecond must be given with its burst`); }
      return burst === undefined ? {perSecond} : {perSecond, burst};
    };
    let maxBytes;
    if (text('maxBytes')) {
      maxBytes = parseBytes(text('maxBytes'));
      if (maxBytes === null) {
        throw new FieldProblem('maxBytes', 'maxBytes must be a number of bytes, with or without a unit (KiB, MiB, GiB, TiB; KB, MB, GB, TB)');
      }
    }
    const set = (state.lim.record && state.lim.record.limits) || {};
    return {
      weight: num('weight', 'weight'),
      maxConcurrent: num('maxConcurrent', 'maxConcurrent'),
      maxQueued: num('maxQueued', 'maxQueued'),
      rate: rate('rate', 'burst', 'rate'),
      keyRate: rate('keyRate', 'keyBurst', 'keyRate'),
      writeRate: rate('writeRate', 'writeBurst', 'writeRate'),
      listenRate: rate('listenRate', 'listenBurst', 'listenRate'),
      maxBytes,
      maxInstances: num('maxInstances', 'maxInstances'),
      agents: set.agents,
    };
  }

  async function saveLimits() {
    const tenant = state.tenant;
    if (state.role !== 'system' || !state.lim.record || state.lim.tenant !== tenant) { return; }
    let body;
    try {
      body = limitsBody();
    } catch (err) {
      if (!(err instanceof FieldProblem)) { throw err; }
      setNote('limits-action', 'Not saved: ' + err.message + '.', 'error');
      markField(err.field);
      return;
    }
    markField('');
    $('lim-save').disabled = true;
    try {
      const ans = await call('PUT', tenantPath('/limits', tenant), body);
      if (state.tenant === tenant) {
        state.lim.record = ans.value;
        renderLimits(ans.value);
        fillLimitsForm(ans.value);
      }
      setNote('limits-action', ans.status === 202 ?
        `Saved for tenant ${tenant}; not every ingress instance confirmed it in time: each applies it once it catches up.` :
        `Saved for tenant ${tenant}: every ingress instance applies it.`, 'ok');
    } catch (err) {
      setNote('limits-action', 'Not saved: ' + err.message, 'error');
      if (err.status === 400 && err.detail) {
        markField(err.detail.split(' ')[0]);
      }
    } finally {
      $('lim-save').disabled = false;
    }
    load();
  }

  // ---- wiring -------------------------------------------------------------------------------

  function init() {
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      state.key = $('key').value.trim();
      if (!state.key) { return; }
      rememberKey();
      openKey();
    });
    $('remember').addEventListener('change', rememberKey);
    $('forget').addEventListener('click', forgetKey);
    $('tenant').addEventListener('change', () => {
      state.tenant = $('tenant').value;
      setStatus(`Showing tenant ${state.tenant}.`, 'ok');
      if (state.page === 'instance') {
        go('instances');
      } else {
        route();
      }
    });
    document.querySelector('.skip').addEventListener('click', (e) => {
      e.preventDefault();
      $('view').focus();
    });

    $('stats-form').addEventListener('submit', (e) => { e.preventDefault(); load(); });
    $('stats-window').addEventListener('change', () => load());

    $('instances-form').addEventListener('submit', (e) => { e.preventDefault(); listInstances(); });
    $('inst-agent').addEventListener('change', listInstances);
    $('inst-older').addEventListener('click', () => {
      if (!state.inst.next) { return; }
      state.inst.cursors = state.inst.cursors.slice(0, state.inst.index + 1).concat([state.inst.next]);
      state.inst.index++;
      load();
    });
    $('inst-newer').addEventListener('click', () => {
      if (state.inst.index === 0) { return; }
      state.inst.index--;
      load();
    });

    $('inst-refresh').addEventListener('click', () => load());
    twoStep($('inst-complete'), 'Complete run', 'Confirm: complete the run', completeRun);

    $('dl-form').addEventListener('submit', (e) => {
      e.preventDefault();
      state.dl = {after: '', next: ''};
      setNote('dl-action', '');
      load();
    });
    $('dl-agent').addEventListener('change', () => {
      state.dl = {after: '', next: ''};
      load();
    });
    $('dl-more').addEventListener('click', () => {
      state.dl.after = state.dl.next;
      load();
    });

    $('limits-form').addEventListener('submit', (e) => {
      e.preventDefault();
      saveLimits();
    });
    $('lim-reset').addEventListener('click', () => {
      if (state.lim.record) { fillLimitsForm(state.lim.record); }
      setNote('limits-action', '');
    });

    window.addEventListener('hashchange', route);
    setInterval(tick, 500);

    let saved = '';
    try { saved = sessionStorage.getItem(KEY_STORE) || ''; } catch (_) { /* storage disabled */ }
    if (saved) {
      state.key = saved;
      $('key').value = saved;
      $('remember').checked = true;
      openKey();
    } else {
      route();
    }
  }

  init();
})();
