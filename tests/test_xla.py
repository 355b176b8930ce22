"""TFRecordDataset under torch_xla for real: replicas started by torch_xla.launch on PJRT CPU devices
(PJRT_DEVICE=CPU, CPU_NUM_DEVICES=1 or 4: one process, a thread per device, as on a TPU host's chips).

Skipped unless torch_xla imports. `make test-xla` builds the virtualenv it needs (torch 2.9.0 + torch-xla 2.9.0,
.venv-xla) and runs this file there. Each case runs tests/helpers/xla_replicas.py (or examples/train_tpu.py) in a
fresh process, because an XLA runtime is started once per process.

Checked: replicas detect their rank and world size from torch_xla's running runtime (never by starting it: the
parent's detection leaves the runtime off and the environment as it was, so the launch works); every replica
yields the same number of batches, len(dataset) of them, through DataLoader workers and MpDeviceLoader; no record
is read twice across replicas and all but the documented remainder are read; a dataset built before the launch is
refused where it is read; torch_xla imported with no usable device is never a crash; the TPU example runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch_xla")

import tfr_torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HELPER = REPO / "tests" / "helpers" / "xla_replicas.py"
COUNTS = [23, 0, 17, 9]  # records per file, one empty: 49 in all
TIMEOUT_S = 540
MESSAGE = ("was built as rank 0 of 1 (from default) but is read as rank {rank} of 4 (from torch_xla): built before "
           "the distributed job started (before torch_xla.launch / xmp.spawn / init_process_group) and handed to it, "
           "it would not split the records between ranks. Build it inside the function each replica runs, or pass "
           "rank= and world_size= explicitly")


@pytest.fixture(scope="module")
def write_files(write_corpus):
    """write_files(folder, with_index) -> ids: train-NN.tfrecord files of COUNTS Examples {"id": 1000, 1001, ...}."""
    return lambda folder, with_index: write_corpus(folder, COUNTS, name="train-{:02d}.tfrecord", first=1000,
                                                   index=with_index).ids


def xla_env(devices: int | None, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "PJRT_DEVICE", "CPU_NUM_DEVICES")}
    if devices is not None:
        env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1", **extra)
    return env


def run(args: list[str], env: dict, cwd: Path = REPO) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{args} did not finish in {TIMEOUT_S} s\n{exc.stdout}\n{exc.stderr}")
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
    return result


def launch(tmp_path: Path, config: dict, devices: int | None, **extra: str) -> tuple[dict, list[dict]]:
    """Run the helper; return the parent's report and the replicas' results by ordinal."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "config.json").write_text(json.dumps(config))
    run([str(HELPER), str(tmp_path / "config.json"), str(out)], xla_env(devices, **extra))
    parent = json.loads((out / "parent.json").read_text())
    replicas = [json.loads(p.read_text()) for p in sorted(out.glob("replica-*.json"))]
    return parent, sorted(replicas, key=lambda r: r["ordinal"])


def assert_parent_untouched(parent: dict) -> None:
    assert parent["dataset_error"] is None, parent["dataset_error"]
    assert parent["runtime_started"] is False  # so torch_xla.launch could still start the replicas
    assert parent["env_changes"] == []


@pytest.mark.slow
@pytest.mark.parametrize("index, drop_last, batch_size, workers", [("auto", True, 4, 2), (None, False, 5, 0)],
                         ids=["index-drop_last-2-workers", "no-index-0-workers"])
def test_four_replicas_detect_their_rank_and_read_each_record_once(tmp_path, index, drop_last, batch_size, workers,
                                                                   write_files):
    all_ids = write_files(tmp_path, with_index=index == "auto")
    config = {"mode": "inside", "paths": str(tmp_path / "train-*.tfrecord"), "index": index, "drop_last": drop_last,
              "batch_size": batch_size, "num_workers": workers, "epochs": 2}
    parent, replicas = launch(tmp_path, config, devices=4)
    assert_parent_untouched(parent)
    assert parent["built"] == [0, 1, "default"]

    per_replica = len(all_ids) // 4  # 12: the remainder (1 record) is dropped
    batches = per_replica // batch_size if drop_last else -(-per_replica // batch_size)
    assert [r["ordinal"] for r in replicas] == [0, 1, 2, 3]
    for r in replicas:
        assert r["index"] == r["ordinal"] and r["world_size"] == 4
        assert r["detected"] == [r["ordinal"], 4, "torch_xla"]
        assert r["dataset"] == [r["ordinal"], 4]
        assert r["len"] == batches
    for epoch in range(2):
        seen: Counter = Counter()
        for r in replicas:
            got = r["epochs"][epoch]
            assert len(got) == batches, (r["ordinal"], epoch, [len(b) for b in got])
            if drop_last:
                assert all(len(b) == batch_size for b in got)
            ids = [i for b in got for i in b]
            assert len(ids) == (batches * batch_size if drop_last else per_replica)
            seen.update(ids)
        assert [i for i, n in seen.items() if n > 1] == []
        assert set(seen) <= set(all_ids)
        if not drop_last:
            assert len(seen) == len(all_ids) - len(all_ids) % 4
    assert replicas[0]["epochs"][0] != replicas[0]["epochs"][1]  # set_epoch reshuffles


@pytest.mark.slow
def test_one_device_reads_everything(tmp_path, write_files):
    all_ids = write_files(tmp_path, with_index=True)
    config = {"mode": "inside", "paths": str(tmp_path / "train-*.tfrecord"), "index": "auto", "batch_size": 7,
              "num_workers": 1, "epochs": 1}
    parent, replicas = launch(tmp_path, config, devices=1)
    assert_parent_untouched(parent)
    [r] = replicas
    assert (r["ordinal"], r["world_size"]) == (0, 1)
    assert r["detected"] == [0, 1, "default"]  # one replica: torch_xla has nothing to say, the default answers
    assert sorted(i for b in r["epochs"][0] for i in b) == all_ids


@pytest.fixture(scope="module")
def built_before_launch(tmp_path_factory, write_files):
    tmp_path = tmp_path_factory.mktemp("parent")
    write_files(tmp_path, with_index=True)
    config = {"mode": "parent", "paths": str(tmp_path / "train-*.tfrecord"), "index": "auto", "batch_size": 4,
              "num_workers": 1, "epochs": 1}
    return launch(tmp_path, config, devices=4)


@pytest.mark.slow
def test_built_before_launch_leaves_xla_alone_and_the_check_refuses_it(built_before_launch):
    parent, replicas = built_before_launch
    assert_parent_untouched(parent)  # building it did not start the runtime: the launch below worked
    assert parent["built"] == [0, 1, "default"] and parent["dataset"] == [0, 1]
    assert [r["ordinal"] for r in replicas] == [0, 1, 2, 3]
    for r in replicas:
        assert r["here"] == [r["ordinal"], 4, "torch_xla"]
        assert r["check"] == "RuntimeError: TFRecordDataset " + MESSAGE.format(rank=r["ordinal"])
        # pickled for the replica's spawned DataLoader worker: refused in the replica, before any worker reads
        assert r["check_in_workers"] == "RuntimeError: CheckedStream " + MESSAGE.format(rank=r["ordinal"])


@pytest.mark.slow
def test_dataset_built_before_launch_refuses_to_read(built_before_launch):
    _, replicas = built_before_launch
    for r in replicas:
        assert r["read_error"] == "RuntimeError: TFRecordDataset " + MESSAGE.format(rank=r["ordinal"])


@pytest.mark.parametrize("env", [{"PJRT_DEVICE": "TPU"}, {"RANK": "1", "WORLD_SIZE": "2"}],
                         ids=["PJRT_DEVICE=TPU-no-TPU", "RANK-WORLD_SIZE-no-PJRT_DEVICE"])
def test_imported_torch_xla_with_no_running_runtime(tmp_path, env, write_files):
    """torch_xla imported but never started (no TPU here, or no PJRT_DEVICE): detection neither fails nor starts
    it nor writes the environment; RANK/WORLD_SIZE answer when set."""
    write_files(tmp_path, with_index=True)
    config = {"mode": "probe", "paths": str(tmp_path / "train-*.tfrecord"), "index": "auto", "batch_size": 4}
    parent, replicas = launch(tmp_path, config, devices=None, **env)
    assert_parent_untouched(parent)
    assert replicas == []
    expected = [1, 2, "RANK/WORLD_SIZE"] if "RANK" in env else [0, 1, "default"]
    assert parent["built"] == expected and parent["dataset"] == expected[:2]


@pytest.mark.slow
@pytest.mark.parametrize("devices, records, expected", [(4, 3000, "epoch 1: 5 steps per replica, loss "),
                                                        (1, 3000, "epoch 1: 23 steps per replica, loss "),
                                                        (4, 100, "epoch 1: 0 steps per replica, no batch")])
def test_tpu_example_runs(tmp_path, devices, records, expected):
    rng_ids = iter(range(records))
    for s in range(2):
        path = tmp_path / f"train-{s}.tfrecord"
        with tfr_torch.TFRecordWriter(path) as writer:
            for _ in range(records // 2):
                i = next(rng_ids)
                writer.write_example({"x": [float((i * k) % 7 - 3) for k in range(16)], "label": i % 2})
        tfr_torch.build_index(path)
    result = run([str(REPO / "examples" / "train_tpu.py"), "--data", str(tmp_path / "train-*.tfrecord"),
                  "--epochs", "2", "--workers", "1"], xla_env(devices))
    assert f"{devices} replica(s) on CPU" in result.stdout
    assert expected in result.stdout, result.stdout + result.stderr[-4000:]
