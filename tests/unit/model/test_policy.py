"""Gate policy loader: the default derives from the MUST statements; hostile files get clear errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.model import policy
from k3lab.model.policy import PolicyError, parse


def test_default_policy_loads_and_derives_from_must():
    eff = policy.load().for_scenario("a3_pd_pooled")
    assert eff.level("hccl.test_hccn_links_up", "hccl", "Every device link MUST be UP") == ("block", "MUST statement")
    assert eff.level("x.y", "x", "should be fine")[0] == "warn"
    assert eff.level("perf.test_bench_within_baseline", "perf", "MUST stay within")[0] == "warn"  # opt-in area
    assert {r.component for r in eff.versions} >= {"vllm_ascend", "memcache_hybrid"}
    assert eff.deviation_accepted("sim-network") and not eff.deviation_accepted("brand-new-deviation")
    assert eff.not_applicable_reason("models.test_proxy_answers", "no proxy in this scenario")
    # the cross-engine pool check's skip is not a reason to pass: it stays blocking when skipped
    assert eff.not_applicable_reason("external-cache.test_pool_hits_across_engines",
                                     "only one pooled producer exposes an API") is None


def test_scenario_section_merges_over_defaults():
    p = parse("""
schema: 1
defaults: {areas: {perf: warn}, checks: {"security.*": warn}, perf: {threshold: 0.9}}
scenarios:
  a3_pd: {areas: {perf: block}, checks: {"security.test_api_key_enforced": block}, perf: {threshold: 0.95}}
""")
    a3, other = p.for_scenario("a3_pd"), p.for_scenario("a5_pd")
    assert a3.level("perf.x", "perf", "")[0] == "block" and other.level("perf.x", "perf", "")[0] == "warn"
    # the longest matching glob wins
    assert a3.level("security.test_api_key_enforced", "security", "MUST")[0] == "block"
    assert a3.stated_level("security.other", "security", "MUST")[0] == "warn"
    assert a3.level("security.other", "security", "MUST")[0] == "block"  # a MUST check waive_must does not name
    assert (a3.threshold, other.threshold) == (0.95, 0.9)


@pytest.mark.parametrize("text, field, hint", [
    ("schema: 2\n", "schema", "Input should be 1"),
    ("scenarios: {a3_pdd: {}}\n", "scenarios", "did you mean 'a3_pd'"),
    ("defaults: {must: blok}\n", "defaults.must", "'block', 'warn' or 'ignore'"),
    ("defaults: {perf: {threshold: 3}}\n", "defaults.perf.threshold", "less than or equal to 1"),
    ("defaults: {accuracy: {tolerance: -1}}\n", "defaults.accuracy.tolerance", "greater than or equal to 0"),
    ("defaults: {colour: red}\n", "defaults.colour (p.yaml:1)", "unknown key (known: must,"),
    ("defaults: {acepted_findings: []}\n", "defaults.acepted_findings", "did you mean 'accepted_findings'?"),
    ("defaults: {versions: [{component: cuda}]}\n", "defaults.versions.0.component", "did you mean 'cann'?"),
    ("defaults:\n  must: blok\n", "defaults.must (p.yaml:2)", "did you mean 'block'?"),
    ("scenarios:\n  a3_pd:\n    perf: {treshold: 0.9}\n", "scenarios.a3_pd.perf.treshold (p.yaml:3)",
     "did you mean 'threshold'?"),
    ("defaults: {not_applicable: [{reason: '(unclosed'}]}\n", "defaults.not_applicable.0.reason",
     "not a regular expression"),
    ("defaults: {accepted_deviations: [{id: sim-x}]}\n", "defaults.accepted_deviations.0.reason",
     "required key is missing"),
    ("defaults: {accepted_findings: [{check: PF-X, reason: ' '}]}\n", "defaults.accepted_findings.0.reason",
     "a reason is mandatory"),
])
def test_invalid_fields_are_named(text, field, hint):
    with pytest.raises(PolicyError) as exc:
        parse(text, "p.yaml")
    msg = str(exc.value)
    assert msg.startswith("p.yaml: invalid policy") and field in msg and hint in msg, msg


@pytest.mark.parametrize("data, hint", [
    (b"a: &x [1]\nb: *x\n", "YAML aliases (*name) are not accepted"),
    (b"defaults: {}\ndefaults: {}\n", "duplicate key 'defaults'"),
    (b"- 1\n- 2\n", "a policy is a mapping"),
    (b"defaults: {must: [\n", "not valid YAML"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"x: !!python/object:os.system ls\n", "not valid YAML"),
    (b"a: " + b"[" * 60 + b"]" * 60 + b"\n", "nested more than 20 levels deep"),
    (b"# pad\n" * 50000, "byte limit"),
])
def test_hostile_files_give_clear_errors(data, hint):
    with pytest.raises(PolicyError) as exc:
        parse(data, "evil.yaml")
    assert hint in str(exc.value) and str(exc.value).startswith("evil.yaml"), str(exc.value)


def test_missing_and_oversized_files(tmp_path):
    with pytest.raises(PolicyError, match="no such policy file"):
        policy.load(tmp_path / "nope.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b" " * (policy.MAX_BYTES + 1))
    with pytest.raises(PolicyError, match="the limit is 262144 bytes"):
        policy.load(big)


def test_empty_policy_is_the_builtin_default():
    eff = parse("").for_scenario("a3_pd")
    assert eff.level("a.b", "a", "MUST")[0] == "block" and eff.threshold == 0.97 and eff.tolerance == 1.0


def test_schema_documents_fields():
    props = policy.schema()["$defs"]["ScenarioPolicy"]["properties"]
    assert {"must", "areas", "checks", "not_applicable", "versions", "accepted_deviations"} <= set(props)


def test_policy_command_exit_codes(tmp_path, capsys):
    from k3lab.cli.main import main

    assert main(["policy", "--check", str(policy.DEFAULT_PATH)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: {must: blok}\n")
    assert main(["policy", "--check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "defaults.must" in err and "Traceback" not in err
    assert main(["release", "--static-only", "--policy", str(bad)]) == 2
    assert main(["policy", "--schema"]) == 0 and '"ScenarioPolicy"' in capsys.readouterr().out


def test_policy_init_writes_a_commented_valid_example(tmp_path, capsys):
    from k3lab.cli import main as cli

    out = tmp_path / "lab-policy.yaml"
    assert cli.main(["policy", "init", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# A lab gate policy") and text.count("#") > 20  # commented, key by key
    assert cli.main(["policy", "--check", str(out)]) == 0
    assert cli.main(["policy", "init", "--out", str(out)]) == 2  # never overwritten without --force
    assert cli.main(["policy"]) == 2 and cli.main(["policy", "init"]) == 2
    assert "extends: default" in text
    out.write_text(text.replace("    external-cache: block", "    external-cache: blok")
                   .replace("areas: {external-cache: block}", "areas: {external-cache: blok}"))
    capsys.readouterr()
    assert cli.main(["policy", "--check", str(out)]) == 2
    err = capsys.readouterr().err
    line = next(i for i, ln in enumerate(out.read_text().splitlines(), 1) if "blok" in ln)
    assert f"scenarios.a3_pd_pooled.areas.external-cache ({out}:{line}): " in err and "did you mean 'block'?" in err
    assert "Traceback" not in err


FIXTURE_RUNS = sorted((Path(__file__).resolve().parents[3] / "fixtures" / "release").glob("run-*"))


def test_a_lab_policy_states_only_its_differences(tmp_path):
    """#37: a --policy file extends the default; a file that names one check keeps every default rule."""
    lab = tmp_path / "lab.yaml"
    lab.write_text("schema: 1\ndefaults: {checks: {'security.*': warn}, waive_must: [{check: security.test_api_key_enforced, "
                   "reason: closed network}]}\n")
    default, eff = policy.load().for_scenario("a3_pd_pooled"), policy.load(lab).for_scenario("a3_pd_pooled")
    assert eff.not_applicable == default.not_applicable and eff.accepted == default.accepted
    assert {r.component for r in eff.versions} == {r.component for r in default.versions}
    assert eff.level("security.test_api_key_enforced", "security", "MUST")[0] == "warn"
    assert default.level("security.test_api_key_enforced", "security", "MUST")[0] == "block"
    # the file's defaults override the default policy's scenario section, its own scenario section overrides both
    lab.write_text("schema: 1\ndefaults: {versions: [{component: memcache_hybrid, expect: any, level: warn}]}\n")
    rule = next(r for r in policy.load(lab).for_scenario("a3_pd_pooled").versions if r.component == "memcache_hybrid")
    assert (rule.expect, rule.level) == ("any", "warn")
    # extends: none is the old meaning: the file alone over the built-in must: block, other: warn
    lab.write_text("schema: 1\nextends: none\ndefaults: {checks: {'security.*': warn}, waive_must: [{check: "
                   "security.test_api_key_enforced, reason: closed network}]}\n")
    alone = policy.load(lab).for_scenario("a3_pd_pooled")
    assert alone.not_applicable == [] and alone.accepted == []


@pytest.mark.parametrize("run_dir", FIXTURE_RUNS, ids=[p.name for p in FIXTURE_RUNS])
def test_the_example_policy_keeps_every_fixture_runs_verdict(run_dir):
    """#37: the example `policy init` writes judged a PASS fixture run FAIL (the golden check's lab skip was
    no longer listed). Over the default, it gives every fixture run the default's verdict."""
    import json

    from k3lab.reports import gate

    sid = json.loads((run_dir / "plan.json").read_text())["scenario"]
    default = gate.evaluate_run(policy.load().for_scenario(sid), run_dir)
    example = gate.evaluate_run(policy.load(policy.EXAMPLE_PATH).for_scenario(sid), run_dir)
    assert (example.verdict, example.reasons) == (default.verdict, default.reasons)
    assert default.verdict == "PASS"  # the fixture runs are healthy ones


def test_fixture_runs_exist():
    assert FIXTURE_RUNS, "no fixture runs under fixtures/release/"


def test_policy_check_prints_the_effective_policy(capsys):
    import json

    from k3lab.cli.main import main

    assert main(["policy", "--check", str(policy.EXAMPLE_PATH), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["extends"] == "default"
    eff = doc["effective"]
    assert {"check": "golden.test_rendered_equals_golden", "id": "lab-inventory"} in eff["defaults"]["not_applicable"]
    assert eff["defaults"]["checks"] == {"security.*": "warn"} and eff["defaults"]["perf"] == {"threshold": 0.95}
    assert eff["scenarios"]["a3_pd_pooled"]["areas"]["external-cache"] == "block"
    assert main(["policy", "--check", str(policy.EXAMPLE_PATH)]) == 0
    out = capsys.readouterr().out
    assert "over the kit's default policy" in out and "lab-inventory" in out
    assert main(["policy", "--check", str(policy.DEFAULT_PATH)]) == 0 and "standing alone" in capsys.readouterr().out


def test_a_policy_file_has_the_caps_of_policy_text(tmp_path):
    # one loader: a file is held to the nesting cap of parse(), not to the inventories' deeper one
    deep = tmp_path / "deep.yaml"
    deep.write_bytes(b"a: " + b"[" * 25 + b"]" * 25 + b"\n")
    with pytest.raises(PolicyError, match="nested more than 20 levels deep"):
        policy.load(deep)
    with pytest.raises(PolicyError, match="not UTF-8"):  # a lone surrogate is not text, and no traceback
        parse("defaults: '\ud800'\n", "s.yaml")


@pytest.mark.parametrize("text, field", [
    ("defaults: {perf: {threshold: true}}\n", "defaults.perf.threshold (n.yaml:1)"),
    ("defaults: {perf: {threshold: '0.9'}}\n", "defaults.perf.threshold (n.yaml:1)"),
    ("defaults: {accuracy: {tolerance: yes}}\n", "defaults.accuracy.tolerance (n.yaml:1)"),
    ("scenarios:\n  a3_pd: {accuracy: {tolerance: '1.0'}}\n", "scenarios.a3_pd.accuracy.tolerance (n.yaml:2)"),
    ("schema: true\n", "schema (n.yaml:1)"),
])
def test_a_boolean_or_a_string_is_never_a_number(tmp_path, capsys, text, field):
    """Strict types (#31): YAML's true or '0.9' where a number belongs is refused, never read as 1.0 or 0.9."""
    with pytest.raises(PolicyError) as exc:
        parse(text, "n.yaml")
    assert field in str(exc.value), str(exc.value)
    from k3lab.cli.main import main

    path = tmp_path / "n.yaml"
    path.write_text(text)
    assert main(["policy", "--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert field.split(" (")[0] in err and str(path) in err and "Traceback" not in err
    assert parse("defaults: {perf: {threshold: 1}, accuracy: {tolerance: 2}}\n").for_scenario("a3_pd").tolerance == 2


def test_not_applicable_rules_name_reason_ids():
    eff = policy.load().for_scenario("k3_a3_mixed")
    assert all(na.id and na.reason is None for na in eff.not_applicable)  # the default policy: no regex left
    # the id decides, whatever the message says
    assert eff.not_applicable_reason("models.test_proxy_answers", "reworded freely", "no-proxy") == "no-proxy"
    assert eff.not_applicable_reason("models.test_proxy_answers", "no proxy in this scenario", "no-pool") is None
    assert eff.not_applicable_reason("npu.test_npu_smi_devices_healthy", "x", "no-proxy") is None  # not its check
    # a reason that means "could not check" is never listed: the check stays blocking
    assert eff.not_applicable_reason("external-cache.test_pool_hits_across_engines", "x", "pool-unproven") is None


def test_results_recorded_before_ids_keep_their_verdict():
    """A row without na_reason (a run before #31): its message gives the reason id it would have had."""
    eff = policy.load().for_scenario("k3_a3_mixed")
    assert eff.not_applicable_reason("external-cache.test_pool_stores_blocks", "no MemCache pool in this scenario") == "no-pool"
    assert eff.not_applicable_reason("perf.test_bench_requests_succeed", "perf checks not requested (pass --perf)") is None


def test_a_regex_rule_is_still_read_and_named_deprecated(capsys, tmp_path):
    p = parse("defaults: {not_applicable: [{check: 'hccl.*', reason: '^single node$'}]}\n", "old.yaml")
    eff = p.for_scenario("a3_pd")
    assert eff.not_applicable_reason("hccl.test_hccn_links_up", "single node") == "^single node$"
    assert eff.not_applicable_reason("hccl.test_hccn_links_up", "single node", "single-node") == "^single node$"
    assert policy.deprecated(p) and "defaults.not_applicable.0" in policy.deprecated(p)[0]
    assert not policy.deprecated(policy.load())
    for text, hint in [("defaults: {not_applicable: [{check: 'hccl.*'}]}\n", "give one of id"),
                       ("defaults: {not_applicable: [{id: single-node, reason: x}]}\n", "give one of id"),
                       ("defaults: {not_applicable: [{id: singel-node}]}\n", "did you mean 'single-node'?")]:
        with pytest.raises(PolicyError, match=hint):
            parse(text, "na.yaml")


NPU_MUST = ["npu.test_npu_smi_devices_healthy"]


@pytest.mark.parametrize("text", [
    "defaults: {must: ignore, other: ignore}\n",       # every check and every MUST ignored (#35)
    "defaults: {checks: {'*': ignore}}\n",
    "defaults: {areas: {npu: warn}}\n",
    "scenarios: {a3_pd: {checks: {'npu.*': warn}}}\n",
])
def test_policy_check_refuses_a_downgrade_of_must_checks_it_does_not_name(tmp_path, capsys, text):
    from k3lab.cli.main import main

    f = tmp_path / "lab.yaml"
    f.write_text("schema: 1\n" + text)
    assert main(["policy", "--check", str(f)]) == 2
    err = capsys.readouterr().err
    assert "waive_must" in err and "MUST check(s) not block" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_waiver_names_each_must_check_with_a_reason(tmp_path, capsys):
    from k3lab.cli.main import main
    from k3lab.model import checks

    npu = [c.id for c in checks.suite_checks() if c.area == "npu" and "MUST" in c.must]
    f = tmp_path / "lab.yaml"
    f.write_text("schema: 1\ndefaults:\n  checks: {'npu.*': warn}\n  waive_must:\n"
                 + "".join(f"    - {{check: {cid}, reason: no health alarms on this rack}}\n" for cid in npu))
    assert main(["policy", "--check", str(f)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    for bad, says in [("{check: 'npu.*', reason: x}", "never a glob"), ("{check: npu.test_npu_smi_devices_healthy}", "reason"),
                      ("{check: npu.test_npu_smi_devices_healthy, reason: ' '}", "reason in words")]:
        f.write_text(f"schema: 1\ndefaults: {{waive_must: [{bad}]}}\n")
        assert main(["policy", "--check", str(f)]) == 2
        assert says in capsys.readouterr().err
