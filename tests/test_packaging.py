"""The set-up promises of README.md: two commands, pinned environments that agree."""

import os
import re
import subprocess

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.unit


def pins(lines):
    out = {}
    for line in lines:
        line = line.split("#")[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_conda_envs_match_the_pip_requirements():
    required = pins((REPO / "requirements.txt").read_text().splitlines())
    assert required["torch"] == "2.13.0"
    for env_file in (REPO / "envs").glob("*.yaml"):
        deps = yaml.safe_load(env_file.read_text())["dependencies"]
        pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
        env_pins = pins(pip)
        assert env_pins, env_file
        for name, version in env_pins.items():
            assert required.get(name) == version, f"{env_file.name}: {name}=={version} vs requirements.txt"


def test_readme_names_exactly_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Two commands")[1].split("```bash")[1].split("```")[0]
    commands = [l.split("#")[0].strip() for l in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci/run").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "snakemake --cores $(CORES)" in makefile and "CORES ?= 2" in makefile


# What an outer `make test TORCH=cpu` hands its children: its variables travel in MAKEFLAGS
# (and TORCH in the environment), and would set the inner make's TORCH whatever the test asks.
OUTER_MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH", "VENV")


def make_install_commands(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """What `make install` would run for a fresh environment (make -n: nothing runs), as a
    fresh shell would run it, whatever make runs the tests."""
    env = {name: value for name, value in os.environ.items() if name not in OUTER_MAKE_VARIABLES}
    return subprocess.run(
        ["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )


def test_torch_cpu_option_installs_from_pytorchs_cpu_index_and_the_default_from_pypi(tmp_path):
    default = make_install_commands(tmp_path)
    assert default.returncode == 0, default.stderr
    torch_line = next(l for l in default.stdout.splitlines() if "torch==" in l)
    assert torch_line.split()[3:] == ["install", "--quiet", "torch==2.13.0"] and "index-url" not in default.stdout
    cpu = make_install_commands(tmp_path, "TORCH=cpu")
    assert cpu.returncode == 0, cpu.stderr
    torch_line = next(l for l in cpu.stdout.splitlines() if "torch==" in l)
    assert torch_line.split()[3:] == [
        "install",
        "--quiet",
        "--index-url",
        "https://download.pytorch.org/whl/cpu",
        "torch==2.13.0",
    ]
    # The rest of the install is the same: requirements-test.txt from the configured index.
    assert [l for l in cpu.stdout.splitlines() if "torch==" not in l] == [
        l for l in default.stdout.splitlines() if "torch==" not in l
    ]
    wrong = make_install_commands(tmp_path, "TORCH=gpu")
    assert wrong.returncode != 0 and "TORCH=cpu" in wrong.stderr
