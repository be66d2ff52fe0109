"""The node supervisor without a broker: its plan (`--dry-run`), refusals, and the
restart policy on real processes."""

import json
import sys

import pytest
from click.testing import CliRunner

from dinfer_batch.cli import main
from dinfer_workers import supervisor
from dinfer_workers.supervisor import Replica, Supervisor, parse_gpus
from tests.tensor_parallel_models import write_family


@pytest.fixture(scope="module")
def splittable(tmp_path_factory):
    """A tiny checkpoint whose dimensions divide by 2 ranks (tiny_checkpoint's vocabulary
    of 45 does not)."""
    return write_family(tmp_path_factory.mktemp("tp") / "tiny", "llada")


def test_dry_run_plans_one_replica_per_gpu_pair(splittable):
    result = CliRunner().invoke(main, ["worker", "--gpus", "0-7", "--gpus-per-replica", "2",
                                       "--model", str(splittable), "--queues", "q1",
                                       "--dry-run"])
    assert result.exit_code == 0, result.output
    plans = [json.loads(line) for line in result.output.splitlines()]
    assert [p["env"]["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0,1", "2,3", "4,5", "6,7"]
    assert [p["name"].split("@")[0] for p in plans] == ["gpu0-tiny", "gpu2-tiny", "gpu4-tiny",
                                                         "gpu6-tiny"]
    for plan in plans:
        command = plan["command"]
        assert command[:4] == [sys.executable, "-m", "dinfer_batch", "worker"]
        assert command[command.index("--device") + 1] == "cuda"
        assert command[command.index("--queues") + 1] == "q1"
        assert command[command.index("--name") + 1] == plan["name"]
        assert command[command.index("--tensor-parallel") + 1] == "2"
        assert plan["tensor_parallel"] == 2
    assert [p["devices"] for p in plans] == [["cuda:0", "cuda:1"], ["cuda:2", "cuda:3"],
                                             ["cuda:4", "cuda:5"], ["cuda:6", "cuda:7"]]


def test_cpu_tensor_parallel_replicas_plan(splittable, tiny_checkpoint):
    result = CliRunner().invoke(main, ["worker", "--replicas", "2", "--device", "cpu",
                                       "--tensor-parallel", "2", "--model", str(splittable),
                                       "--dry-run"])
    assert result.exit_code == 0, result.output
    plans = [json.loads(line) for line in result.output.splitlines()]
    assert [(p["devices"], p["tensor_parallel"]) for p in plans] == [(["cpu", "cpu"], 2)] * 2
    assert all(p["command"][p["command"].index("--tensor-parallel") + 1] == "2"
               for p in plans)
    refused = CliRunner().invoke(main, ["worker", "--tensor-parallel", "2", "--model",
                                        str(tiny_checkpoint), "--dry-run"])
    assert refused.exit_code == 2
    assert "vocabulary size=45 does not divide by tensor_parallel=2" in refused.output
    both = CliRunner().invoke(main, ["worker", "--gpus", "0-3", "--gpus-per-replica", "2",
                                     "--tensor-parallel", "4", "--model", str(splittable),
                                     "--dry-run"])
    assert both.exit_code == 2 and "drop --tensor-parallel" in both.output


def test_cpu_replicas_plan(tiny_checkpoint):
    result = CliRunner().invoke(main, ["worker", "--replicas", "3", "--device", "cpu",
                                       "--model", str(tiny_checkpoint), "--dry-run"])
    plans = [json.loads(line) for line in result.output.splitlines()]
    assert [p["name"].split("@")[0] for p in plans] == ["cpu0-tiny", "cpu1-tiny", "cpu2-tiny"]
    assert all(p["env"] == {} and "cpu" in p["command"] for p in plans)


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0-6", "--gpus-per-replica", "2"], "7 GPU(s) do not split into replicas of 2"),
    (["--gpus", "0-x"], "use all, N, N-M or a comma list"),
    (["--gpus", "0", "--replicas", "2"], "not both"),
    (["--replicas", "2", "--device", "cuda"], "use --gpus for GPUs"),
    (["--replicas", "2", "--model", "/no/such/model"], "unknown model '/no/such/model'"),
])
def test_bad_plans_are_one_line_usage_errors(tiny_checkpoint, args, message):
    model = [] if "--model" in args else ["--model", str(tiny_checkpoint)]
    result = CliRunner().invoke(main, ["worker", *model, *args, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_gpu_ids_map_through_visible_devices():
    assert parse_gpus("0,2", ["4", "5", "6"]) == ["4", "6"]
    assert parse_gpus("all", ["4", "5"]) == ["4", "5"]
    with pytest.raises(ValueError, match="has 2 GPU"):
        parse_gpus("0-2", ["4", "5"])


def test_crash_loop_is_reported_and_left_stopped(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(supervisor, "BACKOFF_MAX_S", 0.05)
    starts = tmp_path / "starts"
    crash = [sys.executable, "-c",
             f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"]
    usage = [sys.executable, "-c", "raise SystemExit(2)"]
    code = Supervisor([Replica("crash", {}, crash), Replica("usage", {}, usage)]).run()
    assert code == 1
    assert starts.read_text() == "x" * (supervisor.MAX_RESTARTS + 1)
    err = capsys.readouterr().err
    assert "crash exited with code 3; not restarting it (crash loop" in err
    assert "usage exited with code 2; not restarting it (bad usage)" in err
    assert "every replica failed" in err
