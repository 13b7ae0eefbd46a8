import json

from devbench import cli


def test_machine_adds_gpu_fields(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["machine", "--machine", "testbox"]) == 0
    stored = json.loads((tmp_path / ".asv-machine.json").read_text())["testbox"]
    for key in ("os", "arch", "cpu", "num_cpu", "ram", "gpu", "gpu_count", "cuda", "driver"):
        assert key in stored, key
    assert stored["machine"] == "testbox"
    assert "testbox" in capsys.readouterr().out


def test_machine_reports_asv_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["machine", "--config", str(tmp_path / "missing.json")]) == 1
    assert "failed" in capsys.readouterr().err
