// The run index: a text filter over the runs table.
var filter = document.getElementById('run-filter');
if (filter) filter.addEventListener('input', function () {
  var text = filter.value.trim().toLowerCase(), shown = 0, rows = document.querySelectorAll('#runs tbody tr');
  rows.forEach(function (tr) {
    var ok = !text || tr.textContent.toLowerCase().indexOf(text) >= 0;
    tr.hidden = !ok;
    if (ok) shown++;
  });
  document.getElementById('run-count').textContent = shown + ' of ' + rows.length + ' rows shown';
});
