"""Look at a written page in headless Chromium at a reader's width: what overflows, which images are broken, where a block starts."""
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

WIDTH = 1400

# Runs once the page and its images have loaded; writes what it measured into the DOM, where --dump-dom shows it.
PROBE = """<script>
window.addEventListener('load', function () {
  var W = document.documentElement.clientWidth, out = {width: W, overflow: [], broken: [], anchors: []};
  // inside a box that scrolls sideways (or a closed <details>), a wide element is reachable; inside one that hides its
  // overflow it is cut, and counts as overflowing
  var scrolls = function (el) {
    for (var a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      var o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') return a.getBoundingClientRect().right <= W + 1;
      if (a.tagName === 'DETAILS' && !a.open) return true;
    }
    return false;
  };
  document.querySelectorAll('body *').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 1 && !scrolls(el))
      out.overflow.push(el.tagName + (el.id ? '#' + el.id : '') + (el.className && el.className.baseVal === undefined
                        ? '.' + String(el.className).split(' ')[0] : '') + ' right=' + Math.round(r.right));
  });
  document.querySelectorAll('img').forEach(function (im, i) {
    if (!(im.complete && im.naturalWidth > 0)) out.broken.push(i + ': ' + (im.getAttribute('src') || '').slice(0, 40));
  });
  document.querySelectorAll('a[href^="#"]').forEach(function (a) {
    var id = a.getAttribute('href').slice(1);
    if (id && !document.getElementById(id)) out.anchors.push(id);
  });
  out.scroll_width = document.documentElement.scrollWidth;
  out.height = document.documentElement.scrollHeight;
  var f = document.getElementById('findings');
  out.findings_top = f ? f.getBoundingClientRect().top + window.scrollY : null;
  out.overflow = out.overflow.slice(0, 20);
  var pre = document.createElement('pre');
  pre.id = 'ra-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    "The Chromium binary (Debian's `chromium`, or one on the PATH), or None."
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if path:
            return path
    return None


def probe(page: Path, width: int = WIDTH, timeout: float = 60) -> dict:
    "Open `page` (a copy with the probe script added) in headless Chromium at `width` px → what the probe measured."
    html = Path(page).read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(html.replace("</body>", PROBE + "</body>") if "</body>" in html else html + PROBE,
                        encoding="utf-8")
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={tmp}/profile", f"--window-size={width},1000", "--virtual-time-budget=10000",
               "--dump-dom", copy.as_uri()]
        dom = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    m = re.search(r'<pre id="ra-probe">(.*?)</pre>', dom, flags=re.S)
    if not m:
        raise AssertionError(f"the probe did not run on {page} (Chromium printed {len(dom)} characters)")
    import html as _html
    return json.loads(_html.unescape(m.group(1)))
