"""The documentation site (docs/, mkdocs.yml) stays whole and true: every page is in the navigation, every
relative link lands, the README stays a short entry point, the environment page lists every variable the
kit reads with the defaults k3lab/settings.py has, the Benchmarks page is generated from ``nox -s bench`` output,
and, where MkDocs is installed (``nox -s docs``), the site builds with warnings as errors. The commands
the pages show are run by tests/unit/test_readme.py."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = [ROOT / "k3lab", ROOT / "conformance", ROOT / "launchers", ROOT / "conftest.py"]


def _hook():
    spec = importlib.util.spec_from_file_location("k3lab_docs_bench_hook", DOCS / "hooks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(nav) -> set[str]:
    out: set[str] = set()
    for item in nav:
        for value in (item.values() if isinstance(item, dict) else [item]):
            out |= _nav_pages(value) if isinstance(value, list) else {value}
    return out


def test_the_readme_is_an_entry_point_not_a_manual():
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    head = "\n".join(lines[:8])
    assert "nox -s a3_pd_1m" in head and "nox -s tests" in head  # the two commands come first
    assert readme.count("```") % 2 == 0, "an unclosed code block"
    assert {m for m in LINK.findall(readme) if m.startswith("docs/")}, "the README points to the docs"


def test_every_page_is_in_the_navigation_and_nothing_else():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert _nav_pages(config["nav"]) == set(PAGES)
    assert config["docs_dir"] == "docs"


def _links() -> list[tuple[str, str]]:
    out = []
    for page in [ROOT / "README.md", *(DOCS / name for name in PAGES)]:
        for target in LINK.findall(page.read_text()):
            if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                out.append((str(page.relative_to(ROOT)), target))
    return out


@pytest.mark.parametrize("page, target", _links())
def test_every_relative_link_lands(page, target):
    path = (ROOT / page).parent / target.split("#")[0]
    assert path.exists(), f"{page} links to {target}, which does not exist"
    anchor = target.partition("#")[2]
    if anchor and path.suffix == ".md":
        headings = re.findall(r"^#+\s+(.*)$", path.read_text(), re.M)
        slugs = {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}
        assert anchor in slugs, f"{page} links to {target}: no such heading (has {sorted(slugs)})"


def _variables_read() -> set[str]:
    names: set[str] = set()
    for root in CODE:
        for path in ([root] if root.is_file() else root.rglob("*.py")):
            names |= set(re.findall(r"\b(K3LAB_[A-Z0-9_]+)\b", path.read_text()))
    return names


def test_the_environment_page_lists_every_variable_the_kit_reads():
    page = (DOCS / "environment.md").read_text()
    documented = set(re.findall(r"`(K3LAB_[A-Z0-9_]+)`", page))
    read = _variables_read()
    assert read - documented == set(), "read by the kit, documented nowhere"
    assert documented - read - {"K3LAB_BENCH_JSON"} == set(), "documented, read by nothing"  # the docs hook's own
    assert "K3LAB_BENCH_JSON" in (DOCS / "hooks" / "bench.py").read_text()


def _rows_by_section(page: str) -> dict[str, list[str]]:
    """The table rows (lines starting with ``| ```) under each ``##`` heading of the page."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in page.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("| `"):
            out.setdefault(section, []).append(line)
    return out


def test_the_environment_page_is_the_settings_table():
    """Each setting of k3lab/settings.py has its row in its group's table with the default the code has;
    every variable the page's tables name is a setting (or one of the tests' own, read by no kit code)."""
    from k3lab import settings

    rows = _rows_by_section((DOCS / "environment.md").read_text())
    assert set(rows) == set(settings.GROUPS.values()), "one table per settings group, headed as GROUPS says"
    for s in settings.SETTINGS:
        heading = settings.GROUPS[s.group]
        row = next((r for r in rows[heading] if f"`{s.env}`" in r.split("|")[1]), None)
        assert row is not None, f"{s.env}: no row in the table {heading!r}"
        default = "unset" if s.shown == "unset" else s.shown
        assert default.lower() in row.lower(), f"{s.env}: the row does not give the code's default {s.shown!r}: {row}"
    named = {n for section in rows.values() for r in section for n in re.findall(r"`([A-Z][A-Z0-9_]+)`", r.split("|")[1])}
    assert named - set(settings.BY_ENV) == {"HYPOTHESIS_PROFILE", "K3LAB_BENCH_JSON"}, "documented, not a setting"


def test_every_k3lab_variable_the_kit_names_is_a_setting():
    from k3lab import settings

    names = set()
    for path in [*(ROOT / "k3lab").rglob("*.py"), *(ROOT / "conformance").rglob("*.py")]:
        names |= set(re.findall(r"\b(K3LAB_[A-Z0-9_]+)\b", path.read_text()))
    assert names - set(settings.BY_ENV) == set(), "read outside k3lab/settings.py's table"


BENCH = {"machine": {"python": "3.11.7", "platform": "Linux", "cpus": 2},
         "targets": {"render_preflight_all_twelve_s": "0.5 s", "diagnosis_17_nodes_100_mb_s": 2.0},
         "render_preflight": {"all_twelve_s_median": 0.0612},
         "cli_render_preflight": {"processes": 24, "best_wall_s": 3.9, "best_cpu_s": 3.384, "target_s": 5.0,
                                  "meets_target": True, "floor_import_pydantic_yaml_s": 2.1},
         "diagnosis": {"nodes": 17, "log_mb": 100, "best_s": 1.7, "best_cpu_s": 1.62, "judged_on": "wall",
                       "top": "kv-cache-too-small on d2", "meets_target": True}}


def test_the_benchmarks_page_is_generated_from_bench_output(tmp_path):
    hook = _hook()
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(BENCH))
    text = hook.section(path, "build/bench.json")
    assert "| render + preflight as 24 CLI processes | best 3.9 s wall, 3.384 s CPU" in text
    assert "| diagnosis, 17 nodes, 100 MB of logs |" in text and "kv-cache-too-small on d2" in text
    assert "No live entries" in text  # a static-only run says it has no scenario rows
    assert "`k3lab bench" in hook.section(tmp_path / "absent.json", "build/bench.json")  # how to make one
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not the JSON nox -s bench writes"):
        hook.section(path, "build/bench.json")


def test_the_benchmarks_page_quotes_no_figures_of_its_own():
    page = (DOCS / "benchmarks.md").read_text()
    assert _hook().MARKER in page
    assert not re.search(r"\b\d+(?:\.\d+)?\s?(?:s|ms|seconds)\b", page.replace(_hook().MARKER, ""))


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="MkDocs not installed (nox -s docs has it)")
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
                          "-f", str(ROOT / "mkdocs.yml")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "benchmarks.html").is_file()
