// agentbus playground: a small client of the agentbus HTTP API. No framework and no build step.
// Everything received is shown with textContent, never as HTML.
'use strict';

(() => {
  const KEY_STORE = 'agentbus.playground.key';
  const TYPE_NAMES = {0: 'Chat', 1: 'Data', 2: 'File', 4: 'Webhook'};
  const RECONNECT_MS = 1000;
  const HISTORY_PAGE = 20;

  const $ = (id) => document.getElementById(id);

  // The key lives in this closure; sessionStorage holds it only when the user asks.
  const state = {
    key: '',
    agents: [],
    watch: null, // the AbortController of the thread being watched
    sending: false,
  };

  // ---- small helpers ------------------------------------------------------------------------

  function setStatus(text, kind) {
    const el = $('status');
    el.textContent = text;
    el.className = kind || '';
  }

  function setThreadState(text, kind) {
    const el = $('thread-state');
    el.textContent = text;
    el.className = 'badge ' + (kind || '');
    el.dataset.state = kind || '';
  }

  function authHeaders(extra) {
    const h = {Authorization: 'Bearer ' + state.key};
    const tenant = $('tenant').value.trim();
    if (tenant) {
      h['X-Tenant-Id'] = tenant;
    }
    return Object.assign(h, extra || {});
  }

  function request(method, url, opts) {
    opts = opts || {};
    return fetch(url, {
      method,
      headers: opts.headers || authHeaders(),
      body: opts.body,
      signal: opts.signal,
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
  }

  // describeError turns a failed answer into one line: a problem's status, title and detail.
  async function describeError(resp) {
    const text = await resp.text().catch(() => '');
    try {
      const p = JSON.parse(text);
      if (p && p.title) {
        return `${p.status || resp.status} ${p.title}${p.detail ? ': ' + p.detail : ''}`;
      }
    } catch (_) { /* not JSON */ }
    return `${resp.status} ${resp.statusText}${text ? ': ' + text.slice(0, 200) : ''}`;
  }

  function pretty(value) {
    if (value === null || value === undefined) {
      return '';
    }
    return JSON.stringify(value, null, 2);
  }

  // sseEvents reads a Server-Sent Events body (text/event-stream) and yields its events as
  // {event, data, id} and its comments as {comment}. agentbus ends lines with \n. The body is
  // cancelled when the caller stops reading.
  async function* sseEvents(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = {event: 'message', data: [], id: null};
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) {
          return;
        }
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith('\r')) {
            line = line.slice(0, -1);
          }
          if (line === '') {
            if (ev.data.length > 0) {
              yield {event: ev.event, data: ev.data.join('\n'), id: ev.id};
            }
            ev = {event: 'message', data: [], id: null};
            continue;
          }
          if (line.startsWith(':')) {
            yield {comment: line.slice(1).trim()};
            continue;
          }
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'event') {
            ev.event = val;
          } else if (field === 'data') {
            ev.data.push(val);
          } else if (field === 'id') {
            ev.id = val;
          }
        }
      }
    } finally {
      // A reader that stops early (the page went on to something else, or failed in between)
      // cancels the body, which closes the connection rather than leave the stream open.
      reader.cancel().catch(() => {});
    }
  }

  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) {
      signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
    }
  });

  // ---- key ----------------------------------------------------------------------------------

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
    $('key').value = '';
    $('remember').checked = false;
    rememberKey();
    stopWatching('not watching');
    state.agents = [];
    fillAgents();
    setStatus('Key forgotten.');
  }

  // ---- agents and target --------------------------------------------------------------------

  async function loadAgents() {
    setStatus('Loading agents…');
    let resp;
    try {
      resp = await request('GET', '/api/user/agents', {headers: {Authorization: 'Bearer ' + state.key}});
    } catch (err) {
      setStatus('Cannot reach the API: ' + err.message, 'error');
      return;
    }
    if (!resp.ok) {
      setStatus('Loading agents failed: ' + await describeError(resp), 'error');
      return;
    }
    const ans = await resp.json();
    state.agents = ans.agents || [];
    if (ans.tenant) {
      $('tenant').value = ans.tenant;
    }
    fillAgents();
    const live = state.agents.filter((a) => a.live).length;
    setStatus(`${state.agents.length} agent(s) registered, ${live} with a live host` +
      (ans.tenant ? `; tenant ${ans.tenant}.` : '; a system key: give the tenant.'), 'ok');
    onAgentChange();
  }

  function option(select, value, label) {
    const o = document.createElement('option');
    o.value = value;
    o.textContent = label || value;
    select.appendChild(o);
  }

  function fillAgents() {
    const sel = $('agent');
    const previous = sel.value;
    sel.replaceChildren();
    for (const a of state.agents) {
      option(sel, a.name, a.live ? a.name : a.name + ' (no live host)');
    }
    if (state.agents.some((a) => a.name === previous)) {
      sel.value = previous;
    } else {
      const firstLive = state.agents.find((a) => a.live);
      if (firstLive) {
        sel.value = firstLive.name;
      }
    }
    sel.disabled = state.agents.length === 0;
    if (state.agents.length === 0) {
      $('workflow-type').replaceChildren();
      $('data-method').replaceChildren();
      $('webhook-method').replaceChildren();
      $('agent-info').textContent = '';
      updateTarget();
    }
  }

  function currentAgent() {
    return state.agents.find((a) => a.name === $('agent').value);
  }

  function onAgentChange() {
    const a = currentAgent();
    if (!a) {
      updateTarget();
      return;
    }
    const fill = (id, values) => {
      const sel = $(id);
      const previous = sel.value;
      sel.replaceChildren();
      for (const v of values || []) {
        option(sel, v);
      }
      if ((values || []).includes(previous)) {
        sel.value = previous;
      }
      sel.disabled = !values || values.length === 0;
    };
    fill('workflow-type', a.workflowTypes);
    fill('data-method', a.dataMethods);
    fill('webhook-method', a.webhooks);
    const can = [];
    if (a.chat) { can.push('Chat'); }
    if ((a.dataMethods || []).length) { can.push(`Data (${a.dataMethods.length} methods)`); }
    if (a.file) { can.push('File'); }
    if ((a.webhooks || []).length) { can.push(`Webhook (${a.webhooks.length} methods)`); }
    $('agent-info').textContent = `Takes ${can.join(', ') || 'nothing'}. ` +
      (a.live ? 'A live workflow host runs it.' : 'No live workflow host runs it now: calls answer 503.');
    for (const input of document.querySelectorAll('input[name=kind]')) {
      const ok = input.value === 'Chat' ? a.chat :
        input.value === 'Data' ? (a.dataMethods || []).length > 0 : (a.webhooks || []).length > 0;
      input.disabled = !ok;
    }
    const checked = document.querySelector('input[name=kind]:checked');
    if (checked && checked.disabled) {
      const first = document.querySelector('input[name=kind]:not(:disabled)');
      if (first) { first.checked = true; }
    }
    showKindFields();
    updateTarget();
    startWatching();
  }

  // target is the workflow instance and participant the page talks to, or null.
  function target() {
    const agent = $('agent').value;
    const type = $('workflow-type').value;
    const activation = $('activation').value.trim();
    const participant = $('participant').value.trim().toLowerCase();
    const tenant = $('tenant').value.trim();
    if (!state.key || !agent || !type || !activation || !participant || !tenant) {
      return null;
    }
    return {tenant, agent, type, activation, participant, workflowId: `${tenant}:${agent}:${type}:${activation}`};
  }

  function updateTarget() {
    const t = target();
    $('workflow-id').textContent = t ? t.workflowId : '–';
    $('watch').disabled = !t;
    $('send').disabled = !t || state.sending;
  }

  function showKindFields() {
    const kind = document.querySelector('input[name=kind]:checked').value;
    $('chat-fields').hidden = kind !== 'Chat';
    $('data-fields').hidden = kind !== 'Data';
    $('webhook-fields').hidden = kind !== 'Webhook';
  }

  // ---- the thread ---------------------------------------------------------------------------

  function stopWatching(label) {
    if (state.watch) {
      state.watch.abort();
      state.watch = null;
    }
    setThreadState(label || 'stopped', '');
  }

  function startWatching() {
    stopWatching();
    $('thread').replaceChildren();
    const t = target();
    if (!t) {
      setThreadState('not watching', '');
      return;
    }
    const ctrl = new AbortController();
    state.watch = ctrl;
    watch(t, ctrl.signal).catch((err) => {
      if (!ctrl.signal.aborted) {
        setThreadState('stopped: ' + err.message, 'error');
      }
    });
  }

  function threadQuery(t) {
    return new URLSearchParams({workflowId: t.workflowId, participantId: t.participant});
  }

  // watch follows the thread. It opens the listen stream first and, once the stream says it
  // listens, reads the thread's newest page, unless the stream resumed after a message the page
  // shows (it then delivers everything stored since): whatever was stored before the stream
  // began is on that page, whatever after comes on the stream, so nothing falls between the two,
  // also when the thread was empty. A message is shown once, by its id, however often it comes.
  // When the stream breaks, it reconnects after the last message shown.
  async function watch(t, signal) {
    const base = `/api/v1/admin/tenants/${encodeURIComponent(t.tenant)}/messaging/`;
    const seen = new Set();
    let lastId = '';
    const show = (m) => {
      if (!m || seen.has(m.id)) {
        return;
      }
      seen.add(m.id);
      lastId = m.id;
      $('thread').appendChild(renderMessage(m));
      const list = $('thread');
      list.scrollTop = list.scrollHeight;
    };
    const showNewest = async () => {
      const q = threadQuery(t);
      q.set('pageSize', String(HISTORY_PAGE));
      const page = await request('GET', base + 'history?' + q, {signal});
      if (!page.ok) {
        throw new Error(await describeError(page));
      }
      const ans = await page.json();
      for (const m of (ans.messages || []).slice().reverse()) { // newest first on the wire
        show(m);
      }
    };

    setThreadState('loading', 'loading');
    while (!signal.aborted) {
      const headers = authHeaders({Accept: 'text/event-stream'});
      const after = lastId;
      if (after) {
        headers['Last-Event-ID'] = after;
      }
      let resp;
      try {
        resp = await request('GET', base + 'listen?' + threadQuery(t), {headers, signal});
      } catch (err) {
        if (signal.aborted) { return; }
        setThreadState('reconnecting', 'loading');
        await sleep(RECONNECT_MS, signal);
        continue;
      }
      if (!resp.ok) {
        const retry = resp.status === 429 || resp.status >= 500;
        const why = await describeError(resp);
        if (!retry) {
          throw new Error(why);
        }
        setThreadState('reconnecting: ' + why, 'loading');
        await sleep(RECONNECT_MS, signal);
        continue;
      }
      let failed = null;
      try {
        for await (const ev of sseEvents(resp.body)) {
          if (ev.comment !== undefined) {
            // The stream's first line: ': listening' after a Last-Event-ID it found resumes
            // there; otherwise the stream starts from now and the page reads what came before.
            if (ev.comment === 'listening' || ev.comment.startsWith('last-event-id')) {
              if (ev.comment !== 'listening' || !after) {
                await showNewest();
              }
              setThreadState('live', 'live');
            }
            continue;
          }
          if (ev.event === 'message') {
            show(JSON.parse(ev.data));
          }
        }
      } catch (err) {
        if (signal.aborted) { return; }
        failed = err;
      }
      if (signal.aborted) { return; }
      setThreadState('reconnecting' + (failed ? ': ' + failed.message : ''), 'loading');
      await sleep(RECONNECT_MS, signal);
    }
  }

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) { e.className = className; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }

  // renderMessage shows one stored message: direction, type, time, text, and data as JSON.
  // A Data message's text is its method. A chat's tool calls are Data messages that carry the
  // call's id in metadata.toolCallId: the call (incoming) and its result (outgoing) are marked.
  function renderMessage(m) {
    const out = m.direction === 1;
    const type = TYPE_NAMES[m.messageType] || `type ${m.messageType}`;
    const toolCall = m.metadata && m.metadata.toolCallId;
    const li = el('li', `msg ${out ? 'out' : 'in'} type-${type.toLowerCase()}${toolCall ? ' tool' : ''}`);
    li.dataset.id = m.id;
    li.dataset.direction = out ? 'out' : 'in';
    li.dataset.type = type;

    const meta = el('div', 'meta');
    if (toolCall) {
      li.dataset.toolCall = toolCall;
      meta.appendChild(el('span', 'dir', out ? '← tool result' : '→ tool call by the model'));
      meta.appendChild(el('span', 'type badge', 'tool'));
    } else {
      meta.appendChild(el('span', 'dir', out ? '← from agent' : '→ to agent'));
    }
    meta.appendChild(el('span', 'type badge', type));
    const when = el('time', '', (m.createdAt || '').replace('T', ' ').replace('Z', ' UTC'));
    when.dateTime = m.createdAt || '';
    meta.appendChild(when);
    if (m.scope) { meta.appendChild(el('span', 'scope', 'topic ' + m.scope)); }
    if (m.hint) { meta.appendChild(el('span', 'hint', 'hint ' + m.hint)); }
    li.appendChild(meta);

    if (m.text !== null && m.text !== undefined && m.text !== '') {
      const label = (type === 'Data' || type === 'Webhook') && !out ? 'method ' : '';
      li.appendChild(el('div', 'text', label + m.text));
    }
    if (m.data !== null && m.data !== undefined) {
      li.appendChild(el('pre', 'data', pretty(m.data)));
    }
    const req = el('div', 'request', 'request ' + (m.requestId || ''));
    li.appendChild(req);
    return li;
  }

  // ---- sending ------------------------------------------------------------------------------

  function showAnswer(meta, body, kind) {
    $('answer-meta').textContent = meta;
    $('answer-meta').className = 'note ' + (kind || '');
    $('answer').textContent = body;
  }

  async function send() {
    const t = target();
    if (!t) {
      return;
    }
    const kind = document.querySelector('input[name=kind]:checked').value;
    state.sending = true;
    updateTarget();
    showAnswer('sending…', '');
    try {
      if (kind === 'Webhook') {
        await sendWebhook(t);
      } else {
        await sendConverse(t, kind);
      }
    } catch (err) {
      showAnswer('failed: ' + err.message, '', 'error');
    } finally {
      state.sending = false;
      updateTarget();
    }
  }

  async function sendConverse(t, kind) {
    const q = new URLSearchParams({workflow: t.workflowId, type: kind, participantId: t.participant});
    const opts = {};
    const stream = kind === 'Chat' && $('stream').checked;
    if (kind === 'Chat') {
      const text = $('chat-text').value;
      if (!text.trim()) {
        showAnswer('type a message first', '', 'error');
        return;
      }
      q.set('text', text);
      opts.headers = authHeaders(stream ? {Accept: 'text/event-stream'} : {});
    } else {
      q.set('text', $('data-method').value);
      let params;
      try {
        params = JSON.parse($('data-params').value.trim() || '{}');
      } catch (err) {
        showAnswer('the parameters are not JSON: ' + err.message, '', 'error');
        return;
      }
      if (params === null || typeof params !== 'object' || Array.isArray(params)) {
        showAnswer('the parameters must be a JSON object', '', 'error');
        return;
      }
      opts.headers = authHeaders({'Content-Type': 'application/json'});
      opts.body = JSON.stringify(params);
    }
    const resp = await request('POST', '/api/user/rest/converse?' + q, opts);
    const requestId = resp.headers.get('X-Request-Id') || '';
    if (!resp.ok) {
      showAnswer(`error (request ${requestId})`, await describeError(resp), 'error');
      return;
    }
    if (!stream || !(resp.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
      const ans = await resp.json();
      showAnswer(`${resp.status} (request ${ans.requestId || requestId})`, replyText(ans.response), 'ok');
      if (kind === 'Chat') { $('chat-text').value = ''; }
      return;
    }
    // The model's tool calls and their results stay listed above the text, also once the
    // final message replaces the streamed text: they are how the answer came about. A restart
    // event means the handler runs again and streams its answer from the beginning: the text and
    // tool calls streamed before it are dropped.
    let tools = '';
    let text = '';
    showAnswer(`streaming (request ${requestId})`, '');
    for await (const ev of sseEvents(resp.body)) {
      if (ev.comment !== undefined) {
        continue;
      }
      const v = JSON.parse(ev.data);
      if (ev.event === 'delta') {
        text += v.delta || '';
        $('answer').textContent = tools + text;
      } else if (ev.event === 'restart') {
        tools = '';
        text = '';
        showAnswer(`streaming, attempt ${v.attempt} (request ${requestId})`, '');
      } else if (ev.event === 'tool_call') {
        tools += `[tool call ${v.name} ${JSON.stringify(v.arguments)}]\n`;
        $('answer').textContent = tools + text;
      } else if (ev.event === 'tool_result') {
        tools += `[tool result ${v.name}: ${v.data !== undefined && v.data !== null ? JSON.stringify(v.data) : (v.text || '')}]\n`;
        $('answer').textContent = tools + text;
      } else if (ev.event === 'message') {
        showAnswer(`200 streamed (request ${v.requestId || requestId})`, tools + replyText(v.response), 'ok');
        $('chat-text').value = '';
      } else if (ev.event === 'error') {
        showAnswer(`error (request ${v.requestId || requestId})`, `${v.status} ${v.title}${v.detail ? ': ' + v.detail : ''}`, 'error');
      }
    }
  }

  function replyText(r) {
    if (!r) {
      return '(no reply)';
    }
    const parts = [];
    if (r.text !== null && r.text !== undefined) { parts.push(r.text); }
    if (r.data !== null && r.data !== undefined) { parts.push(pretty(r.data)); }
    return parts.join('\n') || '(empty reply)';
  }

  async function sendWebhook(t) {
    let q;
    try {
      q = new URLSearchParams($('webhook-query').value.trim().replace(/^\?/, ''));
    } catch (err) {
      showAnswer('the query parameters are not name=value pairs', '', 'error');
      return;
    }
    if (!q.has('participantId')) {
      q.set('participantId', t.participant);
    }
    q.delete('apikey');
    q.set('apikey', state.key); // the webhook contract: the key in the query (docs/interface.md#43-webhook)
    const body = $('webhook-body').value;
    let contentType = 'text/plain; charset=utf-8';
    try {
      JSON.parse(body);
      contentType = 'application/json';
    } catch (_) { /* sent as text */ }
    const url = `/api/user/webhooks/${encodeURIComponent(t.workflowId)}/${encodeURIComponent($('webhook-method').value)}?${q}`;
    const headers = {'Content-Type': contentType};
    const tenant = $('tenant').value.trim();
    if (tenant) { headers['X-Tenant-Id'] = tenant; }
    const resp = await request('POST', url, {headers, body});
    const ct = resp.headers.get('Content-Type') || '';
    const text = await resp.text();
    let shown = text;
    if (ct.includes('json')) {
      try { shown = pretty(JSON.parse(text)); } catch (_) { /* as is */ }
    }
    showAnswer(`${resp.status} ${resp.statusText} · ${ct || 'no content type'} · request ${resp.headers.get('X-Request-Id') || ''}`,
      shown, resp.ok ? 'ok' : 'error');
  }

  // ---- wiring -------------------------------------------------------------------------------

  function init() {
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      state.key = $('key').value.trim();
      if (!state.key) {
        return;
      }
      rememberKey();
      loadAgents();
    });
    $('remember').addEventListener('change', rememberKey);
    $('forget').addEventListener('click', forgetKey);
    $('agent').addEventListener('change', onAgentChange);
    for (const id of ['workflow-type', 'activation', 'participant', 'tenant']) {
      $(id).addEventListener('change', () => { updateTarget(); startWatching(); });
    }
    $('target-form').addEventListener('submit', (e) => {
      e.preventDefault();
      startWatching();
    });
    for (const input of document.querySelectorAll('input[name=kind]')) {
      input.addEventListener('change', showKindFields);
    }
    $('send-form').addEventListener('submit', (e) => {
      e.preventDefault();
      send();
    });
    $('chat-text').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        send();
      }
    });

    let saved = '';
    try { saved = sessionStorage.getItem(KEY_STORE) || ''; } catch (_) { /* storage disabled */ }
    if (saved) {
      state.key = saved;
      $('key').value = saved;
      $('remember').checked = true;
      loadAgents();
    }
    updateTarget();
  }

  init();
})();
