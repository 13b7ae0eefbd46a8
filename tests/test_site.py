"""devbench.report.site on stand-in packages: the page's CDN tags point at vendor/, every file is checked first,
and nothing is written when a check fails. (No third-party code here: the packages are made up.)"""

from __future__ import annotations

import io
import tarfile
import urllib.request
from pathlib import Path

import pytest

from devbench.report import site

PAGE = """<html><head>
<script src="https://cdn.example/lib/x.min.js" integrity="{sri}" crossorigin="anonymous"></script>
<script src="https://cdn.example/plain/y.min.js" integrity="sha512-notthisone" crossorigin="anonymous"></script>
<script src="asv.js"></script>
</head><body><a href="https://github.com/airspeed-velocity/asv/">asv</a></body></html>
"""


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    cache, html = tmp_path / "cache", tmp_path / "html"
    cache.mkdir()
    html.mkdir()
    x = _tgz({"package/x.min.js": b"var x = 1;"})
    y = _tgz({"package/y.js": b"var y = 2;"})
    (cache / "x-1.0.tgz").write_bytes(x)
    (cache / "y-2.0.tgz").write_bytes(y)
    px, py = site.Package("x", "1.0", site.sri(x, "sha512")), site.Package("y", "2.0", site.sri(y, "sha512"))
    monkeypatch.setattr(site, "FILES", {"/lib/x.min.js": (px, "package/x.min.js", True),
                                        "/plain/y.min.js": (py, "package/y.js", False)})  # fmt: skip
    (html / "index.html").write_text(PAGE.format(sri=site.sri(b"var x = 1;", "sha256")))
    return cache, html


def test_the_page_loads_only_local_files_afterwards(fake):
    cache, html = fake
    assert site.make_offline(html, cache) == ["vendor/x-1.0/x.min.js", "vendor/y-2.0/y.js"]
    page = (html / "index.html").read_text()
    assert "cdn.example" not in page and "crossorigin" not in page
    assert 'src="vendor/x-1.0/x.min.js" integrity="sha256-' in page  # the CDN's very file keeps its hash
    assert 'src="vendor/y-2.0/y.js">' in page  # the package's own build: the CDN's hash is dropped
    assert "https://github.com/airspeed-velocity/asv/" in page  # a link, not a load
    assert (html / "vendor/y-2.0/y.js").read_bytes() == b"var y = 2;"


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        ("tarball", "its sha512 is not the registry's pinned"),
        ("page", "does not match the hash asv's page names"),
        ("unknown", "which devbench.report.site does not know"),
    ],
)
def test_a_failed_check_writes_nothing(fake, spoil, message):
    cache, html = fake
    before = (html / "index.html").read_text()
    if spoil == "tarball":
        (cache / "y-2.0.tgz").write_bytes(_tgz({"package/y.js": b"evil()"}))
    elif spoil == "page":
        before = before.replace('integrity="sha256-', 'integrity="sha256-AAAA')
    else:
        before = before.replace("https://cdn.example/plain/y.min.js", "https://cdn.example/other.js")
    (html / "index.html").write_text(before)
    with pytest.raises(site.SiteError, match=message):
        site.make_offline(html, cache)
    assert (html / "index.html").read_text() == before and not (html / "vendor").exists()


def test_without_the_cache_and_the_network_it_says_what_to_do(fake, monkeypatch, capsys):
    cache, html = fake
    (cache / "y-2.0.tgz").unlink()

    def offline(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert site.main([str(html), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "y 2.0 is not in" in err and "run this once with a network" in err and "Traceback" not in err


def test_a_fetched_package_is_cached_for_offline_runs(fake, monkeypatch):
    cache, html = fake
    data = (cache / "y-2.0.tgz").read_bytes()
    (cache / "y-2.0.tgz").unlink()

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response(data))
    site.make_offline(html, cache)
    assert (cache / "y-2.0.tgz").read_bytes() == data


def test_every_known_cdn_file_of_asv_s_page_is_mapped():
    """The installed asv's own page: every address it loads is one devbench.report.site knows."""
    import asv

    page = (Path(asv.__file__).parent / "www" / "index.html").read_text()
    urls = [m.group(3) for m in site.TAG.finditer(page)]
    assert urls and all(any(u.endswith(k) for k in site.FILES) for u in urls), urls
