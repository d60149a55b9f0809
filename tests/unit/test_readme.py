"""The README's and the documentation's promises hold: every k3lab command they show is one today's CLI
accepts, and every one that needs no Docker runs as written (exit 0) in a fresh directory. Commands that
talk to Docker run in the integration suite (tests/integration/test_readme_live.py), so a drift fails CI
either way."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k3lab.cli import main as cli
from k3lab.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
# the README and every page of the documentation site (docs/, built by nox -s docs)
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text()
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
README = PAGES["README.md"]
INVENTORIES = PAGES["docs/inventories.md"]  # the lab inventory walk-through
ENV_PREFIX = re.compile(r"^(?:[A-Z0-9_]+=\S+\s+)*")
# inline `k3lab ...` spans that are syntax, not a command line (placeholders, alternatives)
PLACEHOLDER = re.compile(r"\b(?:ID|SCENARIO|RUN|INV|FILE|DIR|A|B|N|ARGS|COMMAND|FAULT|NODE|PYTEST)\b|[\[\]|<>]|\.\.\.")


def _argv(code: str) -> list[str]:
    code = re.sub(r"\s*\[[^\]]*\]", "", ENV_PREFIX.sub("", code))  # env assignments and optional parts
    return shlex.split(code)[1:]


def block_commands(text: str | None = None) -> list[str]:
    """Every ``k3lab`` line of the shell blocks of ``text`` (default: every page), without its comment."""
    if text is None:
        return [c for page in PAGES.values() for c in block_commands(page)]
    out = []
    for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S):
        if m.group(1):  # yaml and the like
            continue
        for line in m.group(2).splitlines():
            code = line.split(" #")[0].strip()
            if re.match(ENV_PREFIX.pattern + r"k3lab\s", code + " ") and not code.startswith("k3lab:"):
                out.append(code)
    return out


def inline_commands() -> list[str]:
    spans = [" ".join(s.split()) for page in PAGES.values()
             for s in re.findall(r"`(k3lab\s[^`]+)`", page)]  # a span may wrap a line
    return sorted({s for s in spans if not PLACEHOLDER.search(s) and not _names_only(s)})


def _names_only(span: str) -> bool:
    """`k3lab render`, `k3lab baseline record`: a command's name in prose, not a command line."""
    argv = _argv(span)
    if {"-h", "--help", "--version"} & set(argv):
        return False
    try:
        cli.parser(argv[0]).parse_known_args(argv)
    except UsageError as exc:
        return "arguments are required" in str(exc)
    except SystemExit:
        return False
    return False


def needs_docker(argv: list[str]) -> bool:
    return cli.needs_docker(argv)  # the one table (k3lab.cli.main.NO_DOCKER)


ALL = list(dict.fromkeys(block_commands() + inline_commands()))
# runnable as written: no Docker, and no placeholder left once optional parts are dropped (runs/RUN is one)
STATIC = [c for c in ALL if not needs_docker(_argv(c)) and not PLACEHOLDER.search(" ".join(_argv(c)))]


def test_the_readme_shows_commands():
    assert len(block_commands(README)) >= 10 and len(block_commands()) >= 30 and len(STATIC) >= 12


@pytest.mark.parametrize("code", ALL)
def test_every_readme_command_parses(code):
    argv = _argv(code)
    if "--" in argv:
        argv = argv[:argv.index("--")]
    ap = cli.parser(next((a for a in argv if not a.startswith("-")), None))
    try:
        args, extras = ap.parse_known_args(argv)
    except SystemExit as exc:  # --version / --help exit 0 by design
        assert exc.code in (0, None), code
        return
    assert extras == [], f"README shows {code!r}; the CLI does not accept {extras}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """What the README's commands read: its walk-through inventory as lab.yaml, a policy, two static releases."""
    ws = tmp_path_factory.mktemp("readme")
    walk = re.search(r"## Writing a lab inventory.*?```yaml\n(.*?)```", INVENTORIES, re.S)
    assert walk, "docs/inventories.md lost its inventory walk-through"
    (ws / "lab.yaml").write_text(walk.group(1))
    assert cli.main(["policy", "init", "--out", str(ws / "lab-policy.yaml")]) == 0
    for name in ("good", "cand"):
        assert cli.main(["release", "--static-only", "-s", "a3_pd_1m", "--out", str(ws / "releases" / name)]) == 0
    return ws


def _fresh(workspace: Path, argv: list[str], tmp: Path) -> Path:
    """A copy of the workspace without the files the command writes (``--out X`` must not exist yet)."""
    shutil.copytree(workspace, tmp, dirs_exist_ok=True)
    for flag in ("--out",):
        if flag in argv:
            target = tmp / argv[argv.index(flag) + 1]
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    return tmp


@pytest.mark.parametrize("code", STATIC)
def test_every_docker_free_readme_command_runs_as_written(code, workspace, tmp_path):
    argv = _argv(code)
    cwd = _fresh(workspace, argv, tmp_path / "ws")
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", *argv], cwd=cwd, capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, (code, res.stderr[-2000:])
    assert "Traceback" not in res.stderr


def test_the_walkthrough_inventory_is_the_one_the_lab_commands_use(workspace):
    data = yaml.safe_load((workspace / "lab.yaml").read_text())
    assert data["scenario"] == "a3_pd_1m" and len(data["nodes"]) == 8
