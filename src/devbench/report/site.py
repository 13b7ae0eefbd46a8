"""The ``asv publish`` site, made to work offline: its CDN scripts served from the site itself.

asv's ``index.html`` loads jQuery, Flot, Bootstrap, stupidtable and blueimp-md5 from three CDNs;
without a network the page is blank. GPU clusters are often air-gapped, so ``make publish``
runs ``python -m devbench.report.site .asv/html`` after ``asv publish``: each CDN file is taken from
its package on the npm registry, pinned by version and checked, copied into the site's
``vendor/`` folder, and the page points there. No third-party code is committed here: the
packages are fetched once into a cache (``~/.cache/devbench/site``, or ``$DEVBENCH_SITE_CACHE``)
and every later run, offline too, reads them from it. Copy that folder to a machine without
a network to publish there.

Checks: where the registry's file is the very file the CDN serves, it must match the
Subresource Integrity hash asv's page names (and the page keeps it). Flot's and stupidtable's
CDN files were minified by the CDN itself, so no package holds them; for those the package
tarball must match the registry's own sha512, pinned below, and the page loads the package's
plain build instead. Nothing is written when a check fails.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devbench.records.files import write_atomic

REGISTRY = "https://registry.npmjs.org"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    #: the registry's ``dist.integrity`` of the tarball (npm view NAME@VERSION dist.integrity)
    integrity: str

    @property
    def tarball(self) -> str:
        return f"{self.name}-{self.version}.tgz"


JQUERY = Package(
    "jquery",
    "3.3.1",
    "sha512-Ubldcmxp5np52/ENotGxlLe6aGMvmF4R8S6tZjsP6Knsaxd/xp3Zrh50cG93lR6nPXyUFwzN3ZSOQI0wRJNdGg==",
)
FLOT = Package(
    "flot",
    "0.8.3",
    "sha512-xg2otcTJDvS+ERK+my4wxG/ASq90QURXtoM4LhacCq0jQW2jbyjdttbRNqU2cPykrpMvJ6b2uSp6SAgYAzj9tQ==",
)
ORDERBARS = Package(
    "flot-orderbars",
    "1.0.0",
    "sha512-Jv51fvzevUjNXEeozpwEKfPjhiZhfiJddv0WHjduUTCmSF+7T5K7C9c9Y1wIVmUhDBv5fLMjgbwKecT0GIKPZA==",
)
#: 1.0.1, the CDN's, is not on the registry; 1.1.3 keeps its one call, ``$(table).stupidtable()``
STUPIDTABLE = Package(
    "stupid-table-plugin",
    "1.1.3",
    "sha512-2Vk7XouQPxUQPRe9w0Fu7ZZ8kHLK7rDoLMsCgtKxRNJ7f4dSOGvW9CkHsq5wD6QsaEnWoyLBYH3xOEsrK3yWBg==",
)
MD5 = Package(
    "blueimp-md5",
    "2.19.0",
    "sha512-DRQrD6gJyy8FbiE4s+bDoXS9hiW3Vbx5uCdwvcCf3zLHL+Iv7LtGHLpr+GZV8rHG8tK766FGYBwRbu8pELTt+w==",
)
BOOTSTRAP = Package(
    "bootstrap",
    "3.1.1",
    "sha512-TAzqS8E/ISpVHP29gYhy+1NSV+FJwApDVQhDfgLYsIuUDJiqJzH2DfORN5tiu+Ie2iBLrzEG34t4Rf465cigqg==",
)

#: the end of each CDN address in asv's page -> the package and the file in it; ``True`` where that
#: file is the CDN's very file (so its SRI hash must match)
FILES: dict[str, tuple[Package, str, bool]] = {
    "/jquery-3.3.1.min.js": (JQUERY, "package/dist/jquery.min.js", True),
    "/flot/0.8.3/jquery.flot.min.js": (FLOT, "package/jquery.flot.js", False),
    "/flot/0.8.3/jquery.flot.time.min.js": (FLOT, "package/jquery.flot.time.js", False),
    "/flot/0.8.3/jquery.flot.selection.min.js": (FLOT, "package/jquery.flot.selection.js", False),
    "/flot/0.8.3/jquery.flot.categories.min.js": (FLOT, "package/jquery.flot.categories.js", False),
    "/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": (ORDERBARS, "package/js/jquery.flot.orderBars.js", True),
    "/stupidtable/1.0.1/stupidtable.min.js": (STUPIDTABLE, "package/stupidtable.min.js", False),
    "/blueimp-md5/2.19.0/js/md5.min.js": (MD5, "package/js/md5.min.js", True),
    "/bootstrap@3.1.1/dist/js/bootstrap.min.js": (BOOTSTRAP, "package/dist/js/bootstrap.min.js", True),
    "/bootstrap@3.1.1/dist/css/bootstrap.min.css": (BOOTSTRAP, "package/dist/css/bootstrap.min.css", True),
}

#: a tag that loads from an http(s) address: its attribute holding the address and the address
TAG = re.compile(r"<(script|link)\b[^>]*?\b(src|href)=\"(https?://[^\"]+)\"[^>]*>")


class SiteError(Exception):
    """A file could not be fetched or failed its check; the message names it."""


def sri(data: bytes, algorithm: str) -> str:
    return f"{algorithm}-{base64.b64encode(hashlib.new(algorithm, data).digest()).decode()}"


def cache_dir() -> Path:
    return Path(os.environ.get("DEVBENCH_SITE_CACHE") or Path.home() / ".cache" / "devbench" / "site")


def tarball(pkg: Package, cache: Path) -> bytes:
    """The package's tarball, from the cache or else the registry, checked against its pinned sha512."""
    path = cache / pkg.tarball
    if path.is_file():
        data = path.read_bytes()
    else:
        url = f"{REGISTRY}/{pkg.name}/-/{pkg.tarball}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except OSError as exc:
            raise SiteError(
                f"{pkg.name} {pkg.version} is not in {cache} and the registry cannot be reached ({exc}); "
                f"run this once with a network, or copy that folder from a machine that did"
            ) from None
    if sri(data, "sha512") != pkg.integrity:
        raise SiteError(f"{pkg.tarball}: its sha512 is not the registry's pinned {pkg.integrity[:24]}...")
    if not path.is_file():
        write_atomic(path, data)
    return data


def member(data: bytes, name: str, pkg: Package) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        try:
            f = t.extractfile(name)
        except KeyError:
            f = None
        if f is None:
            raise SiteError(f"{pkg.tarball} has no {name}")
        return f.read()


def localize(html: str, cache: Path) -> tuple[str, dict[str, bytes]]:
    """``html`` with every CDN tag pointing at ``vendor/``, and the files to write there."""
    files: dict[str, bytes] = {}

    def swap(match: re.Match) -> str:
        tag, attr, url = match.group(0), match.group(2), match.group(3)
        key = next((k for k in FILES if url.endswith(k)), None)
        if key is None:
            raise SiteError(f"the page loads {url}, which devbench.report.site does not know; asv changed its page")
        pkg, name, same = FILES[key]
        data = member(tarball(pkg, cache), name, pkg)
        integrity = re.search(r'\bintegrity="([^"]+)"', tag)
        if same and integrity and sri(data, integrity.group(1).split("-", 1)[0]) != integrity.group(1):
            raise SiteError(f"{pkg.name} {pkg.version} {name} does not match the hash asv's page names for {url}")
        local = f"vendor/{pkg.name}-{pkg.version}/{Path(name).name}"
        files[local] = data
        tag = tag.replace(f'{attr}="{url}"', f'{attr}="{local}"')
        tag = re.sub(r'\s+crossorigin="[^"]*"', "", tag)
        if not same:  # the package's own build: the CDN's hash is not its hash (the tarball's was checked)
            tag = re.sub(r'\s+integrity="[^"]*"', "", tag)
        return tag

    return TAG.sub(swap, html), files


def make_offline(html_dir: Path, cache: Path | None = None) -> list[str]:
    """Rewrite every page of ``html_dir`` (``asv publish``'s output) to load only local files."""
    cache = cache or cache_dir()
    pages = [p for p in (html_dir / "index.html", html_dir / "error.html") if p.is_file()]
    if not pages:
        raise SiteError(f"{html_dir} has no index.html: run asv publish first")
    written: dict[str, bytes] = {}
    new_pages = {}
    for page in pages:
        html, files = localize(page.read_text(encoding="utf-8"), cache)
        new_pages[page] = html
        written.update(files)
    for rel, data in written.items():  # every file checked before anything is written
        write_atomic(html_dir / rel, data)
    for page, html in new_pages.items():
        write_atomic(page, html)
    return sorted(written)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m devbench.report.site",
        description="Make an asv publish site work offline: its CDN scripts and styles are fetched once from "
        "the npm registry (pinned versions, checked hashes) into a cache and copied into the site's vendor/.",
    )
    ap.add_argument("html_dir", nargs="?", default=".asv/html", help="asv's html_dir (default .asv/html)")
    ap.add_argument("--cache", help=f"where the packages are kept (default {cache_dir()})")
    args = ap.parse_args(argv)
    try:
        files = make_offline(Path(args.html_dir), Path(args.cache) if args.cache else None)
    except SiteError as exc:
        print(f"devbench.report.site: {exc}", file=sys.stderr)
        return 2
    print(f"{args.html_dir}: {len(files)} files in vendor/, the site loads nothing from the network")
    return 0


if __name__ == "__main__":
    sys.exit(main())
