"""Gate policy: which checks block a release, which only warn, and what a verdict means.

A policy is a YAML file (``k3lab/model/policies/default.yaml`` is the default; ``k3lab release
--policy FILE`` takes another). Schema, version 1::

    schema: 1
    description: free text
    extends: default               # a lab policy states only its differences from the default (none: stands alone)
    defaults:                      # applies to every scenario
      must: block                  # level of a check whose MUST statement says MUST
      other: warn                  # level of any other check
      areas: {perf: warn}          # level per conformance area (overrides must/other)
      checks: {"security.*": warn} # level per check id glob (overrides areas); ids: k3lab checks
      not_applicable:              # skip reason ids that mean "does not apply here" (k3lab checks lists them)
        - {check: "models.*", id: no-proxy}
      static: block                # render, preflight and golden of the release's static stage
      perf: {threshold: 0.97}     # numbers measured on the simulator never gate
      accuracy: {tolerance: 1.0}
      versions:                    # components read from the nodes (k3lab.launch.versions)
        - {component: vllm_ascend, expect: guide, level: block}   # or expect: "0.23.0" / ">=0.23.0,<0.23.1"
      accepted_deviations:         # plan.json deviations (id glob) a release accepts
        - {id: "sim-*", reason: "simulator-only substitution"}
      unaccepted_deviation: block  # level of a deviation not listed above
      accepted_findings:           # preflight warnings accepted on purpose (release --strict fails on others)
        - {check: PF-ADDR-PLACEHOLDER, nodes: [p0], reason: "why, in words (mandatory)"}
      waive_must:                  # every core MUST check a level above lets not block, by exact id (mandatory)
        - {check: security.test_api_key_enforced, reason: "why, in words (mandatory)"}
    scenarios:                     # per scenario id: the same keys, merged over defaults
      a3_pd_pooled: {checks: {...}}

Levels are ``block``, ``warn`` and ``ignore``. A policy file given with ``--policy`` extends the default
policy: the effective policy of a scenario is the default's defaults, the default's scenario section, the
file's defaults, then the file's scenario section, each merged over the ones before it (``extends: none``
makes a file stand alone, as the default itself does). Maps merge key by key, lists are concatenated
(a lab adds not-applicable reasons and accepted deviations; it cannot drop the default's), scalars replace. A check's level is the first match of: ``checks``
(longest glob first), ``areas``, then ``must``/``other`` from its conformance metadata.

Verdicts: **FAIL** when a blocking item failed; **INCOMPLETE** when nothing failed but a blocking
item could not be evaluated (skipped without a not-applicable reason, errored, environment
failure, missing version, no results); **PASS** otherwise. Warnings never change a verdict. Every
non-pass names its reasons.

A not-applicable rule names a reason id the suite records with the skip (``na_reason``,
:data:`k3lab.model.checks.NA_REASONS`). The older form ``{check, reason: REGEX}``, a pattern over the
skip message, is still read for one release (deprecated: ``k3lab policy --check`` names such rules);
results recorded before reasons had ids get theirs from the message (:func:`k3lab.model.checks.legacy_na`).

Loading is defensive: size cap, libyaml's safe loader, no anchors/aliases, no duplicate keys,
strict pydantic models (unknown keys are errors, and a boolean or a string is never a number); every
error names the file and the field.
"""
from __future__ import annotations

import fnmatch
import functools
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from k3lab import paths
from k3lab.errors import InputError
from k3lab.model import catalog, checks, hints, pins, validation
from k3lab.model.accept import AcceptedFinding

MAX_BYTES = 256 * 1024
MAX_DEPTH = 20
DEFAULT_PATH = paths.POLICIES / "default.yaml"
COMPONENTS = ("vllm", "vllm_ascend", "memcache_hybrid", "memfabric_hybrid", "cann", "driver", "npu_smi", "image")
Level = Literal["block", "warn", "ignore"]


class PolicyError(InputError, ValueError):
    """A policy file that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    # strict: YAML's true or "0.9" where a number belongs is an error, never 1.0 or 0.9
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


REGEX_TIMEOUT_S = 0.2  # one search's cap; a sane pattern takes microseconds
REGEX_BUDGET_S = 1.0  # every deprecated regex rule of one policy together, over every message it is searched in


class RegexBudget:
    """The time the deprecated regex rules of one policy may take in all, shared by its scenarios: a
    search is capped by what is left, a pattern that ran out of time once is never searched again, and
    once the budget is spent a regex rule matches nothing (a catastrophic policy costs about a second,
    never a cap per pattern and message)."""

    def __init__(self, seconds: float = REGEX_BUDGET_S) -> None:
        self.left = seconds
        self.slow: set[str] = set()

    def search(self, pattern: str, message: str) -> bool:
        import regex

        if pattern in self.slow or self.left <= 0:
            return False
        start = time.monotonic()
        try:
            return regex.search(pattern, message, timeout=min(REGEX_TIMEOUT_S, self.left)) is not None
        except TimeoutError:
            self.slow.add(pattern)
            return False
        finally:
            self.left -= time.monotonic() - start


NaId = Literal[tuple(checks.NA_REASONS)]  # type: ignore[valid-type]


class NotApplicable(_Strict):
    check: str = Field("*", description="check id glob")
    id: NaId | None = Field(None, description="not-applicable reason id the check records with its skip "  # type: ignore[valid-type]
                            "(k3lab checks lists them)")
    reason: str | None = Field(None, description="deprecated: regex searched in the skip message (use id)")

    @field_validator("reason")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        import regex

        if v is None:
            return v
        try:
            regex.compile(v)
        except regex.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _one(self) -> NotApplicable:
        if (self.id is None) == (self.reason is None):
            raise ValueError("give one of id (a not-applicable reason id) or reason (deprecated regex)")
        return self


class Perf(_Strict):
    threshold: float | None = Field(None, gt=0, le=1, description="throughput >= t x baseline, latency <= baseline/t")


class Accuracy(_Strict):
    tolerance: float | None = Field(None, ge=0, le=100, description="points either side of the guide's figure")


class VersionRule(_Strict):
    component: Literal[COMPONENTS]  # type: ignore[valid-type]
    expect: str = Field("guide", min_length=1, max_length=200,
                        description="'guide' (exactly the scenario's guide's pin), 'any', an exact version (0.23.0 "
                        "is not 0.23.0.post1), or a PEP 440 range such as '>=0.23.0,<0.23.1'")
    level: Level = "block"
    reason: str = ""

    @field_validator("expect")
    @classmethod
    def _expect(cls, v: str) -> str:
        return pins.check_expect(v)


class AcceptedDeviation(_Strict):
    id: str = Field(..., min_length=1, max_length=200, description="deviation id glob (plan.json deviations)")
    reason: str = Field(..., min_length=1, description="why the release accepts it")


class MustWaiver(_Strict):
    check: str = Field(..., min_length=1, max_length=200, description="the MUST check's id, exactly (k3lab checks); no glob")
    reason: str = Field(..., min_length=1, max_length=500, description="why this lab releases without it (mandatory)")

    @field_validator("reason")
    @classmethod
    def _said(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a waiver of a MUST check needs a reason in words")
        return v

    @field_validator("check")
    @classmethod
    def _known(cls, v: str) -> str:
        ids = [c.id for c in _suite()]
        if v not in ids:
            hint = hints.hint(v, ids) or "; k3lab checks lists the check ids"
            raise ValueError(f"no check {v!r} (a waiver names one check id exactly, never a glob){hint}")
        return v


class ScenarioPolicy(_Strict):
    must: Level | None = None
    other: Level | None = None
    areas: dict[str, Level] = {}
    checks: dict[str, Level] = {}
    not_applicable: list[NotApplicable] = []
    static: Level | None = None
    perf: Perf = Perf.model_validate({})  # all fields default (mypy does not see pydantic's Field defaults)
    accuracy: Accuracy = Accuracy.model_validate({})
    versions: list[VersionRule] = []
    accepted_deviations: list[AcceptedDeviation] = []
    unaccepted_deviation: Level | None = None
    accepted_findings: list[AcceptedFinding] = Field(
        default_factory=list, description="preflight warnings accepted on purpose (check id, nodes, mandatory reason): release "
        "--strict fails on the others, every report lists them")
    waive_must: list[MustWaiver] = Field(
        default_factory=list, description="MUST checks of the core suite this policy lets not block (level warn or "
        "ignore via must, areas or checks), each named with its reason; a downgrade not named here is refused")


class Policy(_Strict):
    schema_: Literal[1] = Field(1, alias="schema")
    description: str = ""
    extends: Literal["default", "none"] = Field(
        "default", description="default: this file states only its differences from the kit's default policy; "
        "none: it stands alone (what it leaves out is the built-in must: block, other: warn)")
    defaults: ScenarioPolicy = ScenarioPolicy()
    scenarios: dict[str, ScenarioPolicy] = {}
    _base: Policy | None = PrivateAttr(None)  # the policy this one extends (load() sets it)
    _regex: RegexBudget = PrivateAttr(default_factory=RegexBudget)  # shared by every scenario's Effective

    @field_validator("schema_", mode="before")
    @classmethod
    def _number(cls, v: object) -> object:
        if isinstance(v, bool):  # True == 1 to Literal[1]: a boolean is never the schema number
            raise ValueError(f"expected the number 1, got the boolean {str(v).lower()}")
        return v

    @field_validator("scenarios")
    @classmethod
    def _known(cls, v: dict[str, ScenarioPolicy]) -> dict[str, ScenarioPolicy]:
        for sid in v:
            if sid not in catalog.SCENARIOS:
                hint = hints.hint(sid, catalog.SCENARIOS) or f"; known: {', '.join(catalog.SCENARIOS)}"
                raise ValueError(f"unknown scenario {sid!r}{hint}")
        return v

    @property
    def base(self) -> Policy | None:
        return self._base

    def over(self, base: Policy | None) -> Policy:
        """This policy extending ``base`` (when it says ``extends: default``)."""
        if self.extends == "default":
            self._base = base
        return self

    def layers(self, sid: str) -> list[ScenarioPolicy | None]:
        """What is merged for scenario ``sid`` ("": no scenario's section), first to last: the base's layers,
        then this file's."""
        own = [self.defaults, self.scenarios.get(sid) if sid else None]
        return (self._base.layers(sid) if self._base is not None else []) + own

    def for_scenario(self, sid: str) -> Effective:
        eff = Effective.merge(sid, *self.layers(sid))
        eff.regex = self._regex
        return eff


class Effective:
    """The defaults merged with one scenario's section; answers 'what level has this item'."""

    BUILTIN = {"must": "block", "other": "warn", "static": "block", "unaccepted_deviation": "block"}

    def __init__(self, sid: str, data: dict[str, Any]):
        self.scenario = sid
        self.must: str = data["must"]
        self.other: str = data["other"]
        self.static: str = data["static"]
        self.unaccepted_deviation: str = data["unaccepted_deviation"]
        self.areas: dict[str, str] = data["areas"]
        self.checks: dict[str, str] = data["checks"]
        self.not_applicable: list[NotApplicable] = data["not_applicable"]
        self.threshold: float = data["threshold"]
        self.tolerance: float = data["tolerance"]
        self.versions: list[VersionRule] = data["versions"]
        self.accepted: list[AcceptedDeviation] = data["accepted_deviations"]
        self.accepted_findings: list[AcceptedFinding] = data["accepted_findings"]
        self.waive_must: list[MustWaiver] = data["waive_must"]
        self.waived: dict[str, str] = {w.check: w.reason for w in self.waive_must}
        self.regex = RegexBudget()  # Policy.for_scenario shares its policy's

    @classmethod
    def merge(cls, sid: str, *given: ScenarioPolicy | None) -> Effective:
        layers = [layer for layer in given if layer is not None]
        data: dict[str, Any] = dict(cls.BUILTIN, areas={}, checks={}, not_applicable=[], versions=[],
                                    accepted_deviations=[], accepted_findings=[], waive_must=[], threshold=0.97,
                                    tolerance=1.0)
        for layer in layers:
            for key in ("must", "other", "static", "unaccepted_deviation"):
                if getattr(layer, key) is not None:
                    data[key] = getattr(layer, key)
            data["areas"] = {**data["areas"], **layer.areas}
            data["checks"] = {**data["checks"], **layer.checks}
            for key in ("not_applicable", "versions", "accepted_deviations", "accepted_findings", "waive_must"):
                data[key] = data[key] + list(getattr(layer, key))
            if layer.perf.threshold is not None:
                data["threshold"] = layer.perf.threshold
            if layer.accuracy.tolerance is not None:
                data["tolerance"] = layer.accuracy.tolerance
        # a later version rule for the same component replaces the earlier one
        data["versions"] = list({r.component: r for r in data["versions"]}.values())
        return cls(sid, data)

    def as_dict(self) -> dict[str, Any]:
        """The merged values, in the file's shape (``k3lab policy --check`` shows them)."""
        dump = lambda rows: [r.model_dump(exclude_none=True, exclude_defaults=True) for r in rows]  # noqa: E731
        return {"must": self.must, "other": self.other, "static": self.static,
                "unaccepted_deviation": self.unaccepted_deviation, "areas": self.areas, "checks": self.checks,
                "not_applicable": dump(self.not_applicable), "perf": {"threshold": self.threshold},
                "accuracy": {"tolerance": self.tolerance}, "versions": dump(self.versions),
                "accepted_deviations": dump(self.accepted), "accepted_findings": dump(self.accepted_findings),
                "waive_must": dump(self.waive_must)}

    def stated_level(self, check_id: str, area: str, must: str) -> tuple[str, str]:
        """(level, why) for one conformance check as the policy's must/other, areas and checks state it."""
        for pattern in sorted(self.checks, key=len, reverse=True):
            if fnmatch.fnmatchcase(check_id, pattern):
                return self.checks[pattern], f"policy checks[{pattern!r}]"
        if area in self.areas:
            return self.areas[area], f"policy areas[{area!r}]"
        if "MUST" in must:
            return self.must, "MUST statement"
        return self.other, "no MUST statement"

    def level(self, check_id: str, area: str, must: str) -> tuple[str, str]:
        """(level, why) for one conformance check. A core MUST check the policy lets not block keeps blocking
        unless ``waive_must`` names it with a reason (#35: a glob or ``must: ignore`` never waives by omission)."""
        level, why = self.stated_level(check_id, area, must)
        if level == "block" or not must_gated(area, must):
            return level, why
        if check_id in self.waived:
            return level, f"{why}; MUST waived: {self.waived[check_id]}"
        return "block", f"MUST statement ({why} says {level}, but waive_must does not name it)"

    def waiver(self, check_id: str, area: str, must: str) -> str | None:
        """The reason a MUST check does not block here (named in ``waive_must``), else None."""
        level, _ = self.stated_level(check_id, area, must)
        return self.waived[check_id] if level != "block" and must_gated(area, must) and check_id in self.waived else None

    def unwaived(self) -> list[str]:
        """Core MUST checks this policy lets not block without naming them in ``waive_must``: each 'id (why)'."""
        out = []
        for c in _suite():
            level, why = self.stated_level(c.id, c.area, c.must)
            if level != "block" and must_gated(c.area, c.must) and c.id not in self.waived:
                out.append(f"{c.id} ({why}: {level})")
        return out

    def not_applicable_reason(self, check_id: str, message: str, na_reason: str | None = None) -> str | None:
        """The listed rule a skip matches: its reason id (``na_reason``, recorded by the suite; from the
        message for results recorded before ids) against the rules' ids, or, for a deprecated regex rule,
        its pattern searched in the message within the policy's regex budget (:class:`RegexBudget`): a
        catastrophic pattern counts as no match, never as a hang."""
        reason = na_reason or checks.legacy_na(message)
        for na in self.not_applicable:
            if not fnmatch.fnmatchcase(check_id, na.check):
                continue
            if na.id is not None:
                if na.id == reason:
                    return na.id
                continue
            if self.regex.search(na.reason or "", message):
                return na.reason
        return None

    def deviation_accepted(self, dev_id: str) -> str | None:
        for acc in self.accepted:
            if fnmatch.fnmatchcase(dev_id, acc.id):
                return acc.reason
        return None


@functools.lru_cache(maxsize=1)
def _suite() -> tuple[checks.CheckInfo, ...]:
    """The live suite's checks (read once: the files are parsed, never imported)."""
    return tuple(checks.suite_checks())


def opt_in_areas() -> frozenset[str]:
    """Areas of the opt-in modules (conformance/*.py not named test_*: --perf, --accuracy, ...): run only on
    request, their level is the policy's choice (the default warns) and needs no waiver."""
    return _opt_in_areas()


@functools.lru_cache(maxsize=1)
def _opt_in_areas() -> frozenset[str]:
    return frozenset(c.area for c in _suite() if not c.source.split("::")[0].split("/")[-1].startswith("test_"))


def must_gated(area: str, must: str) -> bool:
    """A check whose MUST blocks unless a policy waives it by name: a core suite check stating MUST."""
    return "MUST" in must and area not in opt_in_areas()


def waiver_problems(pol: Policy) -> list[str]:
    """Per scenario section (and defaults), the core MUST checks the policy downgrades without naming them."""
    from k3lab.model import catalog as _catalog

    out: list[str] = []
    seen: set[str] = set()
    for sid in ["", *_catalog.SCENARIOS]:
        for item in pol.for_scenario(sid).unwaived():
            if item not in seen:
                seen.add(item)
                out.append(item if not sid else f"{item} in scenario {sid}")
    return out


# --------------------------------------------------------------------------------------- loading


def parse(text: str | bytes, source: str = "<policy>") -> Policy:
    """A policy from YAML text, read as inventories are (k3lab.model.safeyaml: no aliases, no duplicate
    keys, bounded nesting) and its errors told as theirs (field, FILE:LINE, did-you-mean)."""
    from k3lab.model import safeyaml

    try:
        data, lines = safeyaml.loads(safeyaml.decode(text, source, "policy", MAX_BYTES), source, max_depth=MAX_DEPTH)
    except InputError as exc:
        raise PolicyError(str(exc)) from None
    return _validate(data, source, lines)


def _validate(data: object, source: str, lines=None) -> Policy:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping (schema, defaults, scenarios), not {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{source}: invalid policy\n" + validation.describe(exc, data, source, Policy, lines)) from None


def load(path: str | Path | None = None) -> Policy:
    """The default policy, or the file at ``path`` over it (unless the file says ``extends: none``)."""
    from k3lab.model import safeyaml

    path = Path(path) if path else DEFAULT_PATH
    try:
        data, lines = safeyaml.load(path, "policy", MAX_BYTES, MAX_DEPTH)
    except InputError as exc:
        raise PolicyError(str(exc)) from None
    pol = _validate(data, str(path), lines)
    if pol.extends == "default" and path.resolve() != DEFAULT_PATH.resolve():
        pol.over(load())
    problems = waiver_problems(pol)
    if problems:  # a downgrade of MUST checks that names none of them: refused, never a PASS by omission
        raise PolicyError(f"{path}: the policy lets {len(problems)} MUST check(s) not block without naming them: "
                          f"{'; '.join(problems[:6])}{' ...' if len(problems) > 6 else ''}. Name each in waive_must "
                          "with its reason ({check: ID, reason: WHY}), or keep it blocking")
    return pol


def schema() -> dict[str, Any]:
    return Policy.model_json_schema(by_alias=True)


EXAMPLE_PATH = paths.POLICIES / "example.yaml"


def cmd_policy(args) -> int:
    """``k3lab policy init --out FILE`` / ``--check FILE`` / ``--schema``."""
    import json

    from k3lab import formats, outputs
    from k3lab.errors import UsageError

    given = [name for name, on in (("init", args.action == "init"), ("--check", args.check),
                                   ("--schema", args.schema)) if on]
    if len(given) != 1:
        raise UsageError("k3lab policy: give one of init --out FILE, --check FILE, --schema"
                         + (f" (got {' and '.join(given)})" if given else ""))
    if args.action == "init":
        if not args.out:
            raise UsageError("k3lab policy init: give --out FILE (the policy file to write)")
        path = outputs.check_file(args.out, args.force, what="policy file")
        text = EXAMPLE_PATH.read_text()
        parse(text, "the example policy")  # never write an invalid file
        outputs.write_file(path, text)
        formats.say(f"wrote {path}: a commented gate policy over the kit's default (it states only its differences); "
              f"edit it, then k3lab policy --check {path} shows the effective policy")
        return 0
    if args.schema:
        formats.emit(args, schema(), lambda doc: print(json.dumps(doc, indent=2)))
        return 0
    pol = load(args.check)  # a PolicyError exits 2 with the file, line and field named
    doc = {"file": str(args.check), "valid": True, "schema": pol.schema_, "scenarios": sorted(pol.scenarios),
           "extends": pol.extends if pol.base is not None else "none", "effective": effective(pol),
           "deprecated": deprecated(pol)}
    formats.emit(args, doc, _print_check)
    return 0


def effective(pol: Policy) -> dict[str, Any]:
    """What the gate applies: ``defaults`` (every scenario without a section), and per scenario that has a
    section here or in the base, only the keys whose value differs from ``defaults``."""
    base = Effective.merge("", *pol.layers("")).as_dict()
    sids = set(pol.scenarios) | set(pol.base.scenarios if pol.base is not None else {})
    scenarios = {}
    for sid in sorted(sids):
        eff = pol.for_scenario(sid).as_dict()
        scenarios[sid] = {k: v for k, v in eff.items() if v != base[k]}
    return {"defaults": base, "scenarios": scenarios}


def deprecated(pol: Policy) -> list[str]:
    """Where a policy still uses a form that goes away: not-applicable rules that match skip text by regex."""
    sections = [("defaults", pol.defaults), *((f"scenarios.{sid}", sec) for sid, sec in pol.scenarios.items())]
    return [f"{where}.not_applicable.{k}: reason {na.reason!r} is a regex over skip text (deprecated); name the "
            f"reason id instead (id: ...; k3lab checks lists them)"
            for where, sec in sections for k, na in enumerate(sec.not_applicable) if na.reason is not None]


def _print_check(d: dict[str, Any]) -> None:
    import yaml

    from k3lab import formats

    over = " over the kit's default policy" if d["extends"] == "default" else ", standing alone"
    formats.say(f"{d['file']}: valid policy (schema {d['schema']}, {len(d['scenarios'])} scenario section(s)){over}")
    for note in d["deprecated"]:
        formats.say(f"  note: {note}")
    print("effective policy (per scenario: what differs from defaults):")
    formats.say(yaml.safe_dump(d["effective"], sort_keys=False, width=120).rstrip())
