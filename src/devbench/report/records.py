"""Side records the report joins to asv's results: run info, GPU state, and torchrun collectives files.

* ``.asv/runinfo``: the torch and CUDA each benchmark process really imported (``devbench.records.runinfo``);
* ``.asv/gpustate``: NVML state around each GPU benchmark (``devbench.records.gpustate``);
* ``.asv/collectives``: figures of ``python -m devbench.worlds.collectives`` runs;
* ``.asv/fleet``: ``python -m devbench.worlds.fleet`` runs (every GPU at once, judged against its peers);
* ``.asv/achievable``: the shape searches of ``bench_achievable`` (best shape per device and dtype).

All sit beside the asv results directory. No torch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from devbench.records import gpustate, runinfo
from devbench.records.files import read_jsonl
from devbench.records.spec import params_label
from devbench.report.problems import Problem


def runinfo_index(results_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Run records (``.asv/runinfo``, beside the results) by environment name, oldest first."""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for rec in runinfo.load(results_dir.parent / "runinfo"):
        if isinstance(rec.get("env_name"), str) and isinstance(rec.get("time"), (int, float)):
            by_env.setdefault(rec["env_name"], []).append(rec)
    for recs in by_env.values():
        recs.sort(key=lambda r: r["time"])
    return by_env


def actual_versions(records: list[dict[str, Any]], started: list[float], machine: str | None = None,
                    commit: str | None = None) -> tuple[Any, Any, Any]:  # fmt: skip
    """torch, CUDA and Python of the run record nearest to when these results were measured (12 h at most), of
    the same machine and commit where records name them: another machine's environment of the same name, or the
    same environment run for another commit (its torch since upgraded), does not label these results where their
    own machine's, or their own commit's, record exists (a record under another machine name, as the H200's
    committed one is, still labels a history that has no record of that machine; one of another commit, a history
    with no record of that commit)."""
    if machine is not None:
        records = [r for r in records if r.get("machine") == machine] or records
    if commit is not None:
        # no record of this commit (results copied from elsewhere, a run record lost): the nearest of any
        records = ([r for r in records if r.get("commit") == commit] or [r for r in records if not r.get("commit")]
                   or records)  # fmt: skip
    if not records or not started:
        return None, None, None
    when = sorted(started)[len(started) // 2] / 1e3
    best = min(records, key=lambda r: abs(r["time"] - when))
    if abs(best["time"] - when) > 12 * 3600:
        return None, None, None
    return best.get("torch"), best.get("cuda"), best.get("python")


def _label(params: Any) -> str:
    return params_label(list(params), list(params.values())) if isinstance(params, dict) else ""


def attach_gpu_state(frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """Add ``gpu_throttled`` and ``gpu_state`` from ``devbench.records.gpustate`` records in ``folder``.

    A row's window runs from its benchmark's ``started_at`` to the next benchmark's start
    in the same result file; the records of its class and parameters inside that window
    belong to it. ``gpu_throttled`` is True when a record shows an active throttle reason
    or NVML's power/thermal violation time grew inside the window, False when records
    exist and show neither, and missing (NA) where no record applies (CPU rows, runs
    without NVML) or none read the reasons or the counters (a driver that gives neither).
    ``gpu_state`` summarizes the range seen (SM clock, temperature, power).
    ``gpu_mhz`` and ``gpu_watts`` are the median SM clock and power sampled while the
    figure was timed (the ``during`` records of ``gpustate.Sampler``), NaN without them;
    ``gpu_reasons`` the throttle reasons seen then (comma-separated), and ``gpu_pcie_gen`` and
    ``gpu_pcie_width`` the PCIe link as it trained under that work; ``gpu_power_limit_w`` and
    ``gpu_default_power_limit_w`` the board's power limit then and NVML's default for it. A process records every
    GPU it sees: ``gpu_throttled`` counts any of them (a figure may use more than one), every other column only
    the GPU the figure ran on (``gpustate.figure_gpu``), so an idle neighbour's clock or limit never judges it.
    """
    recs = gpustate.load(folder)
    if not recs or frame.empty:
        return frame
    # a GPU the recording process did not see (CUDA_VISIBLE_DEVICES: NVML lists every GPU) ran none of its figures
    recs = [r for r in recs if "cuda_index" not in r or r["cuda_index"] is not None]
    if not recs:
        return frame
    g = pd.DataFrame(recs)
    # a process records every GPU it sees; the figure's own (gpustate.figure_gpu) is the one it is judged by
    g = g.assign(params=g["params"].map(_label), when=pd.to_datetime(g["time"], unit="s", utc=True),
                 own_gpu=[gpustate.on_figure_gpu(r) for r in recs])  # fmt: skip
    g = g.rename(columns={"benchmark": "cls", "commit": "rec_commit", "env": "rec_env"})
    for col in ("figure", "rec_commit", "rec_env"):
        if col not in g.columns:
            g[col] = None
    f = frame[["machine", "env", "commit", "benchmark", "params", "started_at"]].astype({"params": str})
    f = f.assign(row=np.arange(len(f)), cls=f["benchmark"].astype(str).str.rsplit(".", n=1).str[0])
    starts = f.drop_duplicates(["machine", "env", "commit", "benchmark"]).sort_values("started_at")
    starts = starts.assign(ends=starts.groupby(["machine", "env", "commit"], observed=True)["started_at"].shift(-1))
    f = f.merge(starts[["machine", "env", "commit", "benchmark", "ends"]], on=["machine", "env", "commit", "benchmark"])
    # the measuring process times a workload's figures together, while asv runs the first of them: a record keyed
    # by its figure belongs to that figure from the start of its run (the first figure asv started in that file)
    runs = starts.groupby(["machine", "env", "commit"], observed=True)["started_at"].min().rename("run_start")
    f = f.merge(runs.reset_index().astype({"machine": str}), on=["machine", "env", "commit"], how="left")
    f = f.astype({"machine": str})
    m = f.merge(g, on=["machine", "cls", "params"])
    # a record that names the run asv made it in belongs to that run's result alone (an older one names none)
    m = m[(m["rec_commit"].isna() | (m["rec_commit"] == m["commit"].astype(str)))
          & (m["rec_env"].isna() | (m["rec_env"] == m["env"].astype(str)))]  # fmt: skip
    keyed = m["figure"].notna()
    m = m[~keyed | (m["figure"] == m["benchmark"].astype(str).str.rsplit(".", n=1).str[-1])]
    keyed = m["figure"].notna()
    start = m["started_at"].where(~keyed, m["run_start"])
    m = m[(m["when"] >= start) & (m["ends"].isna() | (m["when"] < m["ends"]))]  # no next benchmark: no end
    if m.empty:
        return frame
    for col in ("throttling", "power_violation_ns", "thermal_violation_ns", "sm_clock_mhz", "temperature_c", "power_w"):
        if col not in m.columns:
            m[col] = None
    m = m.assign(active=m["throttling"].map(lambda t: bool(t) if isinstance(t, list) else False))
    viol = m[["power_violation_ns", "thermal_violation_ns"]].apply(pd.to_numeric, errors="coerce")
    m = m.assign(pv=viol["power_violation_ns"], tv=viol["thermal_violation_ns"])
    # what was read at all: a GPU whose reasons and counters no record holds is not known free of throttling
    m = m.assign(known=m["throttling"].map(lambda t: isinstance(t, list)) | m["pv"].notna() | m["tv"].notna())
    per = m.groupby(["row", "index"]).agg(
        known=("known", "any"),
        active=("active", "any"),
        pv=("pv", lambda s: s.max() - s.min()),
        tv=("tv", lambda s: s.max() - s.min()),
        clk_lo=("sm_clock_mhz", "min"),
        clk_hi=("sm_clock_mhz", "max"),
        temp=("temperature_c", "max"),
        power=("power_w", "max"),
        own=("own_gpu", "any"),
    )
    per["throttled"] = per["active"] | (per["pv"].fillna(0) > 0) | (per["tv"].fillna(0) > 0)
    # throttled: any GPU the process saw (a figure may use more than one; it only leaves a point out of step
    # detection); not known (NA) where no GPU's reasons or counters were read and none was seen held back
    # the state's text: the figure's own GPU
    by_row = per.groupby(level="row").agg(throttled=("throttled", "any"), known=("known", "any"))
    by_row["throttled"] = by_row["throttled"].astype("boolean").where(by_row["throttled"] | by_row["known"])
    own = per[per["own"]].groupby(level="row").agg(
        clk_lo=("clk_lo", "min"), clk_hi=("clk_hi", "max"), temp=("temp", "max"), power=("power", "max"),
    )  # fmt: skip
    text = (
        "SM " + own["clk_lo"].map("{:.0f}".format) + "-" + own["clk_hi"].map("{:.0f}".format) + " MHz, "
        + own["temp"].map("{:.0f}".format) + " C max, " + own["power"].map("{:.0f}".format) + " W max"
    )  # fmt: skip
    throttled = pd.Series(pd.NA, index=frame.index, dtype="boolean")
    state = pd.Series(None, index=frame.index, dtype=object)
    throttled.iloc[by_row.index.to_numpy()] = by_row["throttled"].to_numpy()
    state.iloc[text.index.to_numpy()] = text.to_numpy()
    out = frame.assign(gpu_throttled=throttled, gpu_state=state)
    # from here on, only the GPU the figure ran on: another GPU's clock, reasons or limit never judge it
    m = m[m["own_gpu"]]
    # sampled while the figure was timed (gpustate.Sampler): the clock and power the figure ran at
    phase = m["phase"] if "phase" in m.columns else pd.Series("", index=m.index)
    timed_rows = set(m.loc[phase == "timed", "row"])
    # a benchmark's own samples of its measured blocks ("timed") win over set-up to tear-down ("during")
    during = m[(phase == "timed") | ((phase == "during") & ~m["row"].isin(timed_rows))]
    mhz = pd.Series(np.nan, index=frame.index)
    watts = pd.Series(np.nan, index=frame.index)
    if not during.empty:
        med = during.groupby("row")[["sm_clock_mhz", "power_w"]].median()
        mhz.iloc[med.index.to_numpy()] = pd.to_numeric(med["sm_clock_mhz"], errors="coerce").to_numpy()
        watts.iloc[med.index.to_numpy()] = pd.to_numeric(med["power_w"], errors="coerce").to_numpy()
    # the throttle reasons seen and the PCIe link as trained while it was timed: what
    # devbench.records.expected judges by
    reasons = pd.Series("", index=frame.index, dtype=object)
    gen = pd.Series(np.nan, index=frame.index)
    width = pd.Series(np.nan, index=frame.index)
    if not during.empty:
        seen = during.groupby("row")["throttling"].agg(
            lambda col: ", ".join(sorted({t for ts in col if isinstance(ts, list) for t in ts})))
        reasons.iloc[seen.index.to_numpy()] = seen.to_numpy()
        for col, series in (("pcie_gen", gen), ("pcie_width", width)):
            if col in during.columns:
                top = pd.to_numeric(during[col], errors="coerce").groupby(during["row"]).max()
                series.iloc[top.index.to_numpy()] = top.to_numpy()
    # the board's power limit then, and its default: a limit set below the default is a fault the verdict names
    limits = {c: pd.Series(np.nan, index=frame.index) for c in ("power_limit_w", "default_power_limit_w")}
    for col, series in limits.items():
        if not during.empty and col in during.columns:
            top = pd.to_numeric(during[col], errors="coerce").groupby(during["row"]).max()
            series.iloc[top.index.to_numpy()] = top.to_numpy()
    return out.assign(gpu_mhz=mhz, gpu_watts=watts, gpu_reasons=reasons, gpu_pcie_gen=gen, gpu_pcie_width=width,
                      gpu_power_limit_w=limits["power_limit_w"],
                      gpu_default_power_limit_w=limits["default_power_limit_w"])  # fmt: skip


COLLECTIVE_FORMAT = "devbench-collectives/1"
COLLECTIVE_COLUMNS = ["file", "machine", "env", "backend", "world", "nodes", "finished", "torch", "commit",
                      "op", "nbytes", "time_us", "time_max_us", "algbw", "busbw"]  # fmt: skip


def load_collectives(folder: str | os.PathLike[str], problems: list[Problem] | None = None) -> pd.DataFrame:
    """The rows of every ``python -m devbench.worlds.collectives`` file in ``folder`` (none if it is absent).

    One row per file x op x size; ``env`` is ``"<backend> x<world>"`` so the report can
    label runs like asv environments. A file that is not such a document is skipped and
    named in ``problems``.
    """
    root = Path(folder)
    rows: list[dict[str, Any]] = []
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != COLLECTIVE_FORMAT:
                raise ValueError(f"not a {COLLECTIVE_FORMAT} document")
            meta = {
                "file": path.name,
                "machine": str(doc["machine"]),
                "env": f"{doc['backend']} x{doc['world']}",
                "backend": doc["backend"],
                "world": int(doc["world"]),
                "nodes": int(doc.get("nodes", 1)),
                "finished": pd.Timestamp(doc["finished"]),
                "torch": doc.get("torch"),
                "commit": doc.get("commit"),
            }
            for r in doc["rows"]:
                rows.append({**meta, **{k: r[k] for k in ("op", "nbytes", "time_us", "time_max_us", "algbw", "busbw")}})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if problems is not None:
                problems.append(Problem(str(path), f"skipped: {exc}"))
    return pd.DataFrame(rows, columns=COLLECTIVE_COLUMNS)


_VERSION = re.compile(r"^\d+(\.\d+)*$")


def _text(value: Any) -> str | None:
    """A field's text, or None where it is missing (None, or NaN where other rows of its column hold text)."""
    return value if isinstance(value, str) and value else None


def env_labels(frame: pd.DataFrame) -> dict[str, str]:
    """A short label per asv environment name, e.g. ``py3.11 torch2.13.0 (virtualenv)``.

    asv names an ``existing`` environment after its interpreter's path; the label keeps
    what a reader needs (the kind of environment, Python and torch where known) and no
    path. Labels that would collide on one machine get ``#2``, ``#3``.
    """
    cols = [c for c in ("env", "machine", "python", "requirements", "torch_version", "env_torch") if c in frame.columns]
    firsts = frame[cols].drop_duplicates("env")
    labels: dict[str, str] = {}
    seen: dict[tuple[str, str], int] = {}
    for row in firsts.itertuples(index=False):
        rec = row._asdict()
        env = str(rec["env"])
        kind = env.split("-", 1)[0] if "-" in env else env
        parts = []
        py = str(rec.get("python") or "")
        if _VERSION.match(py):
            parts.append(f"py{py}")
        torch = _text(rec.get("torch_version")) or _text(rec.get("env_torch"))
        if torch:
            parts.append(f"torch{torch}")
        label = " ".join(parts) + f" ({kind})" if parts else kind
        key = (str(rec.get("machine")), label)
        seen[key] = seen.get(key, 0) + 1
        labels[env] = label if seen[key] == 1 else f"{label} #{seen[key]}"
    return labels


def _relabel(col: pd.Series, label: Callable[[str], Any]) -> pd.Categorical:
    """``col`` with each distinct value replaced by ``label(value)``, done once per distinct value."""
    codes, uniques = pd.factorize(col.astype(object), use_na_sentinel=True)
    new = [label(str(u)) for u in uniques]
    cats = pd.unique(pd.Series([n for n in new if n is not None], dtype=object))
    where = {c: i for i, c in enumerate(cats)}
    remap = np.array([where[n] if n is not None else -1 for n in new] + [-1], dtype=np.int64)
    return pd.Categorical.from_codes(remap[codes], categories=cats)


def without_paths(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as the report shows it: short environment labels, no interpreter or file paths (in place)."""
    labels = env_labels(frame)
    # labels are unique per machine, not overall: map the distinct values, then make categories again
    frame["env"] = _relabel(frame["env"], lambda e: labels.get(e, e))
    if "python" in frame.columns:
        frame["python"] = _relabel(frame["python"], lambda v: v if _VERSION.match(v) else None)
    return frame.drop(columns=[c for c in ("file",) if c in frame.columns])


def _torch_in_name(env: str) -> str:
    """The torch version an asv environment's name carries (``virtualenv-py3.11-torch2.13.0``: its matrix),
    marked as read from the name; empty where it names none."""
    found = re.search(r"torch(\d+\.\d+(?:\.\d+)?)", env)
    return f"{found.group(1)} (from the name)" if found else ""


def env_legend(frame: pd.DataFrame) -> pd.DataFrame:
    """Label -> what it stands for (kind, Python, torch, requirements), one row per environment."""
    labels = env_labels(frame)
    cols = [c for c in ("env", "machine", "python", "requirements", "torch_version") if c in frame.columns]
    rows = []
    # per environment, its newest row whose run record named the torch that ran, else its first row
    known = frame[cols].dropna(subset=["torch_version"]) if "torch_version" in cols else frame[cols].iloc[:0]
    picked = pd.concat([known.iloc[::-1], frame[cols]]).drop_duplicates("env")
    for rec in picked.to_dict("records"):
        py = rec.get("python")
        rows.append(
            {
                "environment": labels[str(rec["env"])],
                "machine": rec.get("machine"),
                "kind": str(rec["env"]).split("-", 1)[0],
                "python": py if isinstance(py, str) and _VERSION.match(py) else "not recorded",
                "torch": _text(rec.get("torch_version")) or _torch_in_name(str(rec["env"])) or "not recorded",
                "requirements": _text(rec.get("requirements")) or "",
            }
        )
    return pd.DataFrame(rows)


def _parsed_jsonl(
    folder: str | os.PathLike[str],
    parse: Callable[[dict[str, Any]], dict[str, Any]],
    what: str,
    columns: list[str],
    problems: list[Problem] | None,
) -> pd.DataFrame:
    """``parse`` of every record in ``folder/*.jsonl``; records it cannot parse are counted and the folder named."""
    rows, bad = [], 0
    for rec in read_jsonl(Path(folder)):
        try:
            rows.append(parse(rec))
        except (KeyError, TypeError, ValueError):
            bad += 1
    if problems is not None and bad:
        problems.append(Problem(str(folder), f"{bad} record(s) skipped: not a {what} record"))
    return pd.DataFrame(rows, columns=columns)


ACHIEVABLE_COLUMNS = ["machine", "device", "dtype", "m", "k", "n", "shape", "search_tflops", "searched", "left",
                      "torch", "time"]  # fmt: skip


def load_achievable(folder: str | os.PathLike[str], problems: list[Problem] | None = None) -> pd.DataFrame:
    """The newest shape search per machine, device and dtype (``bench_achievable``'s ``.asv/achievable``).

    A line that is not a search record is skipped; a file with such lines is named in ``problems``.
    """

    def parse(rec: dict[str, Any]) -> dict[str, Any]:
        best = rec["best"]
        m, k, n = int(best["m"]), int(best["k"]), int(best["n"])
        return {
            # the search names the torch device it ran on ("cuda:0"); asv's figures the kind ("cuda")
            "machine": str(rec["machine"]), "device": str(rec["device"]).split(":", 1)[0], "dtype": str(rec["dtype"]),
            "m": m, "k": k, "n": n, "shape": f"{m}x{k}x{n}", "search_tflops": float(best["tflops"]),
            "searched": len(rec.get("searched", [])), "left": int(rec.get("left", 0)),
            "torch": rec.get("torch"), "time": float(rec["time"]),
        }  # fmt: skip

    out = _parsed_jsonl(folder, parse, "shape-search", ACHIEVABLE_COLUMNS, problems)
    if out.empty:
        return out
    return out.sort_values("time").drop_duplicates(["machine", "device", "dtype"], keep="last").reset_index(drop=True)


FLEET_FORMAT = "devbench-fleet/1"
FLEET_COLUMNS = ["file", "machine", "finished", "measured", "world", "rank", "host", "device", "id", "name",
                 "figure", "unit", "value", "median", "deviation", "flagged", "sm_clock_mhz", "power_w"]  # fmt: skip


def load_fleet(folder: str | os.PathLike[str], problems: list[Problem] | None = None) -> pd.DataFrame:
    """One row per rank and figure of the newest ``python -m devbench.worlds.fleet`` file per machine.

    A file that is not a fleet document is skipped and named in ``problems``.
    """
    root = Path(folder)
    docs = []
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != FLEET_FORMAT:
                raise ValueError(f"not a {FLEET_FORMAT} document")
            ident = {int(r["identity"]["rank"]): r for r in doc["ranks"]}
            rows = []
            for row in doc["rows"]:
                r = ident[int(row["rank"])]
                i, clocks = r["identity"], r.get("clocks") or {}
                rows.append({
                    "file": path.name, "machine": str(doc["machine"]), "finished": pd.Timestamp(doc["finished"]),
                    "measured": doc.get("measured", ""), "world": int(doc["world"]), "rank": int(row["rank"]),
                    "host": i.get("host"), "device": i.get("device"),
                    "id": i.get("pci_bus_id") or i.get("uuid") or "", "name": i.get("name"),
                    "figure": str(row["figure"]), "unit": str(row["unit"]), "value": float(row["value"]),
                    "median": float(row["median"]), "deviation": float(row["deviation"]),
                    "flagged": bool(row["flagged"]), "sm_clock_mhz": clocks.get("sm_clock_mhz"),
                    "power_w": clocks.get("power_w"),
                })  # fmt: skip
            docs.append(rows)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if problems is not None:
                problems.append(Problem(str(path), f"skipped: {exc}"))
    out = pd.DataFrame([r for rows in docs for r in rows], columns=FLEET_COLUMNS)
    if out.empty:
        return out
    newest = out.groupby("machine")["finished"].transform("max")
    return out[out["finished"] == newest].reset_index(drop=True)


PEER_COLUMNS = ["machine", "time", "nbytes", "src", "dst", "gbps", "path", "src_id", "dst_id", "nvlinks", "switched",
                "pcie", "gpu_links"]


def newest_sweeps(peers: pd.DataFrame) -> pd.DataFrame:
    """The pairs of each machine's and size's newest ``PeerMatrix`` sweep (the peer section's matrix)."""
    if peers.empty or "time" not in peers:  # pairs of one sweep each, as a caller made them
        return peers
    newest = peers.groupby(["machine", "nbytes"])["time"].transform("max")
    return peers[peers["time"] == newest].reset_index(drop=True)


def load_peers(folder: str | os.PathLike[str], problems: list[Problem] | None = None) -> pd.DataFrame:
    """Every pair of every ``PeerMatrix`` sweep (``.asv/peers``), by machine, size and sweep: each figure is judged
    with its own sweep's pairs (``health``), the section shows the newest (``newest_sweeps``).

    A line that is not a pair record is skipped; a folder with such lines is named in ``problems``.
    """

    def parse(rec: dict[str, Any]) -> dict[str, Any]:
        return {
            "machine": str(rec["machine"]), "time": float(rec["time"]), "nbytes": int(rec["nbytes"]),
            "src": int(rec["src"]), "dst": int(rec["dst"]), "gbps": float(rec["gbps"]),
            "path": str(rec.get("path") or ""), "src_id": rec.get("src_id"), "dst_id": rec.get("dst_id"),
            # the pair's NVML path (devbench.records.topology), where PeerMatrix could read it
            "nvlinks": rec.get("nvlinks"), "switched": rec.get("switched"), "pcie": rec.get("pcie"),
            "gpu_links": rec.get("gpu_links"),
        }  # fmt: skip

    out = _parsed_jsonl(folder, parse, "GPU-pair", PEER_COLUMNS, problems)
    if out.empty:
        return out
    return out.sort_values(["machine", "nbytes", "time", "src", "dst"]).reset_index(drop=True)
