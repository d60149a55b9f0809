"""Triage on real logs it was not written from (#32): tests/fixtures/triage_corpus.

Every excerpt there is verbatim from the public thread corpus.yaml names, labelled with the cause the thread
states, "unknown" (a cause the catalogue does not hold) or "healthy". The split is fixed by the thread
(sha1(url) % 5 == 0 is held out) so nobody can move a hard case out of the held-out part; signatures are
written from dev/ only. heldout2/ (``split: heldout2``) is a second held-out set, collected in one go before
the signature changes of #32's second pass and never used to write one: the honest measure once heldout/'s
misses are known. heldout3/ (``split: heldout3``) is a third, collected in one go from broad searches without
reading the signatures, after the third pass, to measure only; heldout4/ a fourth, collected during the fourth
pass by helpers who read neither the catalogue nor the engine; heldout5/ a fifth, the same way during the fifth;
heldout6/ to heldout12/ the same way, one before each pass of the sixth and seventh sessions (see the floors below).
A case is right when the top cause is the stated one; an unknown log is right when no cause is named and the first error is shown; a healthy log is right when
nothing is flagged. A wrong cause named with confidence (a root cause, not a symptom such as "an engine died,
see the lines before it", on an unknown or healthy log or instead of the stated cause) is the worst outcome and
is counted apart.

``python tests/unit/diagnosis/test_triage_corpus.py`` prints the per-cause table and the misses of each part.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from k3lab.diagnosis import catalogue
from k3lab.diagnosis.engine import LIKELY, diagnose

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"
INDEX: dict[str, dict[str, str]] = yaml.safe_load((CORPUS / "corpus.yaml").read_text())
SEALED = ("heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8", "heldout9", "heldout10", "heldout11", "heldout12", "heldout13", "heldout14", "heldout15", "heldout16", "heldout17")


@dataclass
class Outcome:
    name: str
    want: str
    got: str  # the top cause id, "first-error" (no cause, an error line shown) or "nothing"
    tier: str = ""  # the top cause's tier: "cause" (high confidence), "symptom" or "likely" (by a first error's meaning)

    @property
    def right(self) -> bool:
        if self.want == "healthy":
            return self.got == "nothing"
        if self.want == "unknown":
            return self.got == "first-error"
        return self.got == self.want

    @property
    def confident_wrong(self) -> bool:
        """A root cause named that is not the one: worse than saying "no known cause"."""
        return not self.right and self.tier == "cause"


def _triage(path: Path) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(tmp) / "n0"
        node.mkdir()
        shutil.copy(path, node / "engine.log")
        d = diagnose(tmp)
    if d.top:
        return d.top.cause.id, d.top.cause.tier
    if d.likely:
        return d.likely[0].cause.id, LIKELY
    return ("first-error" if d.first_errors else "nothing"), ""


def score(split: str) -> list[Outcome]:
    return [Outcome(name, meta["cause"], *_triage(CORPUS / name))
            for name, meta in sorted(INDEX.items()) if name.startswith(f"{split}/")]


def _failures(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.want not in ("healthy", "unknown")]


def table(split: str, outcomes: list[Outcome]) -> list[str]:
    by: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by[o.want].append(o)
    fails = _failures(outcomes)
    lines = [f"{split}: {len(outcomes)} excerpts, {len({INDEX[o.name]['url'] for o in outcomes})} threads; "
             f"top-1 on stated causes {sum(o.right for o in fails)}/{len(fails)}; "
             f"all right {sum(o.right for o in outcomes)}/{len(outcomes)}; "
             f"confident wrong {sum(o.confident_wrong for o in outcomes)}, "
             f"a symptom instead {sum(not o.right and o.tier == 'symptom' for o in outcomes)}; "
             f"right by meaning {sum(o.right and o.tier == LIKELY for o in outcomes)}, "
             f"wrong by meaning {sum(not o.right and o.tier == LIKELY for o in outcomes)}"]
    lines += [f"  {cause:28} {sum(o.right for o in rows)}/{len(rows)}" for cause, rows in sorted(by.items())]
    lines += [f"  miss {o.name}: got {o.got}{f' ({o.tier})' if o.tier in ('symptom', LIKELY) else ''}"
              for o in outcomes if not o.right]
    return lines


def test_every_excerpt_is_sourced_labelled_and_in_its_fixed_split():
    ids = set(catalogue.load().ids) | {"unknown", "healthy"}
    files = {p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("*/*.log")}
    assert files == set(INDEX), "corpus.yaml and the files differ"
    for name, meta in INDEX.items():
        assert meta["url"].startswith("https://"), name
        assert meta["cause"] in ids, f"{name}: {meta['cause']} is no catalogue cause"
        if meta.get("split") in SEALED:  # sealed held-out sets: chosen by date, not by hash
            assert name.startswith(f"{meta['split']}/"), f"{name}: marked {meta['split']} but not in {meta['split']}/"
            continue
        held = int(hashlib.sha1(meta["url"].encode()).hexdigest(), 16) % 5 == 0
        assert name.startswith("heldout/" if held else "dev/"), f"{name}: its thread belongs to the other split"
    failures = [m for m in INDEX.values() if m["cause"] != "healthy"]
    # issue #32: >= 150 real failure excerpts from >= 50 threads, >= 20 healthy start-up logs
    assert len(failures) >= 150 and len({m["url"] for m in failures}) >= 50
    assert len(INDEX) - len(failures) >= 20


# floors a little under what was measured (#32, second pass): dev 109/111 (vllm-ascend#5468's driver mismatch shows
# only as an INFO watchdog line, now its first error; vllm#2418's excerpt stops before its message); held-out
# 25/31 = 81%; heldout2, the sealed second held-out set, 14/22 = 64%, with two known wrong answers it is allowed:
# sglang#3781's healthy start-up says "The following error message ... can be ignored" (shown as a first error)
# and flash-linear-attention-npu#149 says "NPU out of memory" for a kernel bug (named npu-oom). One failed log is
# still silent: held-out gpustack#5014, whose raylet warning matches no signature and holds no error-like word.
# A regression fails. Third pass (#32: error codes decide causes, 32 more dev excerpts): held-out 26/31 = 84%,
# heldout2 16/22 = 73%, the same known wrong answers and silent log; floors raised to those minus 0.03.
# heldout3, the third sealed set (collected after that pass): 2/8 = 25%, floor 0.22; its 8 wrong answers (3 named
# with confidence: a benign vllm._C warning as driver-cann-mismatch, two ModuleNotFoundErrors as library-missing)
# and 2 silent logs (vllm-ascend#4404's 'Available memory: 0', mindocr#586's WARNING-only GetNext timeout).
# Fourth pass, written from dev only: 13 new causes (40 dev excerpts) and the existing causes generalised from
# upstream strings (42 more dev excerpts, 14 of them healthy). heldout3's Ascend/pytorch#16, labelled unknown when
# the catalogue had no such cause, is now named cuda-path-on-npu ('Torch not compiled with CUDA enabled' after
# Tensor.to(3)): arguably right, counted wrong because labels are never moved after scoring; its cap is 9.
# The fourth pass also names two old held-out 'unknown' logs, counted wrong (labels are not moved after scoring),
# cap 2: Mooncake#386 as mooncake-metadata-server ('Unable to find metadata storage plugin etcd': the thread's
# cause, a build without etcd, is that cause's own example) and verl#332 as npu-device-occupied (EJ0001, whose
# documented meaning is that cause; the thread states none).
# heldout4, the fourth sealed set (three collectors who read neither the catalogue nor the engine, during that
# pass; the 7 threads a signature helper also took into dev were dropped before it was scored): 17/26 = 65%,
# floor 0.62. Its 4 wrong answers: a healthy start-up's Gloo loopback warnings named gloo-loopback, numpy 2 with
# CANN 8.2.1 named driver-cann-mismatch, two Mooncake excerpts of INFO lines only (no line fails); 4 silent logs,
# all excerpts without a failing line (INFO lines only, or a traceback cut before its exception).
# The fourth pass's warning rule makes heldout2's llm-d#352 silent (cap 1): NCCL reports its /dev/shm failure at
# WARN level ('NCCL WARN Error while creating shared memory segment ... No space left on device') and the excerpt
# then shows only vLLM's INFO 'Parent process exited, terminating worker', which is no failure event the kit knows.
# After the fifth pass (recall across projects, the warning rule, the mismatch causes) heldout4 is 17/26 with no
# wrong answer on a healthy log and 2 on unknown ones (its two INFO-only Mooncake excerpts), 4 silent; its misses
# were described to one helper of that pass, so it no longer measures it. heldout5, the fifth sealed set (two
# collectors during that pass, 2 threads dropped that a helper also took into dev): 3/4, 0 wrong, 0 silent.
# dev silent 1 (sig5b): Paddle-Lite#10514 shows only a [W] CANN-version warning and no failing line; a cause only
# warned about on a log that shows no failure is no root cause (docs/diagnosis.md)
# Sixth session of #32: five sealed sets, each collected during a pass by helpers who read neither the catalogue nor
# the engine (only cause ids and titles), threads already in the corpus off limits, excerpts without their failing
# line or not verbatim dropped before scoring; each scored ONCE with the code of the pass it followed, then used to
# write the next pass (so its figure below is no longer a measure). First scores: heldout6 after pass 1 (upstream
# wordings across releases) 21/33 = 64%; heldout7 after pass 2 (the same meaning in other components' words) 23/30
# = 77% (vllm-ascend#8393's note was seen by a helper of that pass); heldout8 after pass 3 (context that keeps a
# wording precise) 23/31 = 74%; heldout9 after pass 4 (wrappers' wordings) 13/19 = 68%; heldout10 (small: the
# search budget ran out) after pass 4 and again after the meaning layer 8/11 = 73% both times. 0 healthy flagged on
# each. Known wrong answers now: heldout6's EI0008 (CANN versions differ between ranks, labelled unknown) named
# driver-cann-mismatch by its documented code; heldout7's gpustack#2236 ('Free memory on device ... less than
# desired' on a GPU, labelled unknown; dev labels the same line npu-oom on kvcached logs); heldout9's ragflow#7345
# (out of memory at start, unknown) named host-oom and vllm#37133 ('unrecognized arguments: serve ...', unknown)
# named cli-argument-unknown; heldout10's exo#827 (aiohttp's bind failure, port-in-use) named api-port-in-use.
# heldout3's cap falls from 9 to 6 (pass 3 stopped naming an MTE line and a CANN module import as causes).
# Seventh session: two more sealed sets the same way. heldout11 (100 excerpts from 100 threads, six collectors, four
# dropped before scoring: an excerpt cut before its Gloo line, a manual page whose other revision is in heldout2, a
# thread two collectors took, whose lines end at a bare socket.timeout) scored after pass 5 (wrappers' and other
# components' wordings from their source, the meaning layer read further and for 46 of 54 causes): 41/55 = 75%.
# heldout12 (43 excerpts, five collectors; one dropped, its caret line written by length) after pass 6 (heldout11's
# misses by meaning): 12/20 = 60%. 0 healthy flagged on either. Both were then read for passes 6 and 7. Known wrong
# answers now: heldout11's vllm#23192 and #25837 ('Free memory on device ... less than desired' on GPUs, labelled
# unknown by the collectors' device rule) named npu-oom and open-reid#97 ('Torch not compiled with CUDA enabled' on a
# CPU host) named cuda-path-on-npu: on the Ascend nodes the kit triages, both are those causes; heldout12's
# sglang#14747 (an operator missing from libopapi.so, labelled library-missing) named graph-capture-failed, where it
# shows; ollama#15049 (its only failing line a WARN 'model request too large for system', unknown) is silent.
# Eighth session: heldout13 (81 excerpts from 81 threads, eight collectors in disjoint scopes, one dropped before
# scoring: its stored page ends before the exception line) scored once after pass 8 (the meaning layer's reach by
# leave-cause-out, 334 -> 399 of 518): 19/32 = 59%, and the first healthy log ever flagged: a serverless vLLM
# worker whose only event-like line was vLLM's INFO advice "If you are running out of memory, consider ..." (now no
# event). It was then read for pass 9: 30/32. Known wrong answers now: bitsandbytes PR#1615 (no binary for this
# CUDA, unknown) named library-missing by meaning (its first error is a .so not found), docker model-runner#596 (a
# host port already bound, unknown) named port-in-use, torchvision#9085 (an op missing on a CPU-only torch,
# unknown) named package-version-mismatch: each is what its line says; vllm-ascend#12113 (207005 inside ACL graph
# capture, labelled npu-oom) is named graph-capture-failed, as heldout6/7 label the same lines.
# heldout14 (81 excerpts from 80 threads, seven collectors, none dropped) scored once after pass 9: 29/45 = 64%,
# 0/18 healthy flagged, 3 failed logs silent (a bare 'Exception: ...', a NumPy 2 banner with no exception line,
# uv's resolver report); 9 of its 16 misses were Apple MLX loaders' wordings. Then read for pass 10: 38/45, none
# silent. Known wrong answers now: koboldcpp#2032 and lmstudio model-catalog#55 (llama.cpp's 'unknown model
# architecture', labelled unknown by their collector) named model-arch-unsupported, which is what the line says;
# text-generation-webui#3996 (its Gradio server's bind, labelled api-port-in-use) named port-in-use: the same
# werkzeug/http.server frames are heldout10's port-in-use.
# Pass 17b read glog's level letter on its own line (an I or W line below another was seen as an error, an E line as
# the line above it): heldout4's Mooncake#1207 (ten glog W lines 'Failed to register memory', no error line) is now
# what a warning-only log is, silent (18/26 -> 17/26: floor 0.66 -> 0.65, silent cap 4 -> 5), and heldout3's
# checkpoint-engine#1 shows its E lines as first errors instead of naming npu-network-port-down from the W line
# 'port not active' (5/8 -> 4/8, above its floor).
# Ninth session: heldout15 (60 excerpts from 60 threads; eleven collectors in two rounds brought 61, scope declared before
# collection: only the stacks the kit triages -- vLLM and its plugins, vllm-ascend, SGLang, Mooncake, LMCache, NIXL,
# MindIE, torch/torch_npu/CANN/HCCL/NCCL, Ray, transformers as vLLM loads it, RL trainers and orchestrators that start
# engines; no llama.cpp/MLX/Ollama/web UIs. One dropped before scoring: hicann/hccl's EI0019 page, 5 of whose 6 lines
# are heldout10's HCCL manual example) scored once after pass 17 (the meaning layer reads frames under a prefix,
# continued messages, exception bodies; glog's level letter on its own line): 10/18 = 56% on stated causes, 13/13
# healthy clean, 21/29 unknown shown as first errors, 1 failed log silent (dynamo#1519: NIXL_ERR_NOT_FOUND in
# frames with no error line of its own).
# heldout16 (36 excerpts from 36 threads; five collectors brought 37, the same scope, one dropped before scoring: a
# thread heldout15 already holds) scored once after pass 18 (heldout15's misses): 5/7 = 71% on stated causes, 1 of 11
# healthy flagged (sglang#3792's "Ignore import error when loading ...", a line that ignores an error), 14/18
# unknown as first errors, 1 failed log silent (gpustack#5509: a `ray status` block, no error line).
# Pass 18 (heldout15's misses: Ray among the packages that must match, GPTQ/AWQ packed tensors a loader has no
# parameter for, a transport's failed handshake with its peer, a dotted exception class) took heldout15 to 13/18
# and none silent; pass 19 (a line that says it ignores an error is none) cleared heldout16's healthy log. Known
# wrong answers on heldout15's unknown logs, each what its line says: pixtral-12b-d22's missing config.json
# (model-files-missing), sglang#14644's 401 on a gated repo (hf-hub-unreachable), sglang#29646's missing
# libnvrtc (library-missing), vllm#37408's "Please pass trust_remote_code=True" (a vLLM bug), vllm#4383's /dev/shm
# (shm-too-small), vllm-ascend#3843's 'Available memory: 0' (kv-cache-insufficient); heldout16's: vllm#12451 (a
# torch_xla nightly against torch's, labelled package-version-mismatch) named platform-not-detected from 'Failed to
# infer device type'; gpustack#5509 (a `ray status` block with pending placement groups) stays silent.
# heldout17 (29 excerpts from 29 threads; five collectors brought 30, one thread taken twice) scored once after pass
# 19: 2/6 = 33% on stated causes (each of the four misses flagged doubtful by its collector: a GPU's "CUDA error: out
# of memory" labelled npu-oom, a Gaudi 1 whose lines show only "Engine process failed to start", GLM-4.1V's
# "limit_mm_per_prompt is only supported for multimodal models" labelled model-arch-unsupported by a maintainer's
# hint, Moonlight's "unrecognized arguments: trust_remote_code=True" named cli-argument-unknown), 12/12 healthy
# clean, 6/11 unknown as first errors, 3 silent. Pass 20 (a bare exception class, "[rank0]: NotImplementedError",
# is an error line) made HabanaAI/vllm-fork#1557 show its first error; still silent: llm-d#187 (glog W lines only)
# and vllm-omni#2902 (its ChatTemplateResolutionError is logged before "Starting vLLM API server", which came up).
ACCURACY = [("dev", 0.95, 0, 1), ("heldout", 0.84, 2, 0), ("heldout2", 0.78, 0, 0),
            ("heldout3", 0.47, 6, 1), ("heldout4", 0.65, 2, 5), ("heldout5", 0.97, 0, 0),
            ("heldout6", 0.87, 1, 0), ("heldout7", 0.90, 1, 0), ("heldout8", 0.97, 0, 0),
            ("heldout9", 0.86, 2, 0), ("heldout10", 0.78, 1, 0), ("heldout11", 0.88, 3, 0),
            ("heldout12", 0.77, 2, 1), ("heldout13", 0.90, 3, 0), ("heldout14", 0.82, 3, 0),
            ("heldout15", 0.72, 7, 0), ("heldout16", 0.71, 5, 1),
            ("heldout17", 0.33, 5, 2)]
SCORED = {a[0] for a in ACCURACY}  # a sealed split not in ACCURACY has not been scored yet: nothing may read it


@pytest.mark.parametrize("split, top1, known_wrong, known_silent", ACCURACY)
def test_accuracy_on_real_logs(split, top1, known_wrong, known_silent):
    outcomes = score(split)
    report = "\n".join(table(split, outcomes))
    fails = _failures(outcomes)
    assert sum(o.right for o in fails) >= top1 * len(fails), report
    wrong = [o for o in outcomes if (o.want in ("healthy", "unknown") and not o.right) or o.confident_wrong]
    assert len(wrong) <= known_wrong, report
    # never silent on a failure: every failed log names a cause or shows its first error
    assert len([o for o in outcomes if o.want != "healthy" and o.got == "nothing"]) <= known_silent, report


if __name__ == "__main__":
    for part in sys.argv[1:] or ["dev", *sorted({n.split("/")[0] for n in INDEX} - {"dev"}, key=lambda p: (len(p), p))]:
        print("\n".join(table(part, score(part))))
