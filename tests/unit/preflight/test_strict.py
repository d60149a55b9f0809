"""--strict and accepted findings: warnings fail unless accepted by id and node with a reason."""
from __future__ import annotations

import json

from k3lab import errors
from k3lab.cli import main as cli
from k3lab.model import accept
from k3lab.preflight.checks import Finding
from k3lab.tools import release


def _init(tmp_path, capsys, sid="a3_pd"):
    inv = tmp_path / "lab.yaml"
    assert cli.main(["init", sid, "--out", str(inv)]) == 0
    capsys.readouterr()
    return inv


def _preflight(capsys, *argv):
    code = cli.main(["preflight", *argv])
    return code, capsys.readouterr()


def test_strict_fails_on_the_init_inventorys_placeholders_and_passes_once_replaced(tmp_path, capsys):
    inv = _init(tmp_path, capsys)
    code, out = _preflight(capsys, "a3_pd", "-i", str(inv))
    assert code == errors.OK and "8 warning(s)" in out.out  # warnings alone never fail without --strict
    code, out = _preflight(capsys, "a3_pd", "-i", str(inv), "--strict")
    assert code == errors.CHECKS_FAILED and out.out.rstrip().endswith("FAIL")
    inv.write_text(inv.read_text().replace("192.0.2.", "10.20.0."))
    code, out = _preflight(capsys, "a3_pd", "-i", str(inv), "--strict")
    assert code == errors.OK and "0 warning(s), 0 accepted" in out.out


def test_accepted_with_a_reason_passes_strict_and_the_report_lists_it(tmp_path, capsys):
    inv = _init(tmp_path, capsys)
    inv.write_text(inv.read_text() + "accept:\n  - check: PF-ADDR-PLACEHOLDER\n    nodes: [p0, p1, p2, p3]\n"
                   "    reason: rehearsal on the documentation network\n")
    code, out = _preflight(capsys, "a3_pd", "-i", str(inv), "--strict", "--format", "json")
    doc = json.loads(out.out)
    assert code == errors.CHECKS_FAILED and doc["verdict"] == "FAIL"  # d0-d3 are not accepted
    assert sorted(f["nodes"][0] for f in doc["findings"]) == ["d0", "d1", "d2", "d3"]
    assert [a["nodes"] for a in doc["accepted"]] == [["p0"], ["p1"], ["p2"], ["p3"]]
    assert {a["reason"] for a in doc["accepted"]} == {"rehearsal on the documentation network"}
    assert all("Remedy:" not in f["message"] and f["remedy"] for f in doc["findings"] + doc["accepted"])
    inv.write_text(inv.read_text().replace("nodes: [p0, p1, p2, p3]", "nodes: []"))
    code, out = _preflight(capsys, "a3_pd", "-i", str(inv), "--strict")
    assert code == errors.OK
    assert out.out.count("ACCEPTED PF-ADDR-PLACEHOLDER") == 8 and "(accepted: rehearsal on the documentation" in out.out


def test_an_acceptance_needs_a_reason_a_known_id_and_known_nodes(tmp_path, capsys):
    inv = _init(tmp_path, capsys)
    base = inv.read_text()
    for entry, said in [("{check: PF-ADDR-PLACEHOLDER}", "accept.0.reason"),
                        ("{check: PF-ADDR-PLACEHOLDER, reason: '  '}", "a reason is mandatory"),
                        ("{check: PF-ADDR-PLACEHOLDR, reason: x}", "did you mean 'PF-ADDR-PLACEHOLDER'"),
                        ("{check: PF-ADDR-PLACEHOLDER, nodes: [p9], reason: x}", "'p9' is not a node")]:
        inv.write_text(base + f"accept:\n  - {entry}\n")
        code, out = _preflight(capsys, "a3_pd", "-i", str(inv), "--strict")
        assert code == errors.USAGE and said in out.err, (entry, out.err)
        assert "Traceback" not in out.err


def test_an_error_cannot_be_accepted():
    acc = accept.AcceptedFinding.model_validate({"check": "PF-X", "reason": "we know"})
    err = Finding("PF-X", "error", "broken", ("p0",))
    outcome = accept.apply([err], [acc])
    assert outcome.errors == [err] and outcome.accepted == [] and outcome.ignored == [acc]
    assert outcome.failed(strict=False)


def test_release_static_stage_strict_honours_the_policys_acceptances(tmp_path, capsys):
    inv = _init(tmp_path, capsys)
    rows = release.static_rows("a3_pd", str(inv), {}, "lab", strict=True)
    assert next(r for r in rows if r["id"] == "static.preflight")["status"] == "fail"
    acc = accept.AcceptedFinding.model_validate({"check": "PF-ADDR-PLACEHOLDER", "reason": "staging lab"})
    rows = release.static_rows("a3_pd", str(inv), {}, "lab", strict=True, accepted=[acc])
    row = next(r for r in rows if r["id"] == "static.preflight")
    assert row["status"] == "pass" and len(row["accepted"]) == 8 and "accepted PF-ADDR-PLACEHOLDER [p0]: staging lab" \
        in row["message"]


def test_the_run_summary_lists_accepted_findings(tmp_path):
    from k3lab.reports import report

    doc = {"checks": 25, "errors": 0, "warnings": 0, "strict": True, "findings": [],
           "accepted": [{"check": "PF-ADDR-PLACEHOLDER", "nodes": ["p0"], "message": "p0: placeholder",
                         "reason": "staging lab"}]}
    (tmp_path / "preflight.json").write_text(json.dumps(doc))
    text = report.summary_md(report.load(tmp_path))
    assert "## Preflight" in text and "ACCEPTED PF-ADDR-PLACEHOLDER [p0]: p0: placeholder Reason: staging lab" in text
