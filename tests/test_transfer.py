"""Transfer workloads: every copy is right, checks catch wrong copies, the timing helpers add up."""

import re
import sys
import time
from pathlib import Path

import pytest
import torch

from devbench.engine.devices import move
from devbench.engine.lanes import Lanes
from devbench.records.spec import gbps, size_label
from devbench.workloads import peers as PE
from devbench.workloads import smallcopies as S
from devbench.workloads import transfer as T

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def test_sizes_cover_the_issue_grid():
    assert T.SIZES[0] == 4 * T.KiB
    assert T.SIZES[-2:] == [256 * T.MiB, T.GiB]
    small = T.SIZES[:-2]
    assert small[-1] == 64 * T.MiB
    assert all(b == 4 * a for a, b in zip(small, small[1:], strict=False))


@pytest.mark.parametrize(
    "nbytes, label", [(4096, "4 KiB"), (64 * T.MiB, "64 MiB"), (T.GiB, "1 GiB"), (1000, "1000 B"), (1536, "1536 B")]
)
def test_size_label(nbytes, label):
    assert size_label(nbytes) == label


def test_gbps_is_decimal():
    assert gbps(2e9, 1.0) == pytest.approx(2.0)
    assert gbps(T.GiB, 1.0) == pytest.approx(1.073741824)


@pytest.mark.parametrize("nbytes", [1, 7, 8, 4096, 65536 + 13, 3 * T.MiB])
def test_pattern_is_seeded_nonzero_and_never_repeats_a_word(nbytes):
    a, b = T.pattern(nbytes, seed=1), T.pattern(nbytes, seed=1)
    assert a.dtype == torch.uint8 and a.numel() == nbytes
    assert torch.equal(a, b)
    assert not torch.equal(a, T.pattern(nbytes, seed=2))
    words = a[: nbytes // 8 * 8].view(torch.int64)
    assert torch.unique(words).numel() == words.numel()
    assert a.count_nonzero() > nbytes // 2


def test_pattern_rejects_empty():
    with pytest.raises(ValueError, match="nbytes"):
        T.pattern(0)


def test_pattern_written_in_place_is_the_same_pattern():
    buf = torch.zeros(T.MiB + 3, dtype=torch.uint8)
    assert T.pattern(buf.numel(), seed=5, out=buf) is buf and torch.equal(buf, T.pattern(buf.numel(), seed=5))
    with pytest.raises(ValueError, match="contiguous flat uint8 tensor of 16 bytes"):
        T.pattern(16, out=torch.zeros(8, dtype=torch.uint8))


@pytest.mark.parametrize("nbytes", [4 * T.KiB, T.MiB + 8])
def test_copy_on_the_cpu_is_exact_and_rotates(nbytes, small_cpu_cache):
    c = T.Copy(nbytes, CPU, CPU)
    assert c.sets == T.sets_for(nbytes, T.cache_bytes(CPU)) >= 2 and c.devices == [CPU] and c.timing_device == CPU
    c.check()
    first, second = c(), c()
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, c.srcs[0]) and torch.equal(second, c.srcs[1])
    assert not torch.equal(c.srcs[0], c.srcs[1])


def test_large_copies_use_one_set():
    assert T.sets_for(64 * T.MiB) == 2  # no cache known: two sets still alternate
    assert T.sets_for(256 * T.MiB) == 1
    l2 = 50 * T.MiB  # an H100's L2: 4 MiB copies rotate over 50 sets (200 MiB), never finding one in L2
    assert T.sets_for(4 * T.MiB, l2) == 50 and T.sets_for(16 * T.MiB, l2) == 13
    assert T.sets_for(64 * T.MiB, l2) == 4 and T.sets_for(256 * T.MiB, l2) == 1
    assert T.sets_for(4 * T.KiB, l2) == T.MAX_SETS  # capped: latency-bound sizes stay cheap


def test_copies_rotate_over_four_times_the_cache(monkeypatch):
    monkeypatch.setattr(T, "cache_bytes", lambda device: 8 * T.MiB)
    copy = T.Copy(T.MiB, CPU, CPU)
    assert copy.sets == 32 and len({d.data_ptr() for d in copy.dsts}) == 32
    copy.check()


def test_a_cpu_cache_set_for_a_quick_run_sizes_the_rotation_and_a_bad_one_is_named(monkeypatch):
    """``DEVBENCH_CPU_CACHE`` (make test's asv dry run) stands for the CPU's last-level cache; a GPU's L2 stays its
    own, and a value that is no size in bytes is named, not read as no setting."""
    monkeypatch.setenv(T.CPU_CACHE_ENV, str(8 * T.MiB))
    assert T.cache_bytes(CPU) == 8 * T.MiB and T.Copy(T.MiB, CPU, CPU).sets == 32
    for bad in ("8M", "0", "-1"):
        monkeypatch.setenv(T.CPU_CACHE_ENV, bad)
        with pytest.raises(ValueError, match=f"DEVBENCH_CPU_CACHE='{bad}'"):
            T.cache_bytes(CPU)


def test_the_cpus_last_level_cache_is_read_from_sysfs_for_every_die_it_may_run_on(tmp_path, monkeypatch):
    """Two CPUs on two dies of 32 MiB each (an EPYC's L3 per die): 64 MiB, each die's cache counted once; the
    same two CPUs sharing one 32 MiB cache: 32 MiB. Lower levels, and an index that cannot be read, count nothing."""
    monkeypatch.setattr(T.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)

    def node(root: Path, shared: dict[int, str]) -> Path:
        for cpu, l3 in shared.items():
            for index, level, size, who in (("index0", 1, "48K", str(cpu)), ("index2", 2, "2048K", str(cpu)),
                                            ("index3", 3, "32768K", l3), ("index9", 4, "junk", l3)):  # fmt: skip
                d = root / f"cpu{cpu}" / "cache" / index
                d.mkdir(parents=True)
                (d / "size").write_text(size + "\n")
                (d / "level").write_text(f"{level}\n")
                (d / "shared_cpu_list").write_text(who + "\n")
        return root

    assert T.cache_bytes(CPU, sysfs=node(tmp_path / "dies", {0: "0", 1: "1"})) == 64 * 2**20
    assert T.cache_bytes(CPU, sysfs=node(tmp_path / "one", {0: "0-1", 1: "0-1"})) == 32 * 2**20
    assert T.cache_bytes(CPU, sysfs=tmp_path / "absent") == 0  # no sysfs (another OS): unknown
    assert T.cache_bytes(torch.device("meta")) == 0
    monkeypatch.undo()
    if any(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size")):  # this machine reports its caches
        assert T.cache_bytes(CPU) >= 2**20


def test_copy_check_catches_a_wrong_copy(monkeypatch):
    c = T.Copy(4096, CPU, CPU)

    def shifted():
        i = c._next
        c._next = (i + 1) % c.sets
        c.dsts[i][1:].copy_(c.srcs[i][:-1])  # off by one byte

    monkeypatch.setattr(T.Copy, "__call__", lambda self: shifted())
    with pytest.raises(AssertionError, match="4 KiB cpu -> cpu.*differs"):
        c.check()


def test_a_check_compares_words_where_the_buffer_allows_and_bytes_elsewhere(monkeypatch):
    """``words``: a byte buffer whose length and start are whole words is compared a word at a time, the same bytes;
    one that is not stays bytes. Either way one byte off anywhere fails the check, and a lone nonzero byte is a
    pattern, not zeros."""
    buf = torch.arange(24, dtype=torch.uint8)
    assert T.words(buf).dtype == torch.int64 and T.words(buf).numel() == 3
    assert T.words(buf[:23]).dtype == torch.uint8 and T.words(buf[1:17]).dtype == torch.uint8  # length, start
    whole, shifted = buf[8:24].clone(), (buf + 7)[1:17]  # the same 16 bytes: one whole words, one starting off
    assert T.words(whole).dtype == torch.int64 and T.words(shifted).dtype == torch.uint8
    assert T.same_bytes(whole, shifted) and T.same_bytes(whole, whole.clone())  # compared either way
    assert not T.same_bytes(whole, (buf + 6)[1:17]) and not T.same_bytes(whole, whole + 1)
    lone = torch.zeros(4096, dtype=torch.uint8)
    lone[4095] = 1
    assert bool(T.words(lone).any())
    for nbytes in (4096, 4097):
        c = T.Copy(nbytes, CPU, CPU, sets=2)
        c.check()

        def last_byte_off(self=c):
            i = self._next
            self._next = (i + 1) % self.sets
            self.dsts[i].copy_(self.srcs[i])
            self.dsts[i][-1] ^= 1

        with monkeypatch.context() as m:
            m.setattr(T.Copy, "__call__", lambda self: last_byte_off())
            with pytest.raises(AssertionError, match="set 0: destination differs from source"):
                c.check()


def test_a_copy_compared_where_it_landed_with_its_pattern_made_there_is_checked_as_its_source(monkeypatch):
    """An h2d copy's check on the CPU (``Copy._made_again`` taken as true for a host copy): a set that landed right
    passes on its pattern made again, with nothing brought back; one whose pattern there differs, or whose source is
    not the pattern, is brought back and compared with its source; one byte off fails either way."""
    monkeypatch.setattr(T.Copy, "_made_again", staticmethod(lambda src, dst: True))
    backs, made = [], []
    real_back, real_pattern = T._back_buffer, T.pattern
    monkeypatch.setattr(T, "_back_buffer", lambda like, sets: backs.append(real_back(like, sets)) or backs[-1])
    monkeypatch.setattr(T, "pattern", lambda nbytes, seed=T.SEED, out=None: made.append(seed) or
                        real_pattern(nbytes, seed, out))  # fmt: skip
    c = T.Copy(4096 + 8, CPU, CPU, sets=3, seed=40)
    made.clear()
    c.check()
    assert made == [40, 41, 42] and backs == []  # each set against its own seed's pattern, none brought back
    c.srcs[1].copy_(real_pattern(c.nbytes, seed=99))  # a source that is not its pattern: still its source's copy
    c.check()
    assert len(backs) == 1
    monkeypatch.setattr(T, "pattern", lambda nbytes, seed=T.SEED, out=None: real_pattern(nbytes, seed + 1, out))
    c.check()  # every pattern made wrong: every set compared with its source instead
    real_call = T.Copy.__call__

    def last_byte_off(self):
        got = real_call(self)
        got[-1] ^= 1
        return got

    monkeypatch.setattr(T.Copy, "__call__", last_byte_off)
    with pytest.raises(AssertionError, match="set 0: destination differs from source"):
        c.check()
    monkeypatch.setattr(T, "pattern", real_pattern)  # the pattern made right: one byte off still fails
    with pytest.raises(AssertionError, match="set 0: destination differs from source"):
        c.check()


def test_a_copy_turned_over_buffers_a_failed_check_cleared_is_not_checked_zeros_against_zeros(monkeypatch):
    """A check clears its destinations first; where they are another copy's sources (the turned copies of one memory
    and size share their buffers) and its copy moved nothing, they stay cleared: the next copy turned over them must
    fail for want of its pattern, not compare zeros with zeros and pass."""
    base = T.Copy(4096, CPU, CPU, sets=2)
    base.check()
    back = base.turned(reverse=True, non_blocking=False)
    with monkeypatch.context() as m:
        m.setattr(T.Copy, "__call__", lambda self: None)  # a copy that moves nothing
        with pytest.raises(AssertionError, match="differs"):
            back.check()  # its destinations, the base's sources, are left cleared
    again = base.turned(reverse=False, non_blocking=False)
    with pytest.raises(AssertionError, match="set 0: its source holds only zeros"):
        again.check()


def test_copy_rejects_bad_input():
    with pytest.raises(ValueError, match="nbytes"):
        T.Copy(0, CPU, CPU)
    with pytest.raises(ValueError, match="'swap'"):
        T.Copy(8, CPU, CPU, memory="swap")
    with pytest.raises(ValueError, match="'sideways'"):
        T.host_device_copy("sideways", 8, CPU)


def test_host_device_copy_directions():
    meta = torch.device("meta")
    h2d = T.host_device_copy("h2d", 4096, meta)
    d2h = T.host_device_copy("d2h", 4096, meta)
    assert (h2d.src_device, h2d.dst_device) == (CPU, meta)
    assert (d2h.src_device, d2h.dst_device) == (meta, CPU)
    assert h2d.timing_device == meta and d2h.timing_device == meta
    assert h2d.devices == [CPU, meta]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA answer")
def test_pinned_memory_says_why_without_cuda():
    assert "CUDA" in T.pinned_reason()
    with pytest.raises(RuntimeError, match="pinned host memory needs CUDA"):
        T.host_buffer(16, "pinned")
    with pytest.raises(ValueError, match="'shared'"):
        T.host_buffer(16, "shared")


def test_fit_reason_names_the_device_and_sizes():
    assert T.fit_reason({CPU: 1}) is None
    reason = T.fit_reason({CPU: 1 << 50})
    assert "host memory" in reason and "GiB free" in reason
    assert T.host_available() > 0


def test_bidirectional_copies_both_ways_and_counts_both(small_cpu_cache):
    h2d, d2h = T.Copy(T.MiB, CPU, CPU), T.Copy(T.MiB, CPU, CPU, seed=7)
    r = T.bidirectional(Lanes([CPU, CPU]), h2d, d2h, calls=4)
    assert r.total > 0 and r.h2d > 0 and r.d2h > 0
    assert torch.equal(h2d.dsts[1], h2d.srcs[1]) and torch.equal(d2h.dsts[1], d2h.srcs[1])


def test_bidirectional_rejects_two_devices():
    with pytest.raises(ValueError, match="h2d goes to"):
        T.bidirectional(Lanes([CPU, CPU]), T.host_device_copy("h2d", 8, torch.device("meta")), T.Copy(8, CPU, CPU), 1)
    with pytest.raises(ValueError, match="2 lanes"):
        T.bidirectional(Lanes([CPU]), T.Copy(8, CPU, CPU), T.Copy(8, CPU, CPU), 1)


def test_overlap_runs_both_tasks_in_every_arrangement():
    copy = T.Copy(4 * T.MiB, CPU, CPU, sets=2)
    products = []
    work = T.RepeatedWork(lambda: products.append(torch.ones(64, 64) @ torch.ones(64, 64)), reps=3)
    for d in copy.dsts:
        d.zero_()
    o = T.overlap(Lanes([CPU, CPU]), copy, work, calls=2)
    assert o.copy > 0 and o.compute > 0 and o.serial > 0 and o.concurrent > 0
    # alone, serial and concurrent: 3 arrangements x 2 calls x 3 reps of the compute
    assert len(products) == 18 and all(torch.equal(p, torch.full((64, 64), 64.0)) for p in products)
    assert all(torch.equal(d, s) for d, s in zip(copy.dsts, copy.srcs, strict=True))


def test_overlap_ratio_definition():
    perfect = T.Overlap(copy=1.0, compute=1.0, serial=2.0, concurrent=1.0)
    none = T.Overlap(copy=1.0, compute=1.0, serial=2.0, concurrent=2.0)
    assert (perfect.ratio, perfect.hidden) == (2.0, 1.0)
    assert (none.ratio, none.hidden) == (1.0, 0.0)


def test_repeated_work_calls_reps_times():
    calls = []
    T.RepeatedWork(lambda: calls.append(1), reps=4)()
    assert len(calls) == 4
    with pytest.raises(ValueError, match="reps"):
        T.RepeatedWork(lambda: None, reps=0)


@pytest.mark.parametrize("kind", list(S.SMALL_KINDS))
def test_many_small_moves_every_byte(kind):
    batch = S.ManySmall(kind, CPU)
    batch.check()
    if kind == "1024x4KiB":
        assert len(batch.pairs) == 1024 and batch.pairs[0][0].numel() == 4096
    elif kind == "1x4MiB":
        assert len(batch.pairs) == 1 and batch.nbytes == 4 * T.MiB
    else:
        assert len(batch.tensors) == 256
        assert max(t.numel() for t in batch.tensors) <= 64 * 64
        assert len({t.shape for t in batch.tensors}) > 100
        assert [o.shape for o in batch.out] == [t.shape for t in batch.tensors]


@pytest.mark.parametrize("kind", ["tensors_one_by_one", "tensors_packed"])
def test_many_small_tensors_are_really_copied_in_order(kind):
    batch = S.ManySmall(kind, CPU)
    out = batch()
    for o, t in zip(out, batch.tensors, strict=True):
        assert torch.equal(o, t)
        assert o.data_ptr() != t.data_ptr()  # a same-device .to() would hand back t itself


def test_many_small_check_catches_a_copy_that_did_not_happen(monkeypatch):
    batch = S.ManySmall("tensors_one_by_one", CPU)

    def no_copy(self):
        self.out = list(self.tensors)
        return self.out

    monkeypatch.setattr(S.ManySmall, "__call__", no_copy)
    with pytest.raises(AssertionError, match="differs from source"):
        batch.check()


def test_many_small_check_catches_a_lost_tensor(monkeypatch):
    batch = S.ManySmall("tensors_one_by_one", CPU)
    real = batch.__class__.__call__

    def drop_last(self):
        real(self)
        self.out = self.out[:-1]

    monkeypatch.setattr(S.ManySmall, "__call__", drop_last)
    with pytest.raises(AssertionError, match="one by one|one .to\\(\\)"):
        batch.check()
    with pytest.raises(ValueError, match="'2x2MiB'"):
        S.ManySmall("2x2MiB", CPU)


@pytest.mark.parametrize("kind", list(S.HIDDEN))
def test_hidden_copies_read_the_values(kind):
    x = torch.randn(1000)
    S.check_hidden_copy(kind, x)
    got = S.hidden_copy(kind, x)()
    if kind == "print":
        assert got.startswith("tensor([") and got.endswith("\n")


def test_hidden_copy_rejects_unknown_reads():
    with pytest.raises(ValueError, match="'repr'"):
        S.hidden_copy("repr", torch.randn(3))


@pytest.mark.parametrize("kind", list(S.HIDDEN))
def test_hidden_copy_check_catches_wrong_values(monkeypatch, kind):
    x = torch.randn(10)
    wrong = {"item": 0.0, "tolist": [0.0] * 10, "numpy": torch.zeros(10).numpy(), "print": "tensor([0.])\n"}
    monkeypatch.setattr(S, "hidden_copy", lambda k, t: lambda: wrong[k])
    with pytest.raises(AssertionError, match=re.escape(S.HIDDEN[kind])):
        S.check_hidden_copy(kind, x)


def test_same_device_move_is_the_same_object():
    x = torch.randn(3)
    assert move(x, CPU) is x
    assert x.to(CPU) is x
    assert x.cpu() is x


# --- The benchmark classes themselves, set up on the CPU ---------------------------------------------


def test_device_copy_benchmark_measures_the_host_line(monkeypatch, small_cpu_cache):
    import benchmarks.bench_transfer as bt

    from devbench.engine.measure import BLOCKS_ENV, Measurement
    from devbench.engine.precision import MIN_SAMPLES

    monkeypatch.setenv(BLOCKS_ENV, str(MIN_SAMPLES))  # the fewest blocks asv takes an interval from, not a cap

    b = bt.DeviceCopy()
    b.setup("cpu", 256 * T.KiB)
    waited = b.track_time("cpu", 256 * T.KiB)
    assert len(waited["samples"]) >= MIN_SAMPLES and min(waited["samples"]) > 0
    figure = b.track_gbps_copied("cpu", 256 * T.KiB)
    assert len(figure["samples"]) >= MIN_SAMPLES and min(figure["samples"]) > 0 and figure["number"] >= 1
    # the two conventions: bytes copied, and bytes read plus bytes written (twice as many)
    blocks = Measurement((1e-3, 2e-3, 4e-3), 5)
    from devbench.engine import copyblocks

    monkeypatch.setattr(copyblocks, "measure", lambda *a, **k: blocks)
    copied = b.track_gbps_copied("cpu", 256 * T.KiB)["samples"]  # measured again: the same figure asked again
    assert copied == pytest.approx([0.262144, 0.131072, 0.065536])
    # the other figure counts the very blocks the first measured, once; asked again, it measures
    assert b.track_gbps_read_write("cpu", 256 * T.KiB)["samples"] == pytest.approx([2 * g for g in copied])
    monkeypatch.setattr(copyblocks, "measure", lambda *a, **k: Measurement((1e-3,), 5))
    assert b.track_gbps_read_write("cpu", 256 * T.KiB)["samples"] == pytest.approx([2 * 0.262144])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA skips")
@pytest.mark.parametrize(
    "cls_name, args, reason",
    [
        ("HostDevice", ("h2d", "pinned", "non_blocking", 4096), "no CUDA"),
        ("HostDeviceBidirectional", (4 * T.MiB,), "no CUDA"),
        ("DeviceCopy", ("cuda", 4096), "no CUDA"),
        ("PeerCopy", ("0->1", 4096), "no CUDA"),
        ("ManySmallCopies", ("cuda", "1x4MiB"), "no CUDA"),
        ("SameDeviceMove", ("cuda", "to"), "no CUDA"),
        ("CopyComputeOverlap", ("cpu",), "no copy engine"),
        ("HiddenCopy", ("cuda", "item"), "no CUDA"),
    ],
)
def test_cuda_combinations_skip_with_a_reason(cls_name, args, reason):
    import benchmarks.bench_transfer as bt

    with pytest.raises(NotImplementedError, match=reason):
        getattr(bt, cls_name)().setup(*args)


@pytest.mark.parametrize(
    "cls_name, args",
    [
        ("ManySmallCopies", ("cpu", "1024x4KiB")),
        ("SameDeviceMove", ("cpu", "to")),
        ("SameDeviceMove", ("cpu", "shorthand")),
        ("HiddenCopy", ("cpu", "print")),
    ],
)
def test_cpu_benchmarks_set_up_and_time(cls_name, args, monkeypatch):
    import benchmarks.bench_transfer as bt

    monkeypatch.setenv("DEVBENCH_BLOCKS", "2")
    b = getattr(bt, cls_name)()
    b.setup(*args)
    figure = b.track_time(*args)
    assert len(figure["samples"]) == 2 and min(figure["samples"]) > 0 and figure["number"] >= 1


# --- On a GPU --------------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("memory", T.MEMORY)
@pytest.mark.parametrize("non_blocking", [False, True])
def test_host_device_copies_on_a_gpu(direction, memory, non_blocking):
    c = T.host_device_copy(direction, T.MiB, CUDA, memory, non_blocking)
    c.check()
    assert c.timing_device == CUDA
    if memory == "pinned":
        host = c.srcs[0] if direction == "h2d" else c.dsts[0]
        assert host.is_pinned()


@pytest.mark.cuda
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_a_copys_check_brings_every_set_back_through_one_buffer_and_catches_a_set_not_copied(direction, monkeypatch):
    """A d2h copy's destinations come back to the GPU through one buffer (the opposite path to the one checked); an
    h2d copy's are compared on the GPU with their pattern made there, and come back to the host through one pinned
    buffer only where that differs; a set the copy left alone is named either way."""
    c = T.host_device_copy(direction, T.MiB, CUDA, "pinned")
    assert c.sets > 1
    made = []
    real_back = T._back_buffer
    monkeypatch.setattr(T, "_back_buffer", lambda like, sets: made.append(real_back(like, sets)) or made[-1])
    c.check()
    assert len(made) == (direction == "d2h")
    if direction == "d2h":
        assert made[0].device == c.src_device and not made[0].is_pinned()
    made.clear()
    real_pattern = T.pattern
    monkeypatch.setattr(T, "pattern", lambda nbytes, seed=T.SEED, out=None: real_pattern(nbytes, seed + 1, out))
    c.check()  # a pattern made wrong on the GPU: each set is brought back and compared with its source instead
    assert len(made) == 1 and made[0].device == c.src_device
    assert made[0].is_pinned() is (direction == "h2d")
    monkeypatch.setattr(T, "pattern", real_pattern)
    assert not real_back(torch.zeros(8, dtype=torch.uint8), sets=1).is_pinned()  # one set: as .to() gave it
    real_call, skipped = T.Copy.__call__, []

    def leaves_set_1(self):
        if self._next == 1 and not skipped:
            skipped.append(1)
            self._next = 2 % self.sets
            return self.dsts[1]
        return real_call(self)

    monkeypatch.setattr(T.Copy, "__call__", leaves_set_1)
    with pytest.raises(AssertionError, match="set 1: destination differs from source"):
        c.check()


def test_a_copys_check_buffer_is_like_its_source_and_pageable_without_cuda(monkeypatch):
    like = torch.zeros(64, dtype=torch.uint8)
    monkeypatch.setattr(T, "pinned_reason", lambda: "no CUDA here")  # as on a CPU-only build
    back = T._back_buffer(like, sets=4)
    assert back.shape == like.shape and back.dtype == like.dtype and back.device == like.device
    assert not back.is_pinned()


@pytest.mark.cuda
@pytest.mark.parametrize("nbytes", [8, 4 * T.KiB, T.MiB + 3, 65 * T.KiB * 8 + 5])
def test_a_pattern_made_on_a_gpu_is_the_hosts_byte_for_byte(nbytes):
    """What an h2d copy's check rests on: its source's pattern made again on the GPU, words and tail bytes, is the
    host's, so a copy that landed right passes where it landed."""
    on_gpu = T.pattern(nbytes, seed=11, out=torch.empty(nbytes, dtype=torch.uint8, device=CUDA))
    assert on_gpu.device == CUDA and torch.equal(on_gpu.cpu(), T.pattern(nbytes, seed=11))


@pytest.mark.cuda
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("memory", T.MEMORY)
def test_a_blocking_copy_returns_with_its_copy_done_on_a_gpu(direction, memory):
    """What HostDevice's one set of blocks on two clocks rests on (``Copy.returns_done``): a blocking copy has
    left nothing queued when its call returns, so the host's clock over calls back to back is a waited time."""
    for nbytes in (4 * T.KiB, 64 * T.MiB):
        c = T.host_device_copy(direction, nbytes, CUDA, memory, non_blocking=False)
        assert c.returns_done
        for _ in range(3):
            torch.cuda._sleep(1_000_000)  # the stream busy before the copy: a copy that did not wait would leave
            c()  # the stream still working when it returns
            assert torch.cuda.current_stream().query(), (direction, memory, nbytes)


@pytest.mark.cuda
def test_streams_bidirectional_and_overlap_on_a_gpu():
    h2d = T.host_device_copy("h2d", 4 * T.MiB, CUDA, "pinned", True)
    d2h = T.host_device_copy("d2h", 4 * T.MiB, CUDA, "pinned", True)
    r = T.bidirectional(Lanes([CUDA, CUDA]), h2d, d2h, calls=8)
    assert r.total > 0 and r.h2d > 0 and r.d2h > 0
    h2d.check()
    d2h.check()
    from devbench.workloads.matmul import Matmul

    mm = Matmul(1024, "float32", CUDA)
    o = T.overlap(Lanes([CUDA, CUDA]), h2d, mm, calls=4)
    assert min(o.copy, o.compute, o.serial, o.concurrent) > 0
    h2d.check()
    mm.check()  # the product made on a side stream is still right


@pytest.mark.cuda
@pytest.mark.parametrize("kind", list(S.SMALL_KINDS))
def test_many_small_on_a_gpu(kind):
    S.ManySmall(kind, CUDA, "pinned").check()


@pytest.mark.cuda
@pytest.mark.parametrize("kind", list(S.HIDDEN))
def test_hidden_copies_on_a_gpu(kind):
    S.check_hidden_copy(kind, torch.randn(1000, device=CUDA))


@pytest.mark.cuda
def test_same_device_moves_on_a_gpu():
    x = torch.randn(3, device=CUDA)
    assert move(x, CUDA) is x and x.cuda(0) is x and x.to("cuda:0") is x


def test_host_waits_names_the_copies_a_held_stream_cannot_queue():
    """Pageable or blocking host<->device copies make the host wait; device-side copies do not."""
    cpu = torch.device("cpu")
    meta = torch.device("meta")
    assert T.Copy(64, cpu, cpu).host_waits
    assert not T.Copy(64, meta, meta).host_waits
    for memory, non_blocking, waits in (("pageable", True, True), ("pageable", False, True)):
        assert T.Copy(64, cpu, meta, memory, non_blocking).host_waits is waits


def test_returns_done_names_the_copies_whose_call_waits_for_them():
    """A blocking host<->device copy returns with its copy done (``copy_`` synchronizes the stream inside it), and
    so does one on the CPU; a non-blocking one, or one between devices, does not."""
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert T.Copy(64, cpu, cpu).returns_done and T.Copy(64, cpu, cpu, non_blocking=True).returns_done
    assert not T.Copy(64, meta, meta).returns_done
    for src, dst in ((cpu, meta), (meta, cpu)):
        assert T.Copy(64, src, dst).returns_done and not T.Copy(64, src, dst, non_blocking=True).returns_done


def test_the_plan_prices_one_set_of_blocks_exactly_where_hostdevices_call_returns_done():
    """spec.SAME_BLOCKS names HostDevice's time as counted from its GB/s blocks at the points whose copy returns
    done, and nowhere else: the plan's pricing and the bench's branch read the same points."""
    import itertools
    from types import SimpleNamespace

    import benchmarks.bench_transfer as bt

    from devbench.records import spec

    partner, where = spec.SAME_BLOCKS["bench_transfer.HostDevice.track_time"]
    assert partner == "bench_transfer.HostDevice.track_gbps" and set(where) <= set(bt.HostDevice.param_names)
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    for direction, memory, mode in itertools.product(("h2d", "d2h"), T.MEMORY, ("blocking", "non_blocking")):
        ends = (cpu, gpu) if direction == "h2d" else (gpu, cpu)
        copy = SimpleNamespace(src_device=ends[0], dst_device=ends[1], memory=memory, non_blocking=mode != "blocking")
        values = {"direction": direction, "memory": memory, "mode": mode}
        named = all(values[k] in wanted for k, wanted in where.items())
        assert T.Copy.returns_done.fget(copy) is named, values


def test_a_copy_that_returns_done_gives_its_time_and_its_gbps_from_one_set_of_blocks(monkeypatch):
    """HostDevice's blocking copies: the time and the GB/s read one set of blocks, each on its own clock; the
    second figure asked measures nothing (``suite.shared``), and asked again (asv's next round) measures anew."""
    from types import SimpleNamespace

    import benchmarks.bench_transfer as bt

    from devbench.engine import measure as M

    monkeypatch.setenv(M.BLOCKS_ENV, "3")
    cpu = torch.device("cpu")
    bench = SimpleNamespace(copy=T.Copy(4096, cpu, cpu, sets=2))
    calls = []
    real = T.Copy.__call__
    monkeypatch.setattr(T.Copy, "__call__", lambda self: (calls.append(1), real(self))[1])
    time_figure = bt._clocked(bench, "time")
    taken = len(calls)
    rates = bt._clocked(bench, "gbps")
    assert len(calls) == taken  # the GB/s read the time's blocks
    per_block = time_figure["number"]
    assert rates["number"] == per_block and taken > 3 * per_block  # the sizing's calls, then three blocks
    seconds = time_figure["samples"]
    assert len(seconds) == len(rates["samples"]) == 3
    # the device's reading lies inside the host's: never slower than the host's clock says
    assert all(r >= gbps(4096, s) for r, s in zip(rates["samples"], seconds, strict=True))
    bt._clocked(bench, "time")
    assert len(calls) > taken


# --- GPU pairs: every direction of every pair, and the path each copy took


def test_every_pair_in_both_directions():
    assert PE.peer_pairs(1) == []
    assert PE.peer_pairs(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert len(PE.peer_pairs(8)) == 56


def test_the_path_label_says_what_the_copies_used_before_what_they_could():
    assert PE.PeerPath(False, True, 0.9).label == "through host"
    assert PE.PeerPath(True, True, 1.0).label == "NVLink"
    assert PE.PeerPath(True, True, 0.01).label == "PCIe P2P"  # NVLink there, but the bytes did not use it
    assert PE.PeerPath(True, True, None).label == "NVLink (topology)"
    assert PE.PeerPath(True, False, None).label == "PCIe P2P (topology)"
    assert PE.PeerPath(True, None, None).label == "P2P"


class _CountedCopy:
    """What ``trace_path`` uses of a copy: its size, a call that copies, and a sync; here it counts its calls."""

    def __init__(self, nbytes: int, takes_s: float = 0.0) -> None:
        self.nbytes, self.calls, self.takes_s = nbytes, 0, takes_s

    def __call__(self) -> None:
        self.calls += 1
        if self.takes_s:
            time.sleep(self.takes_s)

    def sync(self) -> None:
        pass


def test_the_traced_share_is_the_counted_bytes_over_the_bytes_copied(monkeypatch):
    monkeypatch.setattr(PE, "TRACE_MIN_S", 0.0)
    monkeypatch.setattr(PE, "TRACE_POLL_S", 0.001)
    copy = _CountedCopy(T.MiB)
    assert PE.trace_path(copy, True, True, lambda: 10_000 + copy.calls * T.MiB).nvlink_share == pytest.approx(1.0)
    assert copy.calls == PE.TRACE_BYTES // T.MiB  # the bytes asked for, no more when the clock asks for none
    copy = _CountedCopy(T.MiB)  # 1% of them: another process's traffic, not the copy
    assert PE.trace_path(copy, True, True, lambda: 5 + copy.calls * T.MiB // 100).label == "PCIe P2P"
    assert PE.trace_path(copy, False, None, lambda: None) == PE.PeerPath(False, None, None)
    small = _CountedCopy(4 * T.KiB)
    reads = []
    PE.trace_path(small, True, None, lambda: reads.append(small.calls) or 0)
    assert len(reads) == 3 and small.calls == PE.TRACE_MAX_CALLS  # before, then after until two reads agree


def test_the_trace_lasts_long_enough_and_waits_for_counters_that_lag(monkeypatch):
    monkeypatch.setattr(PE, "TRACE_POLL_S", 0.001)
    copy = _CountedCopy(256 * T.MiB, takes_s=0.001)  # one copy is enough bytes; the clock keeps it going
    reads = []

    def sent():  # NVML's counters lag: the first two reads after the copies still say 0
        reads.append(copy.calls)
        return 0 if len(reads) <= 2 else copy.calls * copy.nbytes

    start = time.monotonic()
    path = PE.trace_path(copy, True, True, sent)
    assert time.monotonic() - start >= PE.TRACE_MIN_S
    assert path.nvlink_share == pytest.approx(1.0) and path.label == "NVLink"


def test_the_matrix_checks_times_and_traces_every_direction(capsys, small_cpu_cache):
    cpu = torch.device("cpu")
    timed, traced, lines = [], [], []

    def time_copy(copy):
        assert all(torch.equal(s, d) for s, d in zip(copy.srcs, copy.dsts, strict=True))  # checked first
        timed.append(copy.nbytes)
        return [3.0, 1.0, 2.0]

    def path_of(copy):
        traced.append(copy)
        return PE.PeerPath(True, True, 1.0)

    # 4 MiB: a few sets of buffers each (the rotation is not what this checks)
    rows = PE.peer_matrix([cpu, cpu, cpu], 4 * T.MiB, time_copy, path_of, progress=lines.append)
    assert [(r["src"], r["dst"]) for r in rows] == PE.peer_pairs(3)
    assert {r["gbps"] for r in rows} == {2.0} and {r["path"] for r in rows} == {"NVLink"}
    assert timed == [4 * T.MiB] * 6 and len(traced) == 6 and lines[0] == "4 MiB 0->1: 2.0 GB/s (NVLink)"


def test_matrix_records_go_to_one_file_per_machine(tmp_path):
    rows = [{"src": 0, "dst": 1, "nbytes": 4096, "gbps": 2.0, "blocks": [1.0, 2.0, 3.0], "peer_access": True,
             "nvlink": None, "nvlink_share": None, "path": "P2P"}]  # fmt: skip
    path = PE.write_peer_records(rows, tmp_path, machine="box")
    import json

    (rec,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.name == "box.jsonl" and rec["machine"] == "box" and rec["blocks"] == 3 and rec["path"] == "P2P"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA skip")
def test_the_matrix_benchmark_skips_below_two_gpus():
    import benchmarks.bench_transfer as bt

    m = bt.PeerMatrix()
    cache = m.setup_cache()
    with pytest.raises(NotImplementedError, match="no CUDA"):
        m.setup(cache, bt.MATRIX_SIZES[0])


def test_the_report_shows_the_newest_matrix_and_names_the_slowest_pair(tmp_path, capsys):
    import json
    import shutil

    from devbench.report.cli import main as report_main

    results = tmp_path / "asv" / "results"
    shutil.copytree(Path(__file__).resolve().parents[1] / "reports" / "asv-results", results)
    peers = tmp_path / "asv" / "peers"
    old = [{"src": 0, "dst": 1, "nbytes": 256 * T.MiB, "gbps": 1.0, "blocks": [1.0], "peer_access": False,
            "nvlink": None, "nvlink_share": None, "path": "through host"}]  # fmt: skip
    PE.write_peer_records(old, peers, machine="box")
    speeds = [370.0, 371.0, 369.5, 12.5, 370.2, 368.9]
    paths = ["NVLink"] * 3 + ["PCIe P2P"] + ["NVLink"] * 2
    new = [{**old[0], "gbps": g, "src": s, "dst": d, "path": p}
           for (s, d), g, p in zip(PE.peer_pairs(3), speeds, paths, strict=True)]  # fmt: skip
    PE.write_peer_records(new, peers, machine="box")
    with open(peers / "box.jsonl", "a") as f:
        f.write(json.dumps({"machine": "box", "time": 1.0}) + "\n")
    out = tmp_path / "out"
    assert report_main(["--results", str(results), "--out", str(out), "--format", "md", "--quiet"]) == 0
    md = (out / "report.md").read_text()
    section = md.split("## GPU pairs: copy bandwidth (GB/s), every direction", 1)[1].split("\n## ", 1)[0]
    assert "Slowest pair: box: 1->2 12.5 GB/s" in section
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines() if ln.startswith("| 256")]
    assert [r[1] for r in rows] == ["0", "1", "2"]  # one row per source GPU of the newest run, not the old one
    assert rows[1][2:] == ["369.5 (NVLink)", "-", "12.5 (PCIe P2P)"]
    assert "1 record(s) skipped: not a GPU-pair record" in md


def test_a_peer_copy_is_built_and_checked_once_per_process_and_traced_only_by_its_path_figures(monkeypatch):
    """asv runs set-up before every sample: PeerCopy built and checked its copy (up to 1 GiB) each time, and
    traced NVLink for a second in each of its four methods' processes. Stand-in GPUs: two CPU devices."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import bench_transfer as B

    from devbench.engine import prepare

    built, checked, traced = [], [], []

    class Counted(T.Copy):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            built.append(1)

        def check(self):
            checked.append(1)
            super().check()

    monkeypatch.setattr(prepare, "_BUILT", {})
    monkeypatch.setattr(B, "require_gpus", lambda n: [CPU, CPU])
    monkeypatch.setattr(B, "Copy", Counted)
    monkeypatch.setattr(B, "peer_path", lambda copy: traced.append(1) or PE.PeerPath(True, None, None))
    monkeypatch.setenv("DEVBENCH_BLOCKS", "1")
    bench = B.PeerCopy()
    for _ in range(5):  # five set-ups in one process, as a measuring process's or a compare's
        bench.setup("0->1", 4096)
        bench.track_time("0->1", 4096)
        bench.teardown("0->1", 4096)
    assert (len(built), len(checked), len(traced)) == (1, 1, 0)
    import math

    assert bench.track_peer_access("0->1", 4096) == 1.0 and math.isnan(bench.track_nvlink_share("0->1", 4096))
    assert len(traced) == 1  # the path figures trace it, once


def test_a_turned_copy_shares_the_buffers_and_copies_the_pattern_back():
    """HostDevice's directions and modes of one memory and size share one build (``Copy.turned``): the reverse
    copy's sources are the first one's destinations, filled with its sources' pattern before any check."""
    cpu = torch.device("cpu")
    base = T.Copy(4096, cpu, cpu, "pageable", sets=3)  # unchecked: its destinations hold no pattern yet
    back = base.turned(True, non_blocking=True)
    assert back.srcs is base.dsts and back.dsts is base.srcs and back.non_blocking and not base.non_blocking
    assert all(torch.equal(s, T.pattern(4096, T.SEED + i)) for i, s in enumerate(back.srcs))
    back.check()
    assert all(torch.equal(d, T.pattern(4096, T.SEED + i)) for i, d in enumerate(base.srcs))  # the pattern, back again
    same = base.turned(False, non_blocking=False)
    assert same.srcs is base.srcs and same.dsts is base.dsts
    same.check()


def test_a_copy_between_two_devices_asks_room_for_the_buffer_its_check_brings_data_back_into(monkeypatch):
    """A 256 MiB copy rotates over one set: its check's buffer doubles what the source's side holds, and a GPU
    without room for it must skip the point, not fail it (and end the measuring process) out of memory."""
    import benchmarks.bench_transfer as bt

    asked = []
    monkeypatch.setattr(bt, "copies_fit_reason", lambda sets, nbytes, *devices: asked.append(sets) or None)
    bt._require_fit(1, 256 * 2**20, CPU, torch.device("cuda", 0))
    bt._require_fit(2, 256 * 2**20, torch.device("cuda", 0))  # one device: the check compares in place
    assert asked == [2, 2]
