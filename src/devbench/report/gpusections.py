"""The report's sections on the GPUs as machines: every device at once (the fleet run), the GPU pairs, each
figure against what its machine should do (health), and the GPU state while each figure was timed."""

from __future__ import annotations

import pandas as pd

from devbench.records.spec import size_label
from devbench.report import health as H
from devbench.report.derive import where_label
from devbench.report.parts import Section, sig


def _fleet(fleet: pd.DataFrame | None) -> Section | None:
    if fleet is None or fleet.empty:
        return None
    f = fleet.assign(cell=fleet["value"].map("{:.4g}".format) + " (" + (100 * fleet["deviation"]).map("{:+.1f}".format)
                     + "%)")  # fmt: skip
    table = f.pivot_table(index=["machine", "rank", "host", "device", "id"], columns="figure", values="cell",
                          aggfunc="first").reset_index()  # fmt: skip
    table.columns.name = None
    order = list(dict.fromkeys(f["figure"]))  # the order the fleet measured them in
    table = table[["machine", "rank", "host", "device", "id", *order]]
    slow = f.groupby(["machine", "rank"])["flagged"].any()
    flags = zip(table["machine"], table["rank"], strict=True)
    table["flag"] = [("SLOW" if slow.get((m, r), False) else None) for m, r in flags]
    table["id"] = table["id"].replace("", None)
    clocks = f.drop_duplicates(["machine", "rank"]).set_index(["machine", "rank"])[["sm_clock_mhz", "power_w"]]
    table = table.join(clocks, on=["machine", "rank"]).dropna(axis=1, how="all").rename(columns={"machine": "where"})
    n_slow = int(slow.sum())
    measured = ", ".join(sorted(set(f["measured"].astype(str))))
    units = ", ".join(f"{a} {b}" for a, b in f.drop_duplicates("figure")[["figure", "unit"]].itertuples(index=False))
    text = (
        f"`python -m devbench.worlds.fleet`: the same short, checked set on every rank at once ({measured}), "
        f"each figure "
        f"shown with its deviation from the median of all ranks; higher is better. {n_slow} rank(s) flagged SLOW "
        f"(more than the run's threshold below the median). Units: {units}. MHz and W: NVML during the sustained "
        "matmul (GPUs)."
    )
    return Section("Fleet: every device at once", text, table, plot="fleet")


def _peers(peers: pd.DataFrame | None) -> Section | None:
    if peers is None or peers.empty:
        return None
    links = peers["nvlinks"] if "nvlinks" in peers else pd.Series(None, index=peers.index)
    pcie = peers["pcie"] if "pcie" in peers else pd.Series(None, index=peers.index)

    def cell(g: float, path: str, n: object, p: object) -> str:
        nvml = (f"NVLink x{int(n)}" if pd.notna(n) and n else str(p) if isinstance(p, str) else "")
        said = ", ".join(x for x in (path, nvml) if x)
        return f"{g:.1f} ({said})" if said else f"{g:.1f}"

    cells = peers.assign(
        where=peers["machine"], size=[size_label(n) for n in peers["nbytes"]],
        cell=[cell(g, p, n, c) for g, p, n, c in zip(peers["gbps"], peers["path"], links, pcie, strict=True)],
    )  # fmt: skip
    table = cells.pivot_table(index=["where", "size", "src"], columns="dst", values="cell", aggfunc="first")
    table.columns = [f"to GPU {d}" for d in table.columns]
    table = table.fillna("-").reset_index().rename(columns={"src": "from GPU"})  # "-": a GPU to itself
    slowest = peers.loc[peers.groupby(["machine", "nbytes"])["gbps"].idxmin()]
    worst = "; ".join(f"{r.machine}: {r.src}->{r.dst} {r.gbps:.1f} GB/s" for r in slowest.itertuples(index=False))
    text = (
        "`PeerMatrix`: a copy from every GPU to every other, both directions, each checked byte for byte, "
        "GB/s copied (median block); in brackets the path the copies took (NVLink when the source GPU's NVLink "
        "counters sent at least half the bytes, PCIe P2P when they did not, through host without peer access; "
        "'(topology)' where NVML had no counters and only says what the link could do), then the pair's path "
        "as NVML's topology gives it (its active NVLinks, else its PCIe path), where it was read. "
        f"Slowest pair: {worst}."
    )
    return Section("GPU pairs: copy bandwidth (GB/s), every direction", text, table)


def _health(frame: pd.DataFrame, tp: pd.DataFrame, bw: pd.DataFrame, cb: pd.DataFrame,
            peers: pd.DataFrame | None) -> Section | None:  # fmt: skip
    table = H.health(frame, tp, bw, cb, peers)
    if table.empty:
        return None
    table = table.assign(share=[f"{100 * v:.0f}%" if pd.notna(v) else "n/a" for v in table["share"]])
    text = (
        "Each GPU figure against what a healthy machine of its kind reaches (devbench.records.expected, each expected "
        "figure with its source): pinned host<->device copies against a healthy host on the GPU's whole PCIe "
        "link (Gen5 x16: typical 52 GB/s, the fleet health checks' floor 48), else the link's rate after "
        "encoding, with the link the copy trained at under load named when it is low; pageable copies are "
        "`not judged` (the driver stages them through a pinned buffer: one host thread's memcpy bounds them, "
        "not the link); the device copy (bytes read plus written) against a public STREAM copy figure, else "
        "the datasheet; a copy from one GPU to another (each `PeerCopy`, the slowest and the median pair of "
        "the peer matrix, with the path it took) and each NCCL collective's busbw at its largest size against "
        "one direction of the GPU's NVLink (a pair joined directly by a few of its links: their share; a GPU "
        "short of links is low), or of its PCIe link at its maximum where the pair has no NVLink; the largest "
        "square product per dtype against mamf-finder's achievable figure where one is public, else the "
        "datasheet, at the clock it ran at where the board's power cap held it. `low`: below the public floor, "
        "else below 70% of expected, with the likely reason where one can be read; `unknown`: no expected "
        "figure, and why."
    )
    return Section("Health: each GPU figure against its machine", text, sig(table))


def _gpu_state(frame: pd.DataFrame) -> Section | None:
    if "gpu_throttled" not in frame.columns or frame["gpu_throttled"].isna().all():
        return None
    seen = frame[frame["gpu_throttled"].notna() & (frame["status"] == "ok")]
    bad = seen[seen["gpu_throttled"].astype(bool)]
    text = (
        f"{len(seen)} GPU figures of the latest results carry the GPU's NVML state (read after set-up and before "
        f"tear-down, with NVML's power and thermal violation counters); {len(bad)} were measured while the GPU "
        "was held back (an active throttle reason, or violation time that grew). nvbench discards such samples; "
        "devbench keeps them and lists them here."
    )
    if bad.empty:
        per = seen.groupby("machine", observed=True).agg(figures=("value", "size"), state=("gpu_state", "first"))
        return Section("GPU state", text, per.reset_index())
    table = bad.assign(where=where_label(bad))[["where", "benchmark", "params", "value", "unit", "gpu_state"]]
    return Section("GPU state: figures measured while throttled", text, table)
