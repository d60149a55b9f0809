"""The kit's settings (k3lab/settings.py): read once at the CLI's entry, typed, checked (a bad value is
exit 2 naming the variable), changed in tests by ``settings.patched``, and printed by ``k3lab env``."""
from __future__ import annotations

import json
import math

import pytest

from k3lab import settings
from k3lab.cli import main as cli


def test_defaults_and_their_sources():
    s = settings.load({})
    assert s.answer_timeout_s == 20.0 and s.teardown_deadline_s == 90.0 and s.sim_load_s == 0.3
    assert s.api_key is None and s.sample_seed is None and s.run_dir is None
    assert s.sim_subnet == "172.28.0.0/24" and s.emu_dir.as_posix() == "/var/lib/k3lab-emu"
    assert set(s.sources.values()) == {settings.DEFAULT}


def test_values_from_the_environment_are_typed(tmp_path):
    s = settings.load({"K3LAB_ANSWER_TIMEOUT": "1.5", "K3LAB_RUNS": str(tmp_path), "K3LAB_SAMPLE_SEED": "7",
                       "K3SIM_HCCS_PING_S": "0", "K3LAB_API_KEY": "sk-x", "K3LAB_HOST_DEADLINE": ""})
    assert s.answer_timeout_s == 1.5 and s.runs == tmp_path and s.sample_seed == 7 and s.hccs_ping_s == 0.0
    assert s.api_key == "sk-x"
    assert s.sources["runs"] == settings.ENVIRONMENT and s.sources["host_deadline_s"] == settings.DEFAULT  # empty: unset


@pytest.mark.parametrize("name, raw, why", [
    ("K3LAB_ANSWER_TIMEOUT", "abc", "not a number"),
    ("K3LAB_ANSWER_TIMEOUT", "nan", "finite number > 0"),
    ("K3LAB_HOST_DEADLINE", "inf", "finite number > 0"),
    ("K3LAB_TEARDOWN_DEADLINE", "0", "finite number > 0"),
    ("K3LAB_HOST_STAGE_DEADLINE", "-5", "finite number > 0"),
    ("K3SIM_LOAD_SECONDS", "-0.1", "finite number >= 0"),
    ("K3LAB_SIM_SUBNET", "172.28.0.1/24", "not an IPv4 network"),
    ("K3LAB_SIM_DEVICE_SUBNET", "10.0.0.0/30", "too small"),
    ("K3LAB_SIM_SUBNET", "fd00::/64", "not an IPv4 network"),
    ("K3LAB_SAMPLE_SEED", "-1", "whole number"),
])
def test_a_bad_value_names_the_variable(name, raw, why):
    with pytest.raises(settings.SettingError, match=why) as exc:
        settings.load({name: raw})
    assert str(exc.value).startswith(f"environment variable {name}={raw!r}:") and exc.value.exit_code == 2


@pytest.mark.parametrize("argv", [["env"], ["render", "a3_pd_1m", "--out", "{tmp}/r"], ["status"]])
def test_the_cli_refuses_a_bad_setting_with_exit_2_and_one_line(argv, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("K3LAB_TEARDOWN_DEADLINE", "soon")
    assert cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "k3lab: environment variable K3LAB_TEARDOWN_DEADLINE='soon': not a number"


def test_an_invalid_sim_subnet_is_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("K3LAB_SIM_SUBNET", "172.28.0.0/33")
    assert cli.main(["render", "a3_pd_1m", "--out", str(tmp_path / "r")]) == 2
    assert "K3LAB_SIM_SUBNET" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_the_cli_reads_the_settings_once_at_its_entry(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path / "one"))
    assert cli.main(["env"]) == 0
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path / "two"))  # a change after the entry is not seen ...
    assert settings.current().runs == tmp_path / "one"
    capsys.readouterr()
    assert cli.main(["env", "--format", "json"]) == 0  # ... until the next entry reads them again
    assert json.loads(capsys.readouterr().out)["runs"] == str(tmp_path / "two")


def test_patched_holds_across_a_cli_entry_and_is_restored(capsys, tmp_path):
    before = settings.current()
    with settings.patched(runs=tmp_path, answer_timeout_s=1.0) as s:
        assert s.runs == tmp_path and s.sources["runs"] == settings.ENVIRONMENT
        assert cli.main(["env", "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["runs"] == str(tmp_path)
        assert settings.current().answer_timeout_s == 1.0
    assert settings.current().runs == before.runs and settings.current().answer_timeout_s == before.answer_timeout_s
    with pytest.raises(TypeError, match="no such setting"), settings.patched(answer_timeout=1.0):
        pass


def test_given_parses_only_the_kits_variables():
    assert settings.given({"K3LAB_API_KEY": "k", "PATH": "/bin", "K3SIM_LOAD_SECONDS": "1"}) == {
        "api_key": "k", "sim_load_s": 1.0}


def test_every_setting_is_documented_and_typed():
    fields = {f for f in settings.Settings.__dataclass_fields__} - {"sources"}
    assert {s.name for s in settings.SETTINGS} == fields and len(settings.BY_ENV) == len(settings.SETTINGS)
    for s in settings.SETTINGS:
        assert s.doc and s.shown and s.group in settings.GROUPS, s.env
        default = s.default()
        assert default is None or not isinstance(default, float) or math.isfinite(default)


def test_env_prints_every_setting_its_source_and_where_runs_go(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("K3LAB_RELEASES", str(tmp_path / "rel"))
    monkeypatch.setenv("K3LAB_API_KEY", "sk-never-printed")
    monkeypatch.delenv("K3LAB_RUNS", raising=False)
    assert cli.main(["env"]) == 0
    out = capsys.readouterr().out
    assert "sk-never-printed" not in out and "<redacted>  [environment]" in out
    assert all(s.env in out for s in settings.SETTINGS)
    assert f"runs go to {tmp_path / 'runs'}; releases to {tmp_path / 'rel'}" in out
    assert "K3LAB_ANSWER_TIMEOUT" in out and "20 s  [default 20 s]" in out
    assert cli.main(["env", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["variable"]: r for r in doc["settings"]}
    assert set(rows) == set(settings.BY_ENV) and rows["K3LAB_API_KEY"]["value"] == "<redacted>"
    assert rows["K3LAB_RELEASES"]["source"] == "environment" and rows["K3LAB_RUNS"]["source"] == "default"
    assert doc["runs"] == str(tmp_path / "runs")
