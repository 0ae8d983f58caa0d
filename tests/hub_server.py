"""A Hugging Face Hub on loopback for the tests: olah (a Hub-compatible server) in offline
mode, serving git repositories from its ``mirrors-path``.

The repositories are built here, in the Hub's own layouts:
- a dataset from the demo's local mirror (``<config>/<split>.jsonl``): the files as they
  are, with a dataset card whose ``configs:`` name each config's split files, as the Hub
  keeps script-free datasets;
- a dataset whose ``main`` holds only a loading script, with its Parquet export on the
  ref ``refs/convert/parquet`` (``<config>/<split>/0000.parquet``), as the Hub keeps the
  datasets it converted;
- a model from a model folder (weights, config, tokenizer files).

Commits have fixed dates and authors, so a repository built twice from the same files has
the same commit hash.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "xstilts tests",
    "GIT_AUTHOR_EMAIL": "tests@xstilts.invalid",
    "GIT_COMMITTER_NAME": "xstilts tests",
    "GIT_COMMITTER_EMAIL": "tests@xstilts.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}
# What a model repository of the Hub holds; the demo's own records stay out.
MODEL_FILES = ("*.json", "*.safetensors", "*.spm", "*.model", "*.txt")
NOT_MODEL_FILES = {"xstilts_backbone.json", "xstilts_demo.json", "xstilts_source.json"}


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=repo, env={**os.environ, **GIT_IDENTITY}, check=True, capture_output=True, text=True
    )
    return proc.stdout.strip()


def _commit_all(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _init(repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "main")


def config_splits(folder: Path) -> dict[str, list[str]]:
    """{config: [split, ...]} of a local-mirror dataset folder (``<config>/<split>.jsonl``)."""
    return {
        c.name: sorted(f.stem for f in c.glob("*.jsonl"))
        for c in sorted(folder.iterdir())
        if c.is_dir() and any(c.glob("*.jsonl"))
    }


def dataset_card(configs: dict[str, list[str]]) -> str:
    lines = ["---", "configs:"]
    for config, splits in configs.items():
        lines += [f"- config_name: {json.dumps(config)}", "  data_files:"]
        lines += [f"  - split: {split}\n    path: {json.dumps(f'{config}/{split}.jsonl')}" for split in splits]
    return "\n".join(lines + ["---", ""])


def mirror_dataset(folder: Path, mirrors: Path, repo_id: str) -> str:
    """A dataset repository of the local mirror's jsonl configs; its commit hash."""
    repo = mirrors / "datasets" / repo_id
    _init(repo)
    configs = config_splits(folder)
    for config, splits in configs.items():
        (repo / config).mkdir()
        for split in splits:
            shutil.copy2(folder / config / f"{split}.jsonl", repo / config / f"{split}.jsonl")
    (repo / "README.md").write_text(dataset_card(configs))
    return _commit_all(repo, f"{repo_id} from the demo mirror")


def mirror_script_dataset(folder: Path, mirrors: Path, repo_id: str) -> tuple[str, str]:
    """A repository whose main holds a loading script, and its Parquet export on
    refs/convert/parquet; (main's commit, the export's commit)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = mirrors / "datasets" / repo_id
    _init(repo)
    name = repo_id.rsplit("/", 1)[-1]
    (repo / f"{name}.py").write_text("# a dataset loading script (datasets >= 4 refuses it)\n")
    (repo / "README.md").write_text(f"# {repo_id}\n")
    main = _commit_all(repo, "loading script")
    _git(repo, "checkout", "-q", "--orphan", "parquet-export")
    _git(repo, "rm", "-rfq", ".")
    for config, splits in config_splits(folder).items():
        for split in splits:
            rows = [
                json.loads(line)
                for line in (folder / config / f"{split}.jsonl").read_text().splitlines()
                if line.strip()
            ]
            out = repo / config / split / "0000.parquet"
            out.parent.mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(rows), out)
    export = _commit_all(repo, "Parquet export")
    _git(repo, "update-ref", "refs/convert/parquet", export)
    _git(repo, "checkout", "-q", "main")
    _git(repo, "branch", "-q", "-D", "parquet-export")
    return main, export


def mirror_model(folder: Path, mirrors: Path, repo_id: str) -> str:
    """A model repository of a model folder's Hub files; its commit hash."""
    repo = mirrors / "models" / repo_id
    _init(repo)
    for pattern in MODEL_FILES:
        for file in folder.glob(pattern):
            if file.name not in NOT_MODEL_FILES:
                shutil.copy2(file, repo / file.name)
    return _commit_all(repo, f"{repo_id}")


def new_commit(mirrors: Path, repo_type: str, repo_id: str, file: str, text: str) -> str:
    """Change a repository upstream: one more commit on main."""
    repo = mirrors / f"{repo_type}s" / repo_id
    (repo / file).write_text(text)
    return _commit_all(repo, f"change {file}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HubServer:
    """olah serving ``mirrors`` on a loopback port; ``endpoint`` is its HF_ENDPOINT."""

    def __init__(self, mirrors: Path, workdir: Path):
        self.mirrors, self.workdir = mirrors, workdir
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> HubServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "olah.toml"
        # Offline: never ask huggingface.co. No metadata reuse: a test that changes a
        # repository upstream must see the change at once.
        config.write_text(
            "[basic]\n"
            f'host = "127.0.0.1"\nport = {self.port}\n'
            f'repos-path = "{self.workdir / "cache"}"\n'
            f'mirrors-path = ["{self.mirrors}"]\n'
            "metadata-cache-ttl = 0\n"
            "[accessibility]\noffline = true\n"
        )
        cli = Path(sys.executable).with_name("olah-cli")
        log = (self.workdir / "olah.log").open("w")
        self.process = subprocess.Popen(
            [str(cli), "-c", str(config)], cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"olah exited: {(self.workdir / 'olah.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{self.endpoint}/api/datasets/none/none/revision/main", timeout=2)
            except urllib.error.HTTPError:
                return self  # it answers (a 404 for a repository it does not hold)
            except OSError:
                time.sleep(0.3)
                continue
            return self
        self.stop()
        raise RuntimeError(f"olah did not answer on {self.endpoint} within {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None

    def environment(self, hf_home: Path) -> dict[str, str]:
        """The environment a process needs to use this server as its Hub."""
        return {
            "HF_ENDPOINT": self.endpoint,
            "HF_HOME": str(hf_home),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0",
            "HF_HUB_DISABLE_XET": "1",
        }
