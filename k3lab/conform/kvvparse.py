"""The Kimi K3 evaluation toolkit (K3 guide §7): its commands, its outputs, and the gates; pure functions.

The toolkit ("kvv" environment) is built on Inspect AI, like its public ancestor MoonshotAI's
Kimi-Vendor-Verifier, whose ``eval.py`` calls ``inspect_ai.eval(..., fail_on_error=False)``:

* ``verify_params_k3.py ... --all`` checks the service's sampling-parameter handling in both modes and
  exits 0 only if every check passed; per mode it prints ``Mode: think (think-mode: opensource)``,
  ``✓ PASS: ...`` / ``❌ FAIL: ...`` lines and ``Result: ✓ ALL PASSED (11/11)``. The exit status decides;
  the lines say which checks failed.
* ``eval.py <task>`` writes one Inspect log per run into ``$INSPECT_LOG_DIR`` (``.eval``, a zip whose
  ``header.json`` holds everything but the samples, Zstandard-compressed in current Inspect; ``.json``
  with ``--log-format json``).
  ``python -m inspect_ai log dump --header-only LOG`` prints that header as JSON for either format.
  With ``fail_on_error=False`` a run whose samples errored still ends with status ``success`` and exit
  0: only ``results.completed_samples < results.total_samples`` shows it, and a run where every sample
  errored has no ``results`` at all.

The guide gives no accuracy figures: a score gates only against a lab baseline ``{task: score}`` in
Inspect's unit (a fraction, 0.89 as the Kimi Vendor Verifier's tables report it), within
``--acc-tolerance`` percentage points as :mod:`k3lab.conform.accuracy` uses it.
"""
from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

from k3lab.conform.benchparse import TOLERANCE, Gate
from k3lab.model import numbers

# K3 guide §7.1-§7.5: thinking mode, reasoning kept, effort max, temperature 1.0, top_p 1.0, one epoch.
THINK_MODE = "opensource"
MAX_CONNECTIONS = 16
TEMPERATURE, TOP_P = "1.0", "1.0"
VERIFY_SCRIPT = "verify_params_k3.py"
EVAL_SCRIPT = "eval.py"
# §7.5: the ToolCall validation runs on the service restarted with --max-model-len 286720.
TOOLCALL_MODEL_LEN = 286720


@dataclass(frozen=True)
class Task:
    name: str          # eval.py's benchmark argument
    title: str         # the guide's name
    max_tokens: int
    multimodal: bool
    dataset: str | None = None  # eval.py --dataset, relative to the toolkit directory
    min_model_len: int = 0


TASKS = {t.name: t for t in (
    Task("ocrbench", "OCRBench", 8192, True),
    Task("mmmu", "MMMU Pro Vision", 96000, True),
    Task("kimi_toolcall", "ToolCall/KVVV", 32768, False, "toolcall_benchmark/toolcall_thinking_samples.jsonl",
         TOOLCALL_MODEL_LEN),
)}


# ------------------------------------------------------------------------------------- commands


def verify_argv(python: str, model: str, base_url: str) -> list[str]:
    """§7.2's command without ``--api-key``: the script defaults it to $KIMI_API_KEY, which the kit
    puts in the environment so the key never lands in a saved command line."""
    return [python, VERIFY_SCRIPT, "--model", model, "--think-mode", THINK_MODE, "--base-url", base_url, "--all"]


def eval_argv(python: str, task: str, model: str) -> list[str]:
    """§7.3-§7.5's command for ``task``; ``model`` is the served name (eval.py gets ``opensource/<name>``)."""
    t = TASKS[task]
    argv = [python, EVAL_SCRIPT, t.name, "--model", f"{THINK_MODE}/{model}", "--max-tokens", str(t.max_tokens),
            "--thinking", "--think-mode", THINK_MODE, "--thinking-effort", "max", "--stream",
            "--max-connections", str(MAX_CONNECTIONS), "--temperature", TEMPERATURE, "--top-p", TOP_P]
    return argv + (["--dataset", t.dataset] if t.dataset else [])


def header_dump_argv(python: str, log_path: str) -> list[str]:
    """Inspect's own reader prints a log's header as JSON, whatever the log's format."""
    return [python, "-m", "inspect_ai", "log", "dump", "--header-only", log_path]


# ------------------------------------------------------------------------------- verify_params


_MODE = re.compile(r"^Mode:\s*(\S+)")
_RESULT = re.compile(r"^Result:\s*\S*\s*(ALL PASSED|SOME FAILED)\s*\((\d+)/(\d+)\)")
_FAIL = re.compile(r"^(?:❌\s*)?FAIL:\s*(.+)$")


@dataclass
class Verification:
    code: int
    modes: list[tuple[str, bool, int, int]] = field(default_factory=list)  # (mode, all passed, passed, total)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.failures and all(passed for _, passed, _, _ in self.modes)

    def describe(self) -> str:
        summary = "; ".join(f"{m}: {p}/{t} passed" for m, _, p, t in self.modes) or "no 'Result:' lines"
        text = f"exit {self.code}; {summary}"
        return text + (f"; failed: {' | '.join(self.failures[:4])}" if self.failures else "")


def parse_verify(code: int, out: str) -> Verification:
    """The checks' summary per mode and every failed check, from the script's console output."""
    res, mode = Verification(code), "?"
    for raw in out.splitlines():
        line = raw.strip()
        if m := _MODE.match(line):
            mode = m.group(1)
        elif m := _RESULT.match(line):
            res.modes.append((mode, m.group(1) == "ALL PASSED", int(m.group(2)), int(m.group(3))))
        elif m := _FAIL.match(line):
            res.failures.append(f"{mode}: {m.group(1)}")
    return res


# ---------------------------------------------------------------------------------- Inspect logs


HEADER_CAP = 64 << 20  # an Inspect header holds results and metadata, never the samples


def header_from_eval_zip(data: bytes) -> str:
    """``header.json`` of an ``.eval`` log (the zip Inspect writes by default). Current Inspect
    compresses its members with Zstandard, which ``zipfile`` reads only from Python 3.14 on: the check
    reads logs with ``inspect log dump`` instead; this serves older (deflated) logs and tests."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            info = z.getinfo("header.json")
            if info.file_size > HEADER_CAP:  # a zip bomb, or not a header
                raise ValueError(f"header.json of the .eval log is {info.file_size} bytes unpacked (cap {HEADER_CAP})")
            try:
                with z.open(info) as fh:
                    raw = fh.read(HEADER_CAP + 1)  # the stored size may lie: never unpack past the cap
                if len(raw) > HEADER_CAP:
                    raise ValueError(f"header.json of the .eval log unpacks past {HEADER_CAP} bytes")
                return raw.decode()
            except NotImplementedError:
                raise ValueError(f"header.json uses compression method {info.compress_type}, which this "
                                 "Python cannot read: use 'inspect log dump --header-only'") from None
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ValueError(f"not a finished Inspect .eval log: {exc}") from None


@dataclass(frozen=True)
class InspectRun:
    task: str
    model: str
    status: str                  # started | success | cancelled | error
    error: str | None            # the error that halted the eval, if any
    total_samples: int
    completed_samples: int       # samples that completed without error
    metrics: dict[str, float]    # "<scorer>/<metric>" -> value
    headline: tuple[str, float] | None  # ("<scorer>/<metric>", value): the score the run reports first
    has_results: bool

    @property
    def errored_samples(self) -> int:
        return self.total_samples - self.completed_samples


def _metrics(results: dict[str, Any]) -> dict[str, float]:
    out = {}
    for score in results.get("scores") or []:
        for key, metric in (score.get("metrics") or {}).items():
            value = numbers.finite_or_none(metric.get("value") if isinstance(metric, dict) else None)
            if value is not None:  # NaN, Infinity, true or a negative score is no score
                out[f"{score.get('name')}/{metric.get('name') or key}"] = value
    return out


def _headline(results: dict[str, Any], metrics: dict[str, float]) -> tuple[str, float] | None:
    """Inspect's own headline when it names one (newer logs), else the first scorer's accuracy, else
    its first metric."""
    head = results.get("headline") or {}
    candidates = [f"{head.get('score')}/{head.get('metric')}"] if head else []
    candidates += [k for k in metrics if k.endswith("/accuracy")] + list(metrics)
    for key in candidates:
        if key in metrics:
            return key, metrics[key]
    return None


def _samples(results: dict[str, Any], key: str) -> int:
    try:
        return numbers.count(results.get(key, 0), f"Inspect log results.{key}")
    except ValueError as exc:
        raise ValueError(f"not an Inspect log: {exc}") from None


def parse_log(text: str) -> InspectRun:
    """An Inspect log (``log dump`` output, a ``.json`` log, or an ``.eval`` log's ``header.json``)."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError(f"not an Inspect log: {text.strip()[:200]!r}") from None
    if not isinstance(doc, dict) or "status" not in doc or not isinstance(doc.get("eval"), dict):
        raise ValueError("not an Inspect log: no 'status' and 'eval'")
    results = doc.get("results") or {}
    metrics = _metrics(results)
    error = doc.get("error")
    return InspectRun(task=str(doc["eval"].get("task", "")), model=str(doc["eval"].get("model", "")),
                      status=str(doc["status"]), error=(error.get("message") if isinstance(error, dict) else None),
                      total_samples=_samples(results, "total_samples"),
                      completed_samples=_samples(results, "completed_samples"),
                      metrics=metrics, headline=_headline(results, metrics), has_results=bool(results))


def completion_problems(run: InspectRun) -> list[str]:
    """Why a run does not count as a finished evaluation: empty when it finished with every sample."""
    bad = []
    if run.status != "success":
        bad.append(f"status {run.status}" + (f": {run.error}" if run.error else ""))
    elif run.error:
        bad.append(f"error: {run.error}")
    if not run.has_results:
        bad.append("no results: no sample was scored")
    elif run.total_samples == 0:
        bad.append("0 samples: nothing was evaluated")
    elif run.completed_samples > run.total_samples:
        bad.append(f"{run.completed_samples} samples completed of {run.total_samples}: not a consistent log")
    elif run.errored_samples:
        bad.append(f"{run.errored_samples} of {run.total_samples} samples errored (not scored)")
    if run.has_results and run.headline is None:
        bad.append("no metric in the results")
    return bad


# ---------------------------------------------------------------------------------------- gates


def parse_baseline(text: str) -> dict[str, float]:
    """``{"ocrbench": 0.89, "mmmu": 0.82}``: the lab's scores per task, as Inspect reports them."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("the kvv baseline must be a JSON object {task: score}")
    out = {}
    for task, value in doc.items():
        if task == "source":  # where the baseline came from: kept in the file, not a score
            continue
        if task not in TASKS:
            raise ValueError(f"kvv baseline: unknown task {task!r}; known: {', '.join(TASKS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"kvv baseline {task}: {value!r} is not a score in [0, 1] "
                             "(give it as Inspect reports it, 0.89, not 89)")
        out[task] = float(value)
    return out


def gate_score(metric: str, value: float, baseline: float, tolerance: float = TOLERANCE) -> Gate:
    """Within ``tolerance`` percentage points of the baseline (both scores are fractions)."""
    off = round(abs(value - baseline) * 100, 9)  # points; rounded so 0.88 vs 0.89 is 1.0, not 1.0000000000000009
    ok = numbers.finite_or_none(value) is not None and off <= tolerance  # NaN is within nothing
    return Gate(metric, value, baseline, f"within {baseline:g} +/- {tolerance:g} points", ok)
