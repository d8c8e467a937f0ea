// The rollout browser (rollouts.html): filters, sort and search over the sampled rows, and a transcript as a chat.
// The state lives in the URL's hash (#b=gsm8k&p=prompt-id&o=error&q=text&sort=reward&desc=1&open=first), so a view can
// be linked (a report's flipped prompts link here with b and p).
// Model text only ever goes through textContent: it is shown, never parsed as HTML.
(function () {
  var source = document.getElementById('browser-data');
  if (!source) return;
  var data = JSON.parse(source.textContent), texts = data.texts, rows = data.rows, PAGE = 200;
  var $ = function (id) { return document.getElementById(id); };
  var f = {b: $('f-bench'), p: $('f-prompt'), o: $('f-result'), min: $('f-min'), max: $('f-max'), q: $('f-q'), sort: $('f-sort'), desc: $('f-desc')};
  var body = $('rows').querySelector('tbody'), more = $('more'), count = $('f-count'), shown = [], limit = PAGE, current = null;
  var BOARD = /^[_#X]{3,}$/;

  function text(i) { return i === null || i === undefined ? '' : texts[i]; }
  function el(tag, cls, content) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined && content !== null) e.textContent = String(content);
    return e;
  }
  function haystack(r) {
    if (r.hay === undefined) {
      var parts = [r.p, r.a || '', text(r.e)];
      r.m.forEach(function (t) { parts.push(text(t.x)); if (t.k !== undefined && t.k !== null) parts.push(text(t.k)); (t.calls || []).forEach(function (c) { parts.push(c.name, text(c.args)); }); });
      r.hay = parts.join('\n').toLowerCase();
    }
    return r.hay;
  }
  function key(r) { return data.benchmarks[r.b] + '/' + r.p + '/' + r.r; }

  function readHash() {
    var h = new URLSearchParams(location.hash.slice(1));
    f.b.value = h.get('b') || ''; f.p.value = h.get('p') || ''; f.o.value = h.get('o') || ''; f.min.value = h.get('min') || '';
    f.max.value = h.get('max') || ''; f.q.value = h.get('q') || ''; f.sort.value = h.get('sort') || 'prompt';
    f.desc.checked = h.get('desc') === '1';
    return h.get('open');
  }
  function writeHash() {
    var h = new URLSearchParams();
    ['b', 'p', 'o', 'min', 'max', 'q'].forEach(function (k) { if (f[k].value) h.set(k, f[k].value); });
    if (f.sort.value !== 'prompt') h.set('sort', f.sort.value);
    if (f.desc.checked) h.set('desc', '1');
    if (current) h.set('open', key(current));
    history.replaceState(null, '', '#' + h.toString());
  }

  var SORTS = {
    prompt: function (a, b) { return a.b - b.b || (a.p < b.p ? -1 : a.p > b.p ? 1 : 0) || a.r - b.r; },
    reward: function (a, b) { return a.w - b.w; },
    tokens: function (a, b) { return (a.t || 0) - (b.t || 0); },
    turns: function (a, b) { return a.n - b.n; }
  };
  function apply() {
    var bench = data.benchmarks.indexOf(f.b.value), q = f.q.value.trim().toLowerCase(), o = f.o.value, p = f.p.value.trim();
    var min = f.min.value === '' ? -Infinity : parseFloat(f.min.value), max = f.max.value === '' ? Infinity : parseFloat(f.max.value);
    shown = rows.filter(function (r) {
      return (bench < 0 || r.b === bench) && (!p || String(r.p) === p) && (!o || r.o === o) && r.w >= min && r.w <= max && (!q || haystack(r).indexOf(q) >= 0);
    });
    var cmp = SORTS[f.sort.value] || SORTS.prompt, sign = f.desc.checked ? -1 : 1;
    shown.sort(function (a, b) { return sign * cmp(a, b) || SORTS.prompt(a, b); });
    limit = PAGE;
    draw();
    writeHash();
  }
  function cell(tr, value, cls) { tr.appendChild(el('td', cls, value === null || value === undefined ? '–' : value)); }
  function draw() {
    body.textContent = '';
    shown.slice(0, limit).forEach(function (r) {
      var tr = el('tr');
      tr.rowData = r;
      if (r === current) tr.className = 'selected';
      cell(tr, data.benchmarks[r.b]); cell(tr, r.p); cell(tr, r.r); cell(tr, r.o, 'result-' + r.o); cell(tr, r.w);
      cell(tr, r.a); cell(tr, r.ref); cell(tr, r.t); cell(tr, r.n); cell(tr, r.c);
      body.appendChild(tr);
    });
    count.textContent = shown.length + ' of ' + rows.length + ' rollouts shown';
    more.hidden = shown.length <= limit;
  }

  // A message text as blocks: runs of equal-width lines of _ # X (a Tetris board) become a grid, the rest stays text.
  function textBlocks(s, parent) {
    var lines = s.split('\n'), buf = [], i = 0;
    function flush() { if (buf.length) { parent.appendChild(el('div', 'msg-text', buf.join('\n'))); buf = []; } }
    while (i < lines.length) {
      var j = i;
      while (j < lines.length && BOARD.test(lines[j]) && lines[j].length === lines[i].length) j++;
      if (j - i >= 2) { flush(); parent.appendChild(board(lines.slice(i, j))); i = j; } else { buf.push(lines[i]); i++; }
    }
    flush();
  }
  function board(lines) {
    var grid = el('div', 'board');
    grid.setAttribute('role', 'img');
    grid.setAttribute('aria-label', 'board ' + lines[0].length + '×' + lines.length);
    lines.forEach(function (line) {
      var row = el('div', 'board-row');
      line.split('').forEach(function (c) { row.appendChild(el('span', c === '#' ? 'cell settled' : c === 'X' ? 'cell falling' : 'cell', c)); });
      grid.appendChild(row);
    });
    return grid;
  }
  function pretty(s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch (e) { return s; }
  }
  function turn(t) {
    var box = el('div', 'turn role-' + t.role.replace(/[^a-z]/g, ''));
    var head = el('div', 'turn-head', t.role);
    if (t.id) head.appendChild(el('span', 'muted', ' · result of ' + t.id));
    box.appendChild(head);
    if (t.k !== null && t.k !== undefined) {
      var thought = el('details', 'reasoning');
      thought.appendChild(el('summary', null, 'reasoning (' + text(t.k).length.toLocaleString() + ' characters)'));
      textBlocks(text(t.k), thought);
      box.appendChild(thought);
    }
    if (t.x !== null && t.x !== undefined && text(t.x) !== '') textBlocks(text(t.x), box);
    (t.calls || []).forEach(function (c) {
      var call = el('div', 'tool-call');
      call.appendChild(el('span', 'tool-name', c.name + '('));
      call.appendChild(el('span', 'muted', c.id ? '  id ' + c.id : ''));
      call.appendChild(el('pre', 'tool-args', pretty(text(c.args))));
      call.appendChild(el('span', 'tool-name', ')'));
      box.appendChild(call);
    });
    return box;
  }
  function open(r, quiet) {  // quiet: shown without being written into the URL (the page's first view)
    current = r;
    $('t-title').textContent = data.benchmarks[r.b] + ' · prompt ' + r.p + ' · repeat ' + r.r + ' · ' + r.o + ' · reward ' + r.w;
    $('t-meta').textContent = 'answer ' + (r.a === null ? '–' : r.a) + ' · reference ' + (r.ref === null ? '–' : r.ref) +
      ' · finish ' + (r.f || '–') + ' · ' + (r.t === null ? '–' : r.t) + ' tokens' +
      (r.k ? ' (' + r.k + ' reasoning)' : '') + ' · ' + r.n + ' turns · ' + r.c +
      ' tool calls · ' + (r.l === null ? '–' : r.l + ' s');
    var turns = $('t-turns');
    turns.textContent = '';
    r.m.forEach(function (t) { turns.appendChild(turn(t)); });
    if (r.e !== null) turns.appendChild(turn({role: 'error', x: r.e}));
    if (r.fb !== undefined) { var fb = el('div', 'turn role-info', null); fb.appendChild(el('div', 'turn-head', 'final board')); fb.appendChild(board(text(r.fb).split('\n'))); turns.appendChild(fb); }
    if (r.i !== null) {
      var info = el('details', 'turn role-info');
      info.appendChild(el('summary', null, 'environment info'));
      info.appendChild(el('pre', null, text(r.i)));
      turns.appendChild(info);
    }
    $('transcript').hidden = false;
    draw();
    if (!quiet) writeHash();
  }

  body.addEventListener('click', function (ev) {
    var tr = ev.target.closest('tr');
    if (tr && tr.rowData) open(tr.rowData);
  });
  more.addEventListener('click', function () { limit += PAGE; draw(); });
  [f.p, f.min, f.max, f.q].forEach(function (e) { e.addEventListener('input', apply); });
  [f.b, f.o, f.sort, f.desc].forEach(function (e) { e.addEventListener('change', apply); });
  var wanted = readHash();
  apply();
  var hit = wanted === 'first' ? shown[0] : wanted ? rows.filter(function (r) { return key(r) === wanted; })[0] : null;
  if (hit) open(hit);
  else if (shown.length) open(shown[0], true);  // a transcript from the start: the page's right half is not empty
})();
