"""The meaning layer reads an exception with where it was raised and with what it says on the next line (#32, pass
17a): the traceback's last frame as IPython / Jupyter print it, or under a log prefix, and an exception whose message
starts on the line below its colon. Real corpus lines name their excerpt; BUILT lines say what they are built from."""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import CORPUS, _likely

# (cause, excerpt, thread): the cause is named by its meaning alone, its signatures and codes left out
REAL = [
    # IPython >= 8 frame "File /x/configuration_auto.py:748, in _LazyConfigMapping.getitem(self, key)", numbered
    # source lines, then the KeyError (HF discussion mistralai/Mixtral-8x7B-Instruct-v0.1 #96)
    ("transformers-too-old", "heldout13/transformers-too-old--hf-mixtral-8x7b-instruct-d96.log"),
    # older IPython "/x/configuration_auto.py in __getitem__(self, key)" (HF discussion ArthurZ/jukebox-1b-lyrics #13)
    ("transformers-too-old", "heldout13/transformers-too-old--hf-jukebox-1b-lyrics-d13.log"),
    # Colab's collapsed traceback, the frame 6 lines above (HF discussion google/gemma-7b-it #19)
    ("transformers-too-old", "heldout14/transformers-too-old--hf-gemma-7b-it-d19.log"),
    # a timestamp before every line, frame included: sglang's launch_server importing uvicorn (sglang#3321)
    ("library-missing", "dev/library-missing--sglang-3321.log"),
    # NumPy's "ImportError: " with its message on the lines below (vllm#34041, jupyter/notebook#7522)
    ("package-version-mismatch", "heldout7/package-version-mismatch--vllm-34041.log"),
    ("package-version-mismatch", "heldout11/package-version-mismatch--jupyter-notebook-7522.log"),
]


@pytest.mark.parametrize("cause, name", REAL, ids=[n.split("/")[1][:48] for _, n in REAL])
def test_a_real_exception_is_read_with_its_frame_or_next_line(tmp_path, cause, name):
    assert _likely(tmp_path, cause, (CORPUS / name).read_text().rstrip("\n"))[:1] == [cause]


# BUILT from QwenLM/Qwen3#434's traceback (transformers 4.32 under a Qwen2 checkpoint, found with `search`): its last
# frame and KeyError under vLLM's multiproc log prefix, as vLLM's core.py logs a worker's traceback line by line
VLLM_PREFIXED = (
    'ERROR 05-02 10:00:01 [core.py:387]   File "/usr/lib/python3.11/site-packages/transformers/models/auto/'
    'configuration_auto.py", line 723, in __getitem__\n'
    "ERROR 05-02 10:00:01 [core.py:387]     raise KeyError(key)\n"
    "ERROR 05-02 10:00:01 [core.py:387] KeyError: 'qwen2'")
# BUILT from numpy's import_array check ("module compiled against ABI version 0x1000009 but this version of numpy is
# 0x2000000", numpy/_core/code_generators/generate_numpy_api.py, as catalogue.yaml's signature comment quotes it),
# raised with its message on the line below the exception's colon
NUMPY_ABI = ("ImportError:\n"
             "module compiled against ABI version 0x1000009 but this version of numpy is 0x2000000")


@pytest.mark.parametrize("cause, text", [("transformers-too-old", VLLM_PREFIXED),
                                         ("package-version-mismatch", NUMPY_ABI)], ids=["vllm-prefix", "numpy-abi"])
def test_a_built_wording_of_another_component_is_read(tmp_path, cause, text):
    assert _likely(tmp_path, cause, text)[:1] == [cause]


# near lines that stay clean: a KeyError raised in the standard library's configparser (mehranshakarami/AI_Spectrum#2,
# found with `search`), in the IPython layout the frame reader now reads: a frame, but not transformers'
CONFIGPARSER = ("/usr/lib/python3.10/configparser.py in __getitem__(self, key)\n"
                "    963         if key != self.default_section and not self.has_section(key):\n"
                "--> 964             raise KeyError(key)\n"
                "    965         return self._proxies[key]\n"
                "KeyError: 'twitter'")


def test_a_keyerror_outside_transformers_names_nothing(tmp_path):
    assert _likely(tmp_path, "transformers-too-old", CONFIGPARSER) == []


def test_an_empty_exception_followed_by_an_unrelated_line_names_nothing(tmp_path):
    # the next line is read with the colon's line, but says nothing of a package's release
    assert _likely(tmp_path, "package-version-mismatch", "ImportError:\nlibfoo is needed by numpy for the tests") == []


def test_a_healthy_line_ending_in_a_colon_stays_clean(tmp_path):
    assert_clean(diagnose_text(tmp_path, "INFO 05-02 10:00:01 [config.py:1] Versions:\n"
                                         "INFO 05-02 10:00:01 [config.py:1] numpy 2.0.0 compiled using NumPy 1.x\n"))


# python -m names the module it was asked to run ("for 'vllm.entrypoints.openai.api_server'"): not a submodule missing,
# the package itself is (vllm#2236, a real line); BUILT from CPython's runpy._get_module_details ("Error while finding
# module specification for {!r} ({}: {})") for sglang
PYTHON_M = [("dev/library-missing--vllm-2236.log", None),
            (None, "/usr/bin/python3: Error while finding module specification for 'sglang.launch_server' "
                   "(ModuleNotFoundError: No module named 'sglang')")]


@pytest.mark.parametrize("name, text", PYTHON_M, ids=["vllm-2236", "built-sglang"])
def test_python_m_of_a_package_not_installed_is_a_missing_library(tmp_path, name, text):
    text = text or next(x for x in (CORPUS / name).read_text().splitlines() if "module specification" in x)
    assert _likely(tmp_path, "library-missing", text)[:1] == ["library-missing"]


def test_a_submodule_of_vllm_missing_is_no_missing_library(tmp_path):
    assert "library-missing" not in _likely(tmp_path, "library-missing",
                                            "ModuleNotFoundError: No module named 'vllm._C'")
