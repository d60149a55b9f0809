"""Accuracy runs of the K3 guide §7 with the Kimi K3 evaluation toolkit (Inspect AI, "kvv" environment).

Runs only with ``--kvv``; where the toolkit runs is explained in :mod:`k3lab.conform.benchrun`.
The toolkit must already be installed there (§7.1: ``pip install -e .`` in a Python >= 3.12
environment) with its datasets: ``--kvv-toolkit DIR`` is ``<KIMI_K3_EVALUATION_TOOLKIT>`` and
``--kvv-python`` that environment's interpreter (default ``python``: the kit cannot ``conda activate``).

As §7.2 says, ``verify_params_k3.py --all`` runs first and every parameter check must pass before
any benchmark runs. Then ``eval.py ocrbench | mmmu | kimi_toolcall`` with the guide's exact flags, each
with its own ``INSPECT_LOG_DIR``; the kit reads the log that run wrote (the newest ``.eval``/``.json``
there, through ``python -m inspect_ai log dump --header-only``). Each run must end with status
``success`` and every sample completed; the toolkit sets ``fail_on_error=False``, so errored samples
(§7.6: invalid model output is recorded, not retried) show only in the log. The guide gives no
accuracy figures: the score is recorded, and gated only against ``--kvv-baseline FILE``
(``{"ocrbench": 0.89, ...}``, fractions as Inspect reports them) within ``--acc-tolerance`` points.
OCRBench and MMMU Pro skip on a language-model-only deployment; ToolCall skips unless the service has
the §7.5 restart's ``--max-model-len 286720`` (scenario ``k3_a3_mixed_toolcall``). A run cut short is resumed by hand
with ``inspect eval-retry`` on the saved log (§7.6).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from k3lab.conform import kvvparse
from k3lab.conform.benchrun import (
    HostRunner,
    Runner,
    ServiceWatch,
    api_key_env,
    require_service_up,
    runner_for,
    watched,
)
from k3lab.conform.evidence import check, fail
from k3lab.conform.plugin import skip
from k3lab.model.apikey import redact

pytestmark = [pytest.mark.kvv,
              pytest.mark.conformance(area="kvv-accuracy", must="The service MUST pass the K3 evaluation "
                                      "toolkit's parameter checks and complete its benchmarks without errored "
                                      "samples, within the tolerance of the lab's baseline where one is given")]
KIND = "product"
VERIFY_TIMEOUT_S = 1800  # 22 short requests per mode; generous for a service still warming up
# One epoch at 16 connections with thinking at effort max: hours (MMMU Pro's 96000-token budget most).
TIMEOUT_S = {"ocrbench": 8 * 3600, "mmmu": 24 * 3600, "kimi_toolcall": 12 * 3600}
PREFLIGHT = ("import os, sys, inspect_ai; missing = [f for f in sys.argv[1:] if not os.path.isfile(f)]; "
             "print(sys.version.split()[0], inspect_ai.__version__, *missing); sys.exit(3 if missing else 0)")


@dataclass
class Toolkit:
    runner: Runner
    python: str
    directory: str
    evidence: Path
    base_url: str

    def env(self, log_dir: str | None = None) -> dict[str, str]:
        """§7.2's variables; the key (or the guide's ``EMPTY``) only ever travels in the environment."""
        keys = api_key_env()
        env = {**keys, "KIMI_API_KEY": keys.get("K3LAB_API_KEY", "EMPTY"), "KIMI_BASE_URL": self.base_url}
        return env | ({"INSPECT_LOG_DIR": log_dir} if log_dir else {})

    def run(self, name: str, argv: list[str], timeout: float, log_dir: str | None = None,
            watch: ServiceWatch | None = None) -> tuple[int, str]:
        """Run in the toolkit directory; the command and its output are saved as evidence."""
        (self.evidence / f"kvv-{name}-argv.txt").write_text(f"# on {self.runner.where}, in {self.directory}\n"
                                                            f"{shlex.join(argv)}\n")
        code, out = self.runner.run(argv, timeout, env=self.env(log_dir), cwd=self.directory, watch=watch)
        (self.evidence / f"kvv-{name}-stdout.log").write_text(redact(out))
        return code, out


@pytest.fixture(scope="module")
def toolkit(plan, state, run_dir, pytestconfig) -> Toolkit:
    directory = pytestconfig.getoption("--kvv-toolkit")
    if not directory:
        fail("K3 evaluation toolkit directory", "--kvv-toolkit DIR", "not given", "pytest options",
             "the kit does not know where <KIMI_K3_EVALUATION_TOOLKIT> is installed",
             "install the toolkit as the K3 guide §7.1 says and pass --kvv-toolkit DIR (and --kvv-python)",
             kind="environment")
    evidence = run_dir / "evidence" / "bench"
    evidence.mkdir(parents=True, exist_ok=True)
    runner = runner_for(pytestconfig, plan, state, run_dir)
    python = pytestconfig.getoption("--kvv-python")
    if isinstance(runner, HostRunner):  # the scripts run in the toolkit directory: relative paths would move
        directory = str(Path(directory).absolute())
        python = str(Path(python).absolute()) if "/" in python else python
    kit = Toolkit(runner, python, directory, evidence, f"{plan.expect.entrypoint}/v1")
    code, out = kit.run("preflight", [kit.python, "-c", PREFLIGHT, kvvparse.VERIFY_SCRIPT, kvvparse.EVAL_SCRIPT], 120)
    check(code == 0, "K3 evaluation toolkit", f"{kvvparse.VERIFY_SCRIPT} and {kvvparse.EVAL_SCRIPT} in {directory}, "
          "importable inspect_ai", out.strip()[-300:] or f"exit {code}", kit.runner.where,
          "the toolkit or its kvv environment is not installed where the kit runs it",
          "install it as K3 guide §7.1 says (Python >= 3.12, pip install -e .); pass --kvv-python with that "
          "environment's python, or --bench-node NODE", kind="environment")
    return kit


@pytest.fixture(scope="module")
def verified(toolkit, plan) -> kvvparse.Verification:
    """§7.2: all parameter checks must pass before running the benchmarks (a failure here fails them all)."""
    argv = kvvparse.verify_argv(toolkit.python, plan.expect.served_name, toolkit.base_url)
    code, out = toolkit.run("verify-params", argv, VERIFY_TIMEOUT_S)
    result = kvvparse.parse_verify(code, out)
    check(result.ok, "K3 toolkit parameter checks (verify_params_k3.py --all)",
          "exit 0, every check passed in both modes", result.describe(), toolkit.base_url,
          "the service accepts sampling values it must reject or rejects the defaults (chat template, "
          "generation config or proxy rewriting parameters), or it is unreachable",
          "read evidence/bench/kvv-verify-params-stdout.log; compare the engines' sampling and chat-template "
          "options with the guide, then rerun")
    return result


@pytest.mark.conformance(
    id="kvv-accuracy.test_service_passes_the_toolkit_parameter_checks",
    remedy="serve with the parameters the K3 evaluation toolkit verifies (the guide's §7 settings).")
def test_service_passes_the_toolkit_parameter_checks(verified, record_property):
    record_property("kvv.verify_params", verified.describe())


def _read_log(toolkit: Toolkit, log_dir: str, name: str) -> kvvparse.InspectRun:
    path = toolkit.runner.newest(log_dir, ".eval") or toolkit.runner.newest(log_dir, ".json")
    if not path:
        fail("Inspect log of the run", f"a .eval or .json log in {log_dir}", "none", toolkit.runner.where,
             "eval.py ended before Inspect opened its log (bad arguments, missing dataset, import error)",
             f"read evidence/bench/kvv-{name}-stdout.log")
    code, text = toolkit.runner.run(kvvparse.header_dump_argv(toolkit.python, path), 600)
    (toolkit.evidence / f"kvv-{name}-log-header.json").write_text(redact(text))
    try:
        run = kvvparse.parse_log(text) if code == 0 else None
    except ValueError:
        run = None
    if run is None:
        fail("Inspect log header", f"'inspect log dump --header-only' of {path}", text.strip()[-300:],
             toolkit.runner.where, "the log is unreadable or from an incompatible Inspect version",
             f"open it with 'inspect view start --log-dir {log_dir}'", kind="environment")
    return run


@pytest.mark.conformance(
    id="kvv-accuracy.test_toolkit_benchmark_completes",
    remedy="read the toolkit's errored samples in evidence/; fix the service errors they show, then re-run --kvv.")
@pytest.mark.parametrize("name", list(kvvparse.TASKS))
def test_toolkit_benchmark_completes(name, toolkit, verified, plan, pytestconfig, record_property, http):
    task = kvvparse.TASKS[name]
    if task.multimodal and plan.expect.language_model_only:
        skip("language-model-only", "multimodal dataset on a language-model-only deployment")
    if plan.expect.max_model_len < task.min_model_len:
        # §7.5: only ToolCall needs more; a literal message, so the policy's not-applicable reason can match it
        skip("toolcall-restart", "ToolCall/KVVV runs on the §7.5 restart (--max-model-len 286720, scenario k3_a3_mixed_toolcall)")
    log_dir = toolkit.runner.workdir(f"kvv-{name}")
    # Inspect retries network errors with backoff: a service that died would hold the run for hours
    code, out = toolkit.run(name, kvvparse.eval_argv(toolkit.python, name, plan.expect.served_name),
                            TIMEOUT_S[name], log_dir, watched(plan, http, pytestconfig))
    require_service_up(code, out, f"{task.title} evaluation ({name})", toolkit.base_url, f"kvv-{name}-stdout.log",
                       f"resume with 'inspect eval-retry <log in {log_dir}>' (K3 guide §7.6)")
    run = _read_log(toolkit, log_dir, name)
    if run.headline:
        record_property(f"kvv.{name}.score", f"{run.headline[0]}={run.headline[1]:g}")
    problems = kvvparse.completion_problems(run)
    check(code == 0 and not problems, f"{task.title} evaluation ({name})",
          "exit 0, status success, every sample completed and scored",
          f"exit {code}; " + ("; ".join(problems) or "log complete"), toolkit.base_url,
          "requests failed or timed out, the model's output was invalid (recorded, not retried), or the run "
          "was cut short", f"read evidence/bench/kvv-{name}-stdout.log and the samples with "
          f"'inspect view start --log-dir {log_dir}'; resume with 'inspect eval-retry <log>' (K3 guide §7.6)")
    _gate_baseline(name, run, pytestconfig, toolkit)


def _gate_baseline(name: str, run: kvvparse.InspectRun, pytestconfig, toolkit: Toolkit) -> None:
    given = pytestconfig.getoption("--kvv-baseline")
    if not given:
        return  # the guide gives no figures: the score is recorded, completion is the gate
    path = Path(given)
    if not path.is_file():
        fail("kvv baseline file", "an existing JSON file {task: score}", "missing", str(path),
             "wrong --kvv-baseline path", "pass the path of a baseline JSON (see conformance/kvv.py)", kind="kit")
    try:
        baseline = kvvparse.parse_baseline(path.read_text())
    except ValueError as exc:
        fail("kvv baseline file", "{task: score} with scores in [0, 1]", str(exc), str(path),
             "the baseline file is malformed", "fix the file, e.g. {\"ocrbench\": 0.89, \"mmmu\": 0.82}", kind="kit")
    if name not in baseline or run.headline is None:
        return
    metric, value = run.headline
    gate = kvvparse.gate_score(metric, value, baseline[name], pytestconfig.getoption("--acc-tolerance"))
    check(gate.ok, f"{name} score ({metric})", f"{gate.rule} (lab baseline {path.name})", f"{value:g}",
          toolkit.base_url, "a different checkpoint, chat template, sampling or output budget than the baseline "
          "run's, a reasoning/tool parser misconfiguration, or a numerical regression",
          "compare the model revision, parsers and engine options with the baseline run's, then read the wrong "
          "answers with 'inspect view'")
