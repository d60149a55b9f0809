"""Accuracy through the entrypoint with AISBench, gated on the K3.1 Pro guide's §7 figures.

Runs only with ``--accuracy``; where AISBench runs is explained in :mod:`k3lab.conform.benchrun`.
AISBench and its datasets must already be installed there (``ais_bench/datasets/gpqa``,
``ais_bench/datasets/mmmu_pro``). The kit writes one model config,
``vllm_api_general_chat_k3lab.py``, next to AISBench's own ``vllm_api_general_chat.py`` (as the
vllm-ascend nightly harness does with its ``_custom`` copies) and runs
``ais_bench --models vllm_api_general_chat_k3lab --datasets <task>``. The score must lie within
``figure +/- --acc-tolerance`` points (default 1.0). The K3 guide gives no figures, so K3
scenarios skip.
"""
from __future__ import annotations

import shlex
from urllib.parse import urlsplit

import pytest

from k3lab.conform import benchparse
from k3lab.conform.benchrun import api_key_env, require_service_up, runner_for, watched
from k3lab.conform.evidence import check
from k3lab.conform.plugin import skip
from k3lab.model.apikey import redact

pytestmark = [pytest.mark.accuracy,
              pytest.mark.conformance(area="accuracy", must="The service MUST score within the tolerance of "
                                      "the guide's reported accuracy for its platform")]
KIND = "product"
MODELS_CONF = "vllm_api_general_chat_k3lab"
TIMEOUT_S = 6 * 3600  # GPQA and MMMU Pro with long reasoning outputs take hours even at batch 32
# The guide does not state its sampling settings; these follow its §6 request examples and
# vllm-ascend's nightly accuracy cases (batch 32, a reasoning-sized output budget).
MAX_OUT_LEN, BATCH_SIZE, TEMPERATURE, TOP_P = 65536, 32, 1.0, 0.95


def _tasks(config) -> dict[str, str]:
    extra = dict(opt.split("=", 1) for opt in config.getoption("--aisbench-task") if "=" in opt)
    return {**benchparse.AISBENCH_TASKS, **extra}


@pytest.mark.conformance(
    id="accuracy.test_accuracy_matches_guide",
    remedy="check the deployment against the guide (model revision, parsers, max-model-len); re-run with the guide's AISBench task and --acc-tolerance.")
@pytest.mark.parametrize("dataset", sorted(benchparse.AISBENCH_TASKS))
def test_accuracy_matches_guide(dataset, plan, state, run_dir, pytestconfig, record_property, http):
    figure = benchparse.guide_accuracy(plan.expect.served_name, plan.platform, dataset)
    if figure is None:
        skip("no-guide-figure", f"the guides give no {dataset} figure for {plan.expect.served_name} on {plan.platform}")
    if dataset == "mmmu_pro" and plan.expect.language_model_only:
        skip("language-model-only", "multimodal dataset on a language-model-only deployment")
    task = _tasks(pytestconfig)[dataset]
    runner = runner_for(pytestconfig, plan, state, run_dir)
    check(runner.which("ais_bench"), "ais_bench on the load-generator host", "ais_bench on PATH", "not found",
          runner.where, "AISBench is not installed where the kit runs it",
          "install AISBench (K3 guide §8.1) on the kit host, or pass --bench-node NODE", kind="environment")
    code, out = runner.run(["python3", "-c", "import ais_bench, os; print(os.path.dirname(ais_bench.__file__))"], 60)
    check(code == 0, "AISBench package location", "importable ais_bench", out.strip()[-300:], runner.where,
          "ais_bench is on PATH but not importable by python3", "install AISBench into the python3 environment",
          kind="environment")
    conf_dir = f"{out.strip().splitlines()[-1]}/benchmark/configs/models/vllm_api"
    url = urlsplit(plan.expect.entrypoint)
    runner.write(f"{conf_dir}/{MODELS_CONF}.py", benchparse.aisbench_model_config(
        url.hostname or "", url.port or 80, plan.expect.served_name, MAX_OUT_LEN, BATCH_SIZE, TEMPERATURE, TOP_P))
    argv = benchparse.aisbench_argv(MODELS_CONF, task)
    evidence = run_dir / "evidence" / "bench"
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / f"accuracy-{dataset}-argv.txt").write_text(f"# on {runner.where}\n{shlex.join(argv)}\n")
    code, out = runner.run(argv, TIMEOUT_S, env=api_key_env(), cwd=runner.workdir(f"accuracy-{dataset}"),
                           watch=watched(plan, http, pytestconfig))
    (evidence / f"accuracy-{dataset}-stdout.log").write_text(redact(out))
    require_service_up(code, out, f"AISBench {task} run", runner.where, f"accuracy-{dataset}-stdout.log")
    errors = benchparse.aisbench_errors(out)
    check(code == 0 and not errors, f"AISBench {task} run", "exit 0 and no ERROR lines",
          f"exit {code}; " + (" | ".join(errors[:3]) or "no ERROR lines"), runner.where,
          "AISBench failed: dataset not deployed, service unreachable, or requests rejected",
          f"read evidence/bench/accuracy-{dataset}-stdout.log; deploy the dataset under ais_bench/datasets")
    csv_path = benchparse.aisbench_result_path(out, "accuracy")
    check(csv_path, "AISBench summary CSV", "a 'write csv to' line", "none", runner.where,
          "the evaluation finished without writing its summary", f"read evidence/bench/accuracy-{dataset}-stdout.log",
          kind="environment")
    text = runner.read(csv_path)
    (evidence / f"accuracy-{dataset}.csv").write_text(redact(text))
    acc = benchparse.parse_aisbench_accuracy(text)
    record_property("accuracy.score", acc)
    tolerance = pytestconfig.getoption("--acc-tolerance")
    gate = benchparse.gate_accuracy(acc, figure, tolerance)
    check(gate.ok, f"{dataset} accuracy ({task})", f"{gate.rule} (guide §7, {plan.platform})", acc,
          plan.expect.entrypoint, "a different checkpoint, chat template, sampling or output budget than the "
          "guide's, a reasoning/parser misconfiguration, or a numerical regression",
          "check the model revision, parsers and --max-model-len against the guide, then inspect the wrong "
          "answers in AISBench's output folder")
