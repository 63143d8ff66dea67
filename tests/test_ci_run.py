""".ci/run: it runs exactly the README's install and test blocks; the install block installs Chromium itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

FENCE = "```"


def readme_block(tag: str) -> str:
    """The commands between <!-- ci:TAG --> and <!-- /ci:TAG --> in the README, fences dropped (plain Python)."""
    text = (ROOT / "README.md").read_text()
    body = text.split(f"<!-- ci:{tag} -->", 1)[1].split(f"<!-- /ci:{tag} -->", 1)[0]
    return "\n".join(line for line in body.strip().splitlines() if not line.startswith(FENCE))


def test_ci_runs_exactly_the_readme_blocks() -> None:
    r = subprocess.run([str(ROOT / ".ci/run"), "--print"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    install, tests = readme_block("install"), readme_block("test")
    assert r.stdout == f"{install}\n{tests}\n"
    # one command line each: what a user pastes is what CI runs
    assert (
        "\n" not in install
        and install.startswith("python3 -m venv .venv")
        and tests == ".venv/bin/python -m pytest"
    )
    # .ci/run does no set-up of its own: every command it runs comes from the README
    script = (ROOT / ".ci/run").read_text()
    assert not re.search(r"apt-get|pip |chromium|sudo", script)
    assert subprocess.run(["bash", "-n", "-c", install]).returncode == 0


def chromium_part() -> str:
    m = re.search(r"\{ \[ -x /usr/bin/chromium \].*?fi; \}", readme_block("install"))
    assert m, "the install block must install Chromium when /usr/bin/chromium is missing"
    return m.group(0)


def stub(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize("uid, sudo", [("0", False), ("1000", True)])
def test_install_block_installs_chromium_with_apt(tmp_path: Path, uid: str, sudo: bool) -> None:
    """Where Chromium is missing the block runs apt-get (through sudo when not root); stubs record the calls."""
    log = tmp_path / "calls"
    stub(tmp_path, "apt-get", f'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}')
    stub(tmp_path, "sudo", f'echo "sudo" >> {log}; "$@"')
    stub(tmp_path, "id", f"echo {uid}")
    part = chromium_part().replace("/usr/bin/chromium", str(tmp_path / "no-chromium"), 1)
    r = subprocess.run(
        ["bash", "-c", part],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    apt = [c for c in calls if c.startswith("apt-get")]
    assert apt == [
        "apt-get update -q DEBIAN_FRONTEND=",
        "apt-get install -y -q chromium DEBIAN_FRONTEND=noninteractive",
    ]
    assert calls.count("sudo") == (2 if sudo else 0)


def test_install_block_without_apt_says_what_to_do(tmp_path: Path) -> None:
    part = chromium_part().replace("/usr/bin/chromium", str(tmp_path / "no-chromium"), 1)
    stub(tmp_path, "id", "echo 1000")  # a PATH without apt-get
    r = subprocess.run(
        ["/bin/bash", "-c", part], capture_output=True, text=True, timeout=30, env={"PATH": str(tmp_path)}
    )
    assert r.returncode == 0 and "install Chromium at /usr/bin/chromium" in r.stdout


def test_install_block_skips_when_chromium_is_there(tmp_path: Path) -> None:
    (tmp_path / "chromium").write_text("#!/bin/sh\n")
    (tmp_path / "chromium").chmod(0o755)
    part = chromium_part().replace("/usr/bin/chromium", str(tmp_path / "chromium"), 1)
    r = subprocess.run(
        ["/bin/bash", "-c", part], capture_output=True, text=True, timeout=30, env={"PATH": str(tmp_path)}
    )  # no apt-get, no sudo: nothing may be called
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert len(links) >= 15
    # docs/agents.md comes with `traceview mcp` (another branch)
    missing = [p for p in links if not (ROOT / p).exists() and p != "docs/agents.md"]
    assert not missing, missing
