"""`convnet batch --scheduler`: a batch on a real Dask cluster (scheduler and workers started here).

The cluster runs on 127.0.0.1 with ports chosen by the system: `dask scheduler` and two
`dask worker` processes of one thread each; the second worker is started with
CONVNET_WORKER_COPY_INPUTS=1, so it never reads the client's files where they lie and every data
file it needs travels with its tasks (the case of a worker without the shared file system).
"""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

distributed = pytest.importorskip("distributed")

from convnet import cluster                                    # noqa: E402
from convnet.batch import run_batch                            # noqa: E402
from convnet.cli import main                                   # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
START_S = 90


def _dask(*args, env=None, log=None):
    return subprocess.Popen([sys.executable, "-m", "dask", *args], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, env=env)


class Cluster:
    def __init__(self, folder):
        self.folder = Path(folder)
        self.env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        self.env["PYTHONPATH"] = root + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
        self.processes = []
        self.file = self.folder / "scheduler.json"
        self.log = open(self.folder / "dask.log", "ab")
        self.scheduler = _dask("scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(self.file),
                               env=self.env, log=self.log)
        deadline = time.monotonic() + START_S
        while not self.file.exists() or not self.file.read_text().strip():
            assert self.scheduler.poll() is None and time.monotonic() < deadline, \
                (self.folder / "dask.log").read_text()
            time.sleep(0.2)
        time.sleep(0.2)
        self.address = json.loads(self.file.read_text())["address"]
        self.client = distributed.Client(self.address, timeout=START_S, set_as_default=False)

    def worker(self, name, copy_inputs=False):
        env = dict(self.env)
        if copy_inputs:
            env[cluster.COPY_INPUTS_ENV] = "1"
        proc = _dask("worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                     "--host", "127.0.0.1", "--name", name,
                     "--local-directory", str(self.folder / name), env=env, log=self.log)
        self.processes.append(proc)
        return proc

    def wait_for(self, n):
        self.client.wait_for_workers(n, timeout=START_S)

    def addresses(self):
        return {w["name"]: a for a, w in self.client.scheduler_info()["workers"].items()}

    def close(self):
        self.client.close()
        for p in self.processes + [self.scheduler]:
            if p.poll() is None:
                p.terminate()
        for p in self.processes + [self.scheduler]:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.worker("shared")
        c.worker("copying", copy_inputs=True)
        c.wait_for(2)
        yield c
    finally:
        c.close()


MNIST = """\
READ MNIST IMAGE "{data}/mnist-3000-images-idx3-ubyte.gz"
READ MNIST LABELS "{data}/mnist-3000-labels-idx1-ubyte.gz"
KEEP CASES {first} {last}
FULLY CONNECTED LAYER 3
ANNEAL ITERS = 3
MAXITERS = 3
TRAIN
SAVE MODEL "m.model"
CLEAR
LOAD MODEL "m.model"
READ MNIST IMAGE "{abs_data}/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "{abs_data}/t10k-labels-idx1-ubyte.gz"
KEEP CASES 1 60
TEST
"""

CONV = """\
MAKE IMAGE 6 6 1 2 40
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 4
MAXITERS = 4
TRAIN
"""

BROKEN = """\
MAKE IMAGE 6 6 1 2 40
CONVOLUTIONAL LAYER 2 9 9 0 0 1 1
TRAIN
"""

BAD_DATA = 'READ MNIST IMAGE "../data/README.md"\n'

# a session whose length is set by its annealing evaluations (no early end)
SLOW = """\
MAKE IMAGE 12 12 1 3 1000
CONVOLUTIONAL LAYER 6 2 2 1 1 1 1
FULLY CONNECTED LAYER 10
ANNEAL ITERS = {anneal}
MAXITERS = 3
TRAIN
"""


def _files(folder):
    """A batch in folder/exp (data in folder/data, named relatively and absolutely)."""
    exp, data = folder / "exp", folder / "data"
    exp.mkdir(parents=True)
    shutil.copytree(DATA, data)
    texts = {"mnist_a": MNIST.format(data="../data", abs_data=data, first=1, last=120),
             "conv": CONV, "broken": BROKEN,
             "mnist_b": MNIST.format(data="../data", abs_data=data, first=121, last=220),
             "bad_data": BAD_DATA}
    for name, text in texts.items():
        (exp / f"{name}.ctl").write_text(text)
    return ["exp/mnist_a.ctl", "exp/conv.ctl", str(exp / "broken.ctl"), "exp/mnist_b.ctl",
            "exp/bad_data.ctl", "exp/missing.ctl"]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_cluster_batch_gives_the_rows_of_a_local_batch(dask_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    result = CliRunner().invoke(main, ["batch", *files, "--out", "remote", "--scheduler",
                                       dask_cluster.address, "--seed", "7", "--device", "cpu"])
    assert result.exit_code == 2, result.output            # the broken files fail
    run_batch(files, "local", jobs=2, device="cpu", seed=7)
    remote, local = _rows("remote/summary.csv"), _rows("local/summary.csv")
    assert len(remote) == len(files)
    for r, lo in zip(remote, local):
        assert float(r.pop("seconds") or 0) >= 0 and lo.pop("seconds") is not None
        assert r == lo
    assert [r["status"] for r in remote[:2]] == ["ok", "ok"]
    assert remote[2]["status"].startswith(f"error: {files[2]}:2: the vertical filter")
    assert remote[4]["status"].startswith("error: exp/bad_data.ctl:1: MNIST image file "
                                          f"'{tmp_path / 'data' / 'README.md'}'")
    assert remote[5]["status"] == "error: exp/missing.ctl: no such control file"
    # every run's folder came back, with the client's paths in its log
    for stem in ("mnist_a", "mnist_b"):
        folder = tmp_path / "remote" / stem
        assert {"CONVNET.LOG", "criterion.png", "m.model", "results.json"} <= set(os.listdir(folder))
        log = (folder / "CONVNET.LOG").read_text()
        assert f"Model saved to remote/{stem}/m.model" in log and "convnet-task-" not in log
    assert "convnet: 3 of 6 files ran without error" in result.output
    assert (tmp_path / "remote" / "report.html").exists()
    results = (tmp_path / "remote" / "mnist_a" / "results.json").read_text()
    assert "convnet-task-" not in results and "convnet-out-" not in results   # no worker paths
    # what the copying worker ran came to it through the cluster and sits in its cache by content
    cached = dask_cluster.client.run(
        lambda dask_worker: sorted(os.listdir(cluster._cache_dir(dask_worker)))
        if os.path.isdir(cluster._cache_dir(dask_worker)) else [])
    copying = dask_cluster.addresses()["copying"]
    events = dask_cluster.client.get_events(cluster.ATTEMPT_TOPIC)
    ran_there = {m["id"].rsplit("-", 1)[1] for _, m in events if m["worker"] == copying}
    needs = set()
    for i in ran_there:
        needs |= {d for _, d, _ in cluster.control_inputs(files[int(i)])}
    assert needs <= set(cached[copying])
    assert cached[dask_cluster.addresses()["shared"]] == []   # it read the files in place


def test_worker_input_choice(tmp_path, monkeypatch):
    """A worker uses the client's path only for the same content; else its cache; else nothing."""
    class W:
        local_directory = str(tmp_path / "w")
    data = tmp_path / "d.bin"
    data.write_bytes(b"abc")
    digest = cluster.file_digest(data)
    entry = (str(data), digest, 3)
    assert cluster.worker_holdings([entry], dask_worker=W) == [digest]
    assert cluster.worker_holdings([(str(data), "0" * 64, 3)], dask_worker=W) == []
    monkeypatch.setenv(cluster.COPY_INPUTS_ENV, "1")
    assert cluster.worker_holdings([entry], dask_worker=W) == []
    os.makedirs(cluster._cache_dir(W))
    (Path(cluster._cache_dir(W)) / digest).write_bytes(b"abc")
    assert cluster._local_copy(W, str(data), digest, 3) == os.path.join(cluster._cache_dir(W),
                                                                        digest)


def test_unreachable_scheduler_is_one_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    with socket.socket() as s:                   # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctl = tmp_path / "c.ctl"
    ctl.write_text(CONV)
    address = f"tcp://127.0.0.1:{port}"
    result = CliRunner().invoke(main, ["batch", str(ctl), "--out", str(tmp_path / "o"),
                                       "--scheduler", address])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"convnet: error: cannot reach the Dask scheduler at {address}: ")
    result = CliRunner().invoke(main, ["batch", str(ctl), "--out", str(tmp_path / "o"),
                                       "--scheduler", address, "--jobs", "2"])
    assert result.exit_code == 2 and "--jobs and --gpus are for a batch on this machine" in \
        result.output


@pytest.mark.slow
def test_a_worker_killed_mid_run(dask_cluster, tmp_path, monkeypatch):
    """The task of a worker that dies is run again elsewhere; the batch has every row."""
    monkeypatch.chdir(tmp_path)
    victim = dask_cluster.worker("victim")
    dask_cluster.wait_for(3)
    files = []
    for k in range(4):
        path = tmp_path / f"slow{k}.ctl"
        path.write_text(SLOW.format(anneal=150))
        files.append(path.name)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(
        rows=cluster.run_cluster_batch(files, "out", dask_cluster.address, device="cpu",
                                       seed=3)))
    thread.start()
    address = dask_cluster.addresses()["victim"]
    deadline = time.monotonic() + START_S
    while not dask_cluster.client.processing().get(address):
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.1)
    time.sleep(1.0)                                  # its session is under way
    os.kill(victim.pid, signal.SIGKILL)
    thread.join(300)
    assert not thread.is_alive()
    rows = outcome["rows"]
    assert len(rows) == 4 and all(r.ok for r in rows)
    again = [r for r in rows if r.status != "ok"]
    assert len(again) == 1 and again[0].status.startswith("ok (run again on tcp://127.0.0.1:")
    assert again[0].status.endswith(f"after losing {address})")
    assert all(r.final_criterion is not None for r in rows)
    assert [r["status"] for r in _rows("out/summary.csv")] == [r.status for r in rows]


@pytest.mark.slow
def test_ctrl_c_keeps_finished_rows(dask_cluster, tmp_path):
    """SIGINT to the client: the finished row is kept, the rest are cancelled, exit 130."""
    (tmp_path / "fast.ctl").write_text(CONV)
    (tmp_path / "slow.ctl").write_text(SLOW.format(anneal=1000000))
    env = dict(dask_cluster.env, PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, "-m", "convnet", "batch", "fast.ctl", "slow.ctl",
                             "--out", "out", "--scheduler", dask_cluster.address,
                             "--device", "cpu"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # Ctrl-C as a shell delivers it, whatever this process does with it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + START_S
    while not (tmp_path / "out" / "fast" / "CONVNET.LOG").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)        # faulthandler: where it is stuck
        raise AssertionError(proc.communicate()[1]) from None
    assert proc.returncode == 130, err
    rows = _rows(tmp_path / "out" / "summary.csv")
    assert rows[0]["status"] == "ok" and rows[1]["status"] == "not run (batch interrupted)"
    # the slow session was stopped: the workers are free again soon
    deadline = time.monotonic() + 30
    while any(dask_cluster.client.processing().values()):
        assert time.monotonic() < deadline
        time.sleep(0.2)


# a sweep of 2 x 2 combinations x 2 seeds whose second ANNEAL ITERS value is slow
SWEEP_FILE = """\
SWEEP ANNEAL ITERS = 2, 100
SWEEP WIDTH = 4, 5
SWEEP SEEDS = 2
MAKE IMAGE 12 12 1 3 300
CONVOLUTIONAL LAYER 6 2 2 1 1 1 1
FULLY CONNECTED LAYER $WIDTH
MAXITERS = 3
TRAIN
"""


def test_a_ctrl_c_after_a_run_was_recorded_keeps_its_row(tmp_path):
    """A Ctrl-C that lands after a finished run's inputs were recorded but before its row was
    kept: the row comes from its results.json (ok, as the next start will reuse it); a run whose
    results.json lacks those inputs, or has none, is "not run"."""
    from convnet.logs.results import RESULTS_FORMAT, RESULTS_VERSION, write_results
    from convnet.resume import PlannedRun, record_inputs
    out = tmp_path / "out"
    runs = [PlannedRun(file="a.ctl", folder=str(out / name)) for name in ("done", "bare", "none")]
    inputs = {"control_sha256": "x", "seed": 1, "files": {}, "device": "cpu",
              "convnet_version": "0"}
    for run in runs[:2]:
        os.makedirs(run.folder)
        write_results(os.path.join(run.folder, "results.json"),
                      {"format": RESULTS_FORMAT, "format_version": RESULTS_VERSION,
                       "status": "done", "runs": []})
    record_inputs(runs[0].folder, inputs, 2.5)
    rows = [cluster._stopped_row(run, inputs, str(out)) for run in runs]
    assert rows[0].ok and rows[0].seconds == 2.5 and rows[0].run == "done"
    assert [r.status for r in rows[1:]] == ["not run (batch interrupted)"] * 2


@pytest.mark.slow
def test_a_sweep_on_the_cluster_resumes_after_ctrl_c(dask_cluster, tmp_path):
    """The sweep's runs are tasks; a Ctrl-C half-way keeps the finished runs, and the same
    command again reuses them and completes the rest; the page shows the combinations."""
    (tmp_path / "sweep.ctl").write_text(SWEEP_FILE)
    command = [sys.executable, "-m", "convnet", "batch", "sweep.ctl", "--out", "out",
               "--scheduler", dask_cluster.address, "--device", "cpu"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=dask_cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 4 * START_S
    while len(list((tmp_path / "out" / "sweep").glob("*/results.json"))) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    first = _rows(tmp_path / "out" / "summary.csv")
    finished = {r["run"] for r in first if r["status"] == "ok"}
    assert 2 <= len(finished) < 8
    done = subprocess.run(command, cwd=tmp_path, env=dask_cluster.env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = _rows(tmp_path / "out" / "summary.csv")
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    assert {r["run"] for r in rows if r["reused"] == "yes"} == finished
    assert f"({len(finished)} reused from an earlier start)" in done.stdout
    assert rows[0]["run"] == os.path.join("sweep", "ANNEAL-ITERS=2_WIDTH=4_seed=1")
    log = (tmp_path / "out" / rows[-1]["run"] / "CONVNET.LOG").read_text()
    assert "Sweep run of sweep.ctl: ANNEAL ITERS = 100, WIDTH = 5 (combination 4 of 4), " \
        "seed 2" in log
    groups = _rows(tmp_path / "out" / "groups.csv")
    assert [(g["ANNEAL ITERS"], g["WIDTH"], g["runs"]) for g in groups] == [
        ("2", "4", "2"), ("2", "5", "2"), ("100", "4", "2"), ("100", "5", "2")]
    assert sum(g["best"] == "yes" for g in groups) == 1
    report = (tmp_path / "out" / "report.html").read_text()
    assert 'id="groups"' in report and report.count('data-swept="') == 4   # 2 measures x 2
