"""Files written whole or not at all, and JSON-lines records read back (no torch, no pandas)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: the file that marks a folder as one devbench wrote whole (and may replace whole)
MARKER = ".devbench-output"


class OutputError(Exception):
    """An output folder that cannot be written, with the reason (exit 2)."""


def check_out_dir(out_dir: Path, option: str = "--out") -> None:
    """``OutputError`` when ``out_dir`` cannot become a folder devbench replaces whole."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{option} {out_dir} is a file, not a folder")
    for parent in out_dir.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{option} {out_dir}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputError(f"{option} {out_dir}: {parent} is not writable")
            break
    if out_dir.is_dir() and not (out_dir / MARKER).exists() and any(out_dir.iterdir()):
        raise OutputError(
            f"{option} {out_dir} holds files devbench did not write; name a new or empty folder "
            "(devbench replaces its output folder whole)"
        )


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (Linux renameat2 RENAME_EXCHANGE); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the file system or kernel cannot
        return False
    raise OSError(err, os.strerror(err), str(b))


def _clean_stale(out_dir: Path) -> None:
    """Folders a killed run left beside ``out_dir`` (``.<name>.new-*``/``.<name>.old-*``)."""
    for stale in out_dir.parent.glob(f".{out_dir.name}.*-*"):
        if stale.is_dir() and stale.name.split(".")[-1].startswith(("new-", "old-")):
            shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(out_dir: Path, option: str = "--out") -> Iterator[Path]:
    """A folder beside ``out_dir`` to write into; on success it replaces ``out_dir`` whole.

    Readers see the old folder or the new one, never a mix: the new one is built apart and
    swapped in with one atomic exchange (two renames where the kernel has no exchange).
    A run killed at any moment leaves the old or the new folder in place; the next run
    removes what it left beside it. On an exception the staged folder is removed.
    """
    out_dir = Path(out_dir)
    check_out_dir(out_dir, option)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _clean_stale(out_dir)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.new-", dir=out_dir.parent))
    except OSError as exc:
        raise OutputError(f"{option} {out_dir}: {exc.strerror or exc}") from None
    try:
        yield tmp
        (tmp / MARKER).write_text("written whole by devbench; the folder is replaced on the next run\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a report is for reading
        if not out_dir.exists():
            os.rename(tmp, out_dir)
        elif _exchange(tmp, out_dir):
            shutil.rmtree(tmp, ignore_errors=True)  # now the old folder
        else:
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.rename(out_dir, old / "x")
            os.rename(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"{option} {out_dir}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report is for reading
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_jsonl(folder: Path, name: str, records: list[dict[str, Any]], sort_keys: bool = False) -> Path:
    """Append ``records`` as JSON lines to ``folder/<name>.jsonl`` (``name`` made file-safe); return the file.

    One write of whole lines with O_APPEND: concurrent writers (asv's benchmark processes)
    never interleave. A file whose last line a killed writer left torn gets a line break first, so the torn
    line alone is lost (a reader skips it), never the whole record written after it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{''.join(c if c.isalnum() or c in '-_.' else '_' for c in name)}.jsonl"
    data = "".join(json.dumps(r, sort_keys=sort_keys) + "\n" for r in records).encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":  # a torn last line
            data = b"\n" + data
        while data:  # one write of it all on a local file system; a short write goes on where it stopped
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return path


def read_jsonl(folder: Path) -> list[dict[str, Any]]:
    """Every JSON object in ``folder/*.jsonl`` (none if it is absent); unreadable lines are skipped."""
    out: list[dict[str, Any]] = []
    if not Path(folder).is_dir():
        return out
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_bytes().splitlines():  # a bad byte costs its own line only
            try:
                rec = json.loads(line.decode("utf-8"))
            except ValueError:  # UnicodeDecodeError among them
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


_MD_SPECIAL = str.maketrans(
    {c: "\\" + c for c in "\\`*[]|"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": " ", "\r": " "}
)


def md_escape(text: object) -> str:
    """Text from results as literal Markdown: ``|`` cannot split a cell, a newline a row, and
    no raw HTML, link, code or ``*`` emphasis passes into a pull-request comment. (``_`` is
    left alone: GitHub does not emphasise inside words, and names are full of it.)"""
    return str(text).translate(_MD_SPECIAL)


#: the asv machine a run records under, set by ``devbench gpu-run`` for every process it starts: the GPU-state,
#: search and run-info records then carry the machine's asv name rather than the host's
MACHINE_ENV = "DEVBENCH_MACHINE"
#: when the asv stage a process runs in is stopped (seconds since the epoch), set by ``devbench gpu-run``: a sweep
#: in a ``setup_cache``, which asv saves only when it returns, ends its work before then and returns what it has
STAGE_END_ENV = "DEVBENCH_STAGE_END"


def stage_left_s() -> float | None:
    """Seconds left before this process's asv stage is stopped (``STAGE_END_ENV``), or None outside such a stage."""
    try:
        return float(os.environ[STAGE_END_ENV]) - time.time()
    except (KeyError, ValueError):
        return None


def project_above(folder: Path | None = None) -> Path | None:
    """The nearest folder above ``folder`` (default: the current one) that holds an asv.conf.json, where ``folder``
    itself holds none: the project a user in one of its subfolders means."""
    here = (folder or Path.cwd()).resolve()
    if (here / "asv.conf.json").is_file():
        return None
    return next((p for p in here.parents if (p / "asv.conf.json").is_file()), None)


def this_hosts_machines() -> set[str]:
    """The asv machine names that stand for this host: ``DEVBENCH_MACHINE``, the entries of ~/.asv-machine.json and
    the hostname."""
    names = {platform.node()}
    named = os.environ.get(MACHINE_ENV, "").strip()
    if named:
        names.add(named)
    try:
        names |= {k for k in json.loads((Path.home() / ".asv-machine.json").read_text()) if k != "version"}
    except (OSError, ValueError, TypeError):
        pass
    return names


def default_machine() -> str:
    """asv's machine name for this host: ``DEVBENCH_MACHINE``, else the single entry of ~/.asv-machine.json,
    else the hostname."""
    named = os.environ.get(MACHINE_ENV, "").strip()
    if named:
        return named
    path = Path.home() / ".asv-machine.json"
    try:
        names = [k for k in json.loads(path.read_text()) if k != "version"]
    except (OSError, ValueError):
        names = []
    return names[0] if len(names) == 1 else platform.node()
