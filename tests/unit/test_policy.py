"""Gate policy loader: the default derives from the MUST statements; hostile files get clear errors."""
from __future__ import annotations

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
    assert a3.level("security.other", "security", "MUST")[0] == "warn"
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
    out.write_text(text.replace("    perf: block ", "    perf: blok "))
    capsys.readouterr()
    assert cli.main(["policy", "--check", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"defaults.areas.perf ({out}:15): " in err and "did you mean 'block'?" in err and "Traceback" not in err


def test_a_policy_file_has_the_caps_of_policy_text(tmp_path):
    # one loader: a file is held to the nesting cap of parse(), not to the inventories' deeper one
    deep = tmp_path / "deep.yaml"
    deep.write_bytes(b"a: " + b"[" * 25 + b"]" * 25 + b"\n")
    with pytest.raises(PolicyError, match="nested more than 20 levels deep"):
        policy.load(deep)
    with pytest.raises(PolicyError, match="not UTF-8"):  # a lone surrogate is not text, and no traceback
        parse("defaults: '\ud800'\n", "s.yaml")
