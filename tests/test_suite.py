import os
import subprocess
import sys

import pytest
import torch

from devbench import runinfo, suite
from devbench.devices import num_gpus


def test_cuda_param_skips_with_reason_without_gpu():
    if num_gpus():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NotImplementedError, match="CUDA"):
        suite.require_device("cuda")


def test_unknown_device_param_is_an_error():
    with pytest.raises(ValueError, match="tpu"):
        suite.require_device("tpu")


def test_require_gpus_counts(monkeypatch):
    monkeypatch.setattr(suite, "no_cuda_reason", lambda: None)
    monkeypatch.setattr(suite, "num_gpus", lambda: 1)
    with pytest.raises(NotImplementedError, match="needs 2 GPUs, this machine has 1"):
        suite.require_gpus(2)


def test_pin_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert suite.pin_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv(suite.THREADS_ENV, "2")
        assert suite.pin_threads() == 2
        monkeypatch.setenv(suite.THREADS_ENV, "lots")
        with pytest.raises(ValueError, match="lots"):
            suite.pin_threads()
    finally:
        torch.set_num_threads(before)


def test_randn_is_seeded_and_not_zero():
    a = suite.randn((4, 4))
    b = suite.randn((4, 4))
    assert a.equal(b)
    assert (a != 0).all()
    assert not suite.randn(16, seed=1).equal(suite.randn(16, seed=2))
    assert suite.randn(8, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_time_block_counts_calls():
    calls = []
    timing = suite.time_block(lambda: calls.append(1), torch.device("cpu"), 7)
    assert len(calls) == 7 and timing.calls == 7 and timing.seconds > 0
    assert timing.per_call == timing.seconds / 7
    with pytest.raises(ValueError):
        suite.time_block(lambda: None, torch.device("cpu"), 0)


def test_runinfo_record_appends(tmp_path):
    p1 = runinfo.record(tmp_path)
    p2 = runinfo.record(tmp_path)
    assert p1 == p2
    recs = runinfo.load(tmp_path)
    assert len(recs) == 2
    assert recs[0]["torch"] == torch.__version__
    (tmp_path / "broken.jsonl").write_text('{"torch": \n')
    assert len(runinfo.load(tmp_path)) == 2


def test_existing_env_name_matches_asv():
    from asv.environment import get_env_name

    exe = "/opt/py/bin/python"
    assert runinfo.existing_env_name(exe) == get_env_name("existing", exe.replace(os.path.sep, "_"), {}, {})


def test_report_side_of_runinfo_does_not_import_torch():
    code = "import sys, devbench.runinfo; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_calls_for_fills_a_block_and_lets_a_long_call_stand_alone():
    import time

    from devbench.suite import calls_for

    cpu = torch.device("cpu")
    assert calls_for(lambda: time.sleep(0.06), cpu, target_s=0.05) == 1  # one call is already a block
    assert calls_for(lambda: time.sleep(0.06), cpu, target_s=0.05, min_calls=2) == 2
    assert calls_for(lambda: None, cpu, target_s=0.05, max_calls=3) == 3  # capped
    with pytest.raises(ValueError, match="min_calls"):
        calls_for(lambda: None, cpu, min_calls=0)
