"""A throwaway single-node Slurm cluster for the integration test (and for measuring).

Starts munged, MariaDB, slurmdbd, slurmctld and slurmd from the Debian packages
(`slurmctld slurmd slurm-client slurmdbd munge mariadb-server`), every one in the
foreground as a child of this process, with all state, sockets, ports and logs under one
directory. Nothing touches /etc or the system services; `stop()` ends every daemon it
started, by PID, and waits for it.

    python -m tests.slurm_cluster up /tmp/cluster     # prints `export SLURM_CONF=...`
    python -m tests.slurm_cluster down /tmp/cluster

The cluster has one node with this machine's CPUs, two GPUs declared with no devices behind them
(GPU jobs are scheduled and run on CPU) and a `debug` partition, accounting in
slurmdbd (so `sacct` answers like on a real cluster) and Slurm's default MinJobAge (300 s)
and KillWait (30 s). Needs root: slurmd runs jobs as the submitting user.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sacctmgr")
PACKAGES = "slurmctld slurmd slurm-client slurmdbd munge mariadb-server"
# The Slurm executor's job step strips SLURM_* variables (SLURM_CONF among them) before its
# `srun`, which then reads the compiled-in path: the cluster's config must be there.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
# GPUs the node declares, with no devices behind them: enough for a 2-rank training job.
GPU_STAND_INS = ("/dev/null", "/dev/zero")
GPUS = len(GPU_STAND_INS)


def unavailable_reason() -> str | None:
    """Why a cluster cannot be started here, or None if it can."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd runs jobs as their user)"
    missing = [name for name in DAEMONS if _find(name) is None]
    if missing:
        return f"Slurm test cluster: {', '.join(missing)} not installed (apt-get install {PACKAGES})"
    if SYSTEM_CONF.exists() or SYSTEM_CONF.is_symlink():
        return f"{SYSTEM_CONF} exists: this machine has a Slurm config the test cluster must not replace"
    return None


def _find(name: str) -> str | None:
    """A daemon's path: on PATH, or in the Debian packages' sbin/bin (not always on root's PATH)."""
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _which(name: str) -> str:
    path = _find(name)
    if path is None:
        raise FileNotFoundError(name)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(check, what: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if check():
            return
        time.sleep(0.5)
    output = log.with_suffix(".out")
    tail = "\n".join(path.read_text(errors="replace")[-2000:] for path in (output, log) if path.exists()) or "(no log)"
    status = "exited" if proc.poll() is not None else f"did not come up within {timeout:.0f} s"
    raise RuntimeError(f"{what} {status}; {log}:\n{tail}")


@dataclass
class Cluster:
    root: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def slurm_conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.slurm_conf)}

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(args, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    # -- start -------------------------------------------------------------------------
    def start(self) -> Cluster:
        for sub in ("etc", "log", "run", "db", "state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.ports = {"mysql": _free_port(), "dbd": _free_port(), "ctld": _free_port(), "slurmd": _free_port()}
        try:
            self._start_munge()
            self._start_mariadb()
            self._write_configs()
            SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
            SYSTEM_CONF.symlink_to(self.slurm_conf)
            self._start_slurmdbd()
            self._start_slurmctld()
            self._start_slurmd()
        except BaseException:
            self.stop()
            raise
        (self.root / "cluster.json").write_text(
            json.dumps(
                {"pids": {name: proc.pid for name, proc in self.processes.items()}, "slurm_conf": str(self.slurm_conf)},
                indent=1,
            )
        )
        return self

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.root / "log" / f"{name}.out", "ab")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.processes[name] = proc
        return proc

    def _start_munge(self) -> None:
        key = self.root / "etc" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = self.root / "run" / "munge.socket"
        self._spawn(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={self.root / 'run' / 'munged.seed'}",
            ],
        )
        _wait(self.munge_socket.exists, "munged", self.processes["munged"], self.root / "log" / "munged.log", 20)

    def _start_mariadb(self) -> None:
        datadir = self.root / "db"
        subprocess.run(
            [
                _which("mariadb-install-db"),
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.mysql_socket = self.root / "run" / "mysqld.sock"
        self._spawn(
            "mariadbd",
            [
                _which("mariadbd"),
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                f"--socket={self.mysql_socket}",
                f"--port={self.ports['mysql']}",
                "--bind-address=127.0.0.1",
                f"--pid-file={self.root / 'run' / 'mysqld.pid'}",
                "--innodb-buffer-pool-size=64M",
                f"--log-error={self.root / 'log' / 'mariadb.log'}",
            ],
        )
        _wait(self.mysql_socket.exists, "MariaDB", self.processes["mariadbd"], self.root / "log" / "mariadb.log", 60)

    def _write_configs(self) -> None:
        etc, host = self.root / "etc", socket.gethostname()
        cpus = os.cpu_count() or 1
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        (etc / "slurmdbd.conf").write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "DbdHost=localhost",
                    f"DbdPort={self.ports['dbd']}",
                    "SlurmUser=root",
                    f"PidFile={self.root / 'run' / 'slurmdbd.pid'}",
                    f"LogFile={self.root / 'log' / 'slurmdbd.log'}",
                    "DebugLevel=info",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.ports['mysql']}",
                    "StorageUser=root",
                    "StorageLoc=slurm_acct_db",
                    "",
                ]
            )
        )
        (etc / "slurmdbd.conf").chmod(0o600)
        (etc / "slurm.conf").write_text(
            "\n".join(
                [
                    "ClusterName=xstilts",
                    f"SlurmctldHost={host}(127.0.0.1)",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    "SlurmUser=root",
                    f"SlurmctldPort={self.ports['ctld']}",
                    f"SlurmdPort={self.ports['slurmd']}",
                    f"StateSaveLocation={self.root / 'state'}",
                    f"SlurmdSpoolDir={self.root / 'spool'}",
                    f"SlurmctldPidFile={self.root / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={self.root / 'run' / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    # Requeued jobs wait cred_expire + 1 s before they may start (default 120 s).
                    f"AuthInfo=socket={self.munge_socket},cred_expire=10",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "SchedulerType=sched/backfill",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "JobAcctGatherType=jobacct_gather/none",
                    # Keep the Slurm executor's job comments (rule and wildcards) in sacct.
                    "AccountingStoreFlags=job_comment",
                    "AccountingStorageType=accounting_storage/slurmdbd",
                    "AccountingStorageHost=localhost",
                    f"AccountingStoragePort={self.ports['dbd']}",
                    # The munge socket for slurmdbd connections (AuthInfo covers only slurmctld's).
                    f"AccountingStoragePass={self.munge_socket}",
                    # Slurm's defaults, stated: a cluster user's status queries see these.
                    "MinJobAge=300",
                    "KillWait=30",
                    # Fast scheduling so the test does not wait on the scheduler's cadence.
                    "SchedulerParameters=sched_interval=2,bf_interval=2",
                    # GPUs as a count only (no device files): a job asking for GPUs, as a sharded
                    # training job does, is scheduled; its processes find no CUDA and run on CPU.
                    "GresTypes=gpu",
                    f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} Gres=gpu:{GPUS} State=UNKNOWN",
                    f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

        # slurmd counts a GPU per device file and ignores a bare Count for gpu: character
        # devices every machine has stand in (no cgroup enforcement touches them).
        (etc / "gres.conf").write_text("".join(f"NodeName={host} Name=gpu File={device}\n" for device in GPU_STAND_INS))

    def _start_slurmdbd(self) -> None:
        self._spawn("slurmdbd", [_which("slurmdbd"), "-D"])
        _wait(
            lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0,
            "slurmdbd",
            self.processes["slurmdbd"],
            self.root / "log" / "slurmdbd.log",
        )

    def _start_slurmctld(self) -> None:
        self.run("sacctmgr", "-i", "add", "cluster", "xstilts", check=False)
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i"])
        _wait(
            lambda: self.run("scontrol", "ping", check=False).stdout.count("UP") > 0,
            "slurmctld",
            self.processes["slurmctld"],
            self.root / "log" / "slurmctld.log",
        )

    def _start_slurmd(self) -> None:
        self._spawn("slurmd", [_which("slurmd"), "-D"])

        def node_idle() -> bool:
            state = self.run("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
            return state in {"idle", "mix", "alloc"}

        _wait(node_idle, "slurmd", self.processes["slurmd"], self.root / "log" / "slurmd.log")

    # -- stop --------------------------------------------------------------------------
    def stop(self) -> None:
        """End every daemon started here, by PID, in reverse start order."""
        for proc in reversed(list(self.processes.values())):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        self.processes.clear()
        _unlink_system_conf(self.slurm_conf)


def _unlink_system_conf(slurm_conf: Path) -> None:
    """Remove the /etc/slurm/slurm.conf link, only if it points at this cluster's config."""
    if SYSTEM_CONF.is_symlink() and Path(os.readlink(SYSTEM_CONF)) == slurm_conf:
        SYSTEM_CONF.unlink()


def stop_recorded(root: Path) -> None:
    """Stop a cluster started by another process (`up`), from the PIDs it recorded."""
    record = json.loads((root / "cluster.json").read_text())
    for pid in reversed(list(record["pids"].values())):
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(60):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            os.killpg(pid, signal.SIGKILL)
    _unlink_system_conf(Path(record["slurm_conf"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if args.action == "down":
        stop_recorded(args.root)
        return 0
    reason = unavailable_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    cluster = Cluster(args.root).start()
    # Leave the daemons running after this process exits; `down` stops them by PID.
    cluster.processes.clear()
    print(f"export SLURM_CONF={cluster.slurm_conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
