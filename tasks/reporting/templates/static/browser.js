// The rollout browser of report.html: filters over the rows, and the transcript panel of a clicked row.
document.querySelectorAll('.browser').forEach(function (box) {
  var rows = Array.prototype.slice.call(box.querySelectorAll('tbody tr'));
  var q = box.querySelector('.f-prompt'), lo = box.querySelector('.f-min'), hi = box.querySelector('.f-max');
  var oc = box.querySelector('.f-result'), count = box.querySelector('.f-count');
  var panel = box.querySelector('.transcript'), data = null;
  function apply() {
    var text = q.value.trim().toLowerCase(), want = oc.value, shown = 0;
    var min = lo.value === '' ? -Infinity : parseFloat(lo.value);
    var max = hi.value === '' ? Infinity : parseFloat(hi.value);
    rows.forEach(function (tr) {
      var r = parseFloat(tr.getAttribute('data-reward'));
      var ok = (!text || tr.getAttribute('data-prompt').toLowerCase().indexOf(text) >= 0) &&
               r >= min && r <= max && (!want || tr.getAttribute('data-result') === want);
      tr.hidden = !ok;
      if (ok) shown++;
    });
    count.textContent = shown + ' of ' + rows.length + ' rollouts shown';
  }
  [q, lo, hi].forEach(function (el) { el.addEventListener('input', apply); });
  oc.addEventListener('change', apply);
  box.querySelector('tbody').addEventListener('click', function (ev) {
    var tr = ev.target.closest('tr');
    if (!tr) return;
    if (data === null) data = JSON.parse(box.querySelector('script.rollout-data').textContent);
    var d = data[parseInt(tr.getAttribute('data-i'), 10)] || {};
    rows.forEach(function (r) { r.classList.remove('selected'); });
    tr.classList.add('selected');
    panel.querySelector('.t-title').textContent = 'prompt ' + tr.getAttribute('data-prompt') +
      ' · repeat ' + tr.getAttribute('data-repeat') + ' · ' + tr.getAttribute('data-result') +
      ' · reward ' + tr.getAttribute('data-reward');
    var text = d.completion === null || d.completion === undefined ? '(no completion)' : d.completion;
    if (d.error) text = 'error: ' + d.error + '\n\n' + text;
    panel.querySelector('.t-text').textContent = d.omitted ? '(not embedded: ' + d.omitted + ')' : text;
    var rest = {};
    Object.keys(d).forEach(function (k) { if (k !== 'completion' && k !== 'error') rest[k] = d[k]; });
    panel.querySelector('.t-json').textContent = JSON.stringify(rest, null, 2);
    panel.hidden = false;
    panel.scrollIntoView({block: 'nearest'});
  });
  panel.querySelector('.t-close').addEventListener('click', function () { panel.hidden = true; });
  apply();
});
