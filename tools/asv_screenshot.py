"""Screenshot a page of the asv dashboard in headless Chromium, without network.

asv's pages load jQuery, flot, bootstrap and md5 from CDNs; this serves a copy of the published
html folder with those replaced by Debian's packaged copies (flot 4 stands in for asv's 0.8.3:
the charts draw, the legend box renders black). Needs Debian's chromium, libjs-jquery,
libjs-jquery-flot, libjs-jquery-stupidtable, libjs-bootstrap and node-blueimp-md5.

    python tools/asv_screenshot.py asv_benchmarks/html /tmp/relu.png \\
        "#activation.time_relu?x-axis=backend"

Keep the screenshots out of the repository.
"""
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JS = Path("/usr/share/javascript")
# (a piece of the CDN address, the local copy; None: an optional plugin, served empty)
LOCAL = [
    ("jquery-3", JS / "jquery/jquery.min.js"),
    ("jquery.flot.min.js", JS / "jquery-flot/jquery.flot.pack.js"),
    ("flot", None),
    ("stupidtable", JS / "jquery-stupidtable/stupidtable.min.js"),
    ("md5", JS / "blueimp-md5/md5.min.js"),
    ("bootstrap.min.js", JS / "bootstrap/js/bootstrap.min.js"),
    ("bootstrap.min.css", JS / "bootstrap/css/bootstrap.min.css"),
]


def serve_locally(src, dst):
    """Copy the html folder `src` to `dst` with every CDN script pointed at a local copy."""
    shutil.copytree(src, dst)
    lib = dst / "lib"
    lib.mkdir()
    (lib / "empty.js").write_text("")
    names = {}
    for i, (key, path) in enumerate(LOCAL):
        if path is None:
            names[key] = "lib/empty.js"
        else:
            names[key] = f"lib/{i}{path.suffix}"
            shutil.copy(path, dst / names[key])

    def local(match):
        url = match.group(2)
        name = next((names[key] for key, _ in LOCAL if key in url), url)
        return f'{match.group(1)}="{name}"'

    for page in dst.glob("*.html"):
        text = re.sub(r'(src|href)="(https://[^"]+)"', local, page.read_text())
        text = re.sub(r' integrity="[^"]*"', "", text)     # the local copies' hashes differ
        page.write_text(text)


def main(src, out, page, port=8766):
    site = Path(tempfile.mkdtemp()) / "site"
    serve_locally(src, site)
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port)], cwd=site,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    try:
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--window-size=1400,1000", "--virtual-time-budget=8000",
                        f"--screenshot={out}", f"http://127.0.0.1:{port}/{page}"],
                       capture_output=True, timeout=90, check=True)
    finally:
        server.kill()
        shutil.rmtree(site.parent, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
