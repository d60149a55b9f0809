"""Reading the real vLLM 0.33 wheel without importing vLLM (that would need torch).

* metric definitions: the ``self._counter_cls/_gauge_cls/_histogram_cls(name=..., documentation=...)``
  calls of ``vllm/v1/metrics/loggers.py``, read with ``ast``;
* OpenAI protocol models: the annotated fields of the response classes in the wheel's
  ``protocol.py`` files, read with ``ast`` (name, annotation, whether it has a default);
* kimi_k3 parsers: ``vllm/reasoning/kimi_k3_reasoning_parser.py`` and
  ``vllm/tool_parsers/kimi_k3_tool_parser.py`` executed from the wheel's own source, with the
  stubs below standing in for their vLLM/transformers imports. The parser logic is the wheel's.

Stubbed imports (everything else the parsers use is real: ``regex``, ``json``, ``openai.types``):

* ``transformers.PreTrainedTokenizerBase``, ``vllm.tokenizers.TokenizerLike``: a tokenizer whose
  ``encode`` maps each character to its code point (only the token-id helpers use it; the
  text paths compared here do not);
* ``vllm.reasoning.ReasoningParser`` / ``vllm.tool_parsers.abstract_tool_parser.ToolParser``:
  base classes that store the tokenizer as ``model_tokenizer`` (all the K3 parsers take from them);
* ``vllm.entrypoints.generate.base.protocol``: pydantic models with the wheel's field names for
  ``DeltaMessage``, ``DeltaToolCall``, ``DeltaFunctionCall``, ``FunctionCall``, ``ToolCall``,
  ``ExtractedToolCallInformation``;
* ``vllm.entrypoints.openai.chat_completion.protocol``: ``ChatCompletionRequest`` (a namespace
  with ``tools`` and ``tool_choice``) and ``ChatCompletionNamedToolChoiceParam``;
  ``vllm.entrypoints.openai.responses.protocol.ResponsesRequest``; ``vllm.exceptions.VLLMValidationError``;
  ``vllm.logger.init_logger`` (``logging.getLogger``).

``compose``/``compose_stream`` restate how 0.33's ``KimiK3Parser`` (``vllm/parser/kimi_k3.py``)
chains them: reasoning first, the rest to the tool parser, whitespace-only content next to tool
calls dropped. That glue is restated, not loaded (``DelegatingParser`` pulls in the engine).
"""
from __future__ import annotations

import ast
import json
import logging
import sys
import types
import uuid
import zipfile
from dataclasses import dataclass, field
from typing import Any, Literal

LOGGERS = "vllm/v1/metrics/loggers.py"
REASONING = "vllm/reasoning/kimi_k3_reasoning_parser.py"
TOOLS = "vllm/tool_parsers/kimi_k3_tool_parser.py"
METRIC_CLS = {"_counter_cls": "counter", "_gauge_cls": "gauge", "_histogram_cls": "histogram"}


# ------------------------------------------------------------------------------------- metrics


def metric_defs(wheel: zipfile.ZipFile) -> dict[str, tuple[str, str | None]]:
    """``vllm:name`` -> (type, documentation or None when it is not a literal)."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(ast.parse(wheel.read(LOGGERS).decode())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in METRIC_CLS):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        name = kw.get("name")
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            doc = kw.get("documentation")
            out[name.value] = (METRIC_CLS[node.func.attr],
                               doc.value if isinstance(doc, ast.Constant) and isinstance(doc.value, str) else None)
    out.update(_info_defs(wheel))
    return out


def _info_defs(wheel: zipfile.ZipFile) -> dict[str, tuple[str, str | None]]:
    """``log_metrics_info``'s gauges: ``name = "vllm:..._info"`` and ``documentation = "..."`` assigned
    side by side (``vllm:cache_config_info``), then passed to ``self._gauge_cls(name=name, ...)``."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(ast.parse(wheel.read(LOGGERS).decode())):
        if not isinstance(node, ast.If):
            continue
        consts = {t.id: a.value.value for a in node.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)
                  for t in a.targets if isinstance(t, ast.Name)}
        name = consts.get("name")
        if isinstance(name, str) and name.startswith("vllm:") and name.endswith("_info"):
            doc = consts.get("documentation")
            out[name] = ("gauge", doc if isinstance(doc, str) else None)
    return out


def dataclass_fields(wheel: zipfile.ZipFile, path: str, cls: str) -> list[str]:
    """Annotated fields of ``cls`` in declaration order (a config dataclass's ``__dict__`` order)."""
    for node in ast.parse(wheel.read(path).decode()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [st.target.id for st in node.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                    and not ast.unparse(st.annotation).startswith("ClassVar")]
    raise KeyError(f"{cls} not in {path}")


# ------------------------------------------------------------------------------------ protocol


@dataclass
class Model:
    name: str
    bases: list[str]
    fields: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (annotation, has default)


def protocol_models(wheel: zipfile.ZipFile) -> dict[str, Model]:
    models: dict[str, Model] = {}
    for path in wheel.namelist():
        if not (path.startswith("vllm/entrypoints/") and path.endswith("protocol.py")):
            continue
        for node in ast.parse(wheel.read(path).decode()).body:
            if isinstance(node, ast.ClassDef):
                m = Model(node.name, [ast.unparse(b) for b in node.bases])
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        ann = ast.unparse(stmt.annotation)
                        if not ann.startswith("ClassVar"):
                            m.fields[stmt.target.id] = (ann, stmt.value is not None)
                models.setdefault(node.name, m)
    return models


def all_fields(models: dict[str, Model], name: str) -> dict[str, tuple[str, bool]]:
    m = models[name]
    out: dict[str, tuple[str, bool]] = {}
    for base in m.bases:
        if base in models:
            out.update(all_fields(models, base))
    out.update(m.fields)
    return out


def field_drift(models: dict[str, Model], cls: str, obj: Any, where: str, required: bool = True) -> list[str]:
    """Keys ``obj`` has that ``cls`` lacks, required fields it misses, recursively into known classes."""
    if not isinstance(obj, dict):
        return []
    fields = all_fields(models, cls)
    problems = [f"{where}.{k}: not a field of vLLM's {cls}" for k in obj if k not in fields]
    if required:
        problems += [f"{where}.{k}: required by vLLM's {cls}, missing" for k, (_, has_default) in fields.items()
                     if not has_default and k not in obj]
    for key, value in obj.items():
        inner = _model_of(models, fields[key][0]) if key in fields else None
        for i, item in enumerate(value if isinstance(value, list) else [value]) if inner else []:
            problems += field_drift(models, inner, item, f"{where}.{key}" + (f"[{i}]" if isinstance(value, list) else ""),
                                    required)
    return problems


def _model_of(models: dict[str, Model], annotation: str) -> str | None:
    """The first known model class an annotation names (``list[ToolCall] | None`` -> ToolCall)."""
    inner = [n.id for n in ast.walk(ast.parse(annotation, mode="eval")) if isinstance(n, ast.Name)
             and n.id in models and n.id not in ("OpenAIBaseModel",)]
    return inner[0] if inner else None


# ------------------------------------------------------------------------------------- parsers


class _Tokenizer:
    """Stub tokenizer: one id per character (the compared text paths never look at ids)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


@dataclass
class Request:
    """Stub ChatCompletionRequest: what the K3 parsers read from a request."""

    tools: list[dict] | None = None
    tool_choice: Any = "auto"
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True


def _stub_modules() -> dict[str, types.ModuleType]:
    from pydantic import BaseModel, Field

    def mod(name: str, **attrs: Any) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    class FunctionCall(BaseModel):
        id: str | None = Field(default=None, exclude=True)
        name: str
        arguments: str

    class ToolCall(BaseModel):
        id: str = Field(default_factory=lambda: f"chatcmpl-tool-{uuid.uuid4().hex}")
        type: Literal["function"] = "function"
        function: FunctionCall

    class DeltaFunctionCall(BaseModel):
        name: str | None = None
        arguments: str | None = None

    class DeltaToolCall(BaseModel):
        id: str | None = None
        type: Literal["function"] | None = None
        index: int
        function: DeltaFunctionCall | None = None

    class DeltaMessage(BaseModel):
        role: str | None = None
        content: str | None = None
        reasoning: str | None = None
        tool_calls: list[DeltaToolCall] = Field(default_factory=list)

    class ExtractedToolCallInformation(BaseModel):
        tools_called: bool
        tool_calls: list[ToolCall]
        content: str | None = None

    class ReasoningParser:
        def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
            self.model_tokenizer = tokenizer

    class ToolParser:
        def __init__(self, tokenizer: Any, tools: Any = None) -> None:
            self.model_tokenizer = tokenizer
            self.tools = tools

        def adjust_request(self, request: Any) -> Any:
            return request

    class ChatCompletionNamedToolChoiceParam:  # never an instance here: tool_choice is "auto" or "none"
        pass

    class VLLMValidationError(ValueError):
        def __init__(self, message: str, **kwargs: Any) -> None:
            super().__init__(message)

    protocol = mod("vllm.entrypoints.generate.base.protocol", FunctionCall=FunctionCall, ToolCall=ToolCall,
                   DeltaFunctionCall=DeltaFunctionCall, DeltaToolCall=DeltaToolCall, DeltaMessage=DeltaMessage,
                   ExtractedToolCallInformation=ExtractedToolCallInformation)
    return {
        "transformers": mod("transformers", PreTrainedTokenizerBase=_Tokenizer),
        "vllm": mod("vllm"),
        "vllm.entrypoints.generate.base.protocol": protocol,
        "vllm.reasoning": mod("vllm.reasoning", ReasoningParser=ReasoningParser),
        "vllm.tool_parsers.abstract_tool_parser": mod("vllm.tool_parsers.abstract_tool_parser", Tool=dict,
                                                      ToolParser=ToolParser),
        "vllm.entrypoints.openai.chat_completion.protocol": mod(
            "vllm.entrypoints.openai.chat_completion.protocol", ChatCompletionRequest=Request,
            ChatCompletionNamedToolChoiceParam=ChatCompletionNamedToolChoiceParam),
        "vllm.entrypoints.openai.responses.protocol": mod("vllm.entrypoints.openai.responses.protocol",
                                                          ResponsesRequest=Request),
        "vllm.exceptions": mod("vllm.exceptions", VLLMValidationError=VLLMValidationError),
        "vllm.logger": mod("vllm.logger", init_logger=logging.getLogger),
        "vllm.tokenizers": mod("vllm.tokenizers", TokenizerLike=_Tokenizer),
    }


def load_parsers(wheel: zipfile.ZipFile, reasoning_src: str | None = None, tools_src: str | None = None):
    """(KimiK3ReasoningParser, KimiK3ToolParser) executed from the wheel's source (or the given source)."""
    stubs = _stub_modules()
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        out = []
        for path, src, cls in ((REASONING, reasoning_src, "KimiK3ReasoningParser"),
                               (TOOLS, tools_src, "KimiK3ToolParser")):
            namespace: dict[str, Any] = {"__name__": path[:-3].replace("/", ".")}
            exec(compile(src if src is not None else wheel.read(path).decode(), path, "exec"), namespace)  # noqa: S102
            out.append(namespace[cls])
        return tuple(out)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@dataclass
class Result:
    reasoning: str | None
    content: str | None
    calls: list[tuple[str, Any]]  # (name, decoded arguments)


def compose(parsers, text: str, request: Request, thinking: bool = True) -> Result:
    """The non-streaming chat path: reasoning parser, then the tool parser on the rest."""
    reasoning_cls, tool_cls = parsers
    rp = reasoning_cls(_Tokenizer(), chat_template_kwargs={"thinking": thinking})
    tp = tool_cls(_Tokenizer())
    reasoning, rest = rp.extract_reasoning(text, request)
    if not request.tools or request.tool_choice == "none" or rest is None:
        return Result(reasoning, rest, [])
    info = tp.extract_tool_calls(rest, request)
    content = info.content
    if info.tools_called and content is not None and content.strip() == "":
        content = None
    return Result(reasoning, content, [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls])


def _add_call_deltas(calls: dict[int, list[str]], deltas) -> None:
    """Streamed tool-call pieces appended per call index: [name so far, arguments so far]."""
    for call in deltas:
        entry = calls.setdefault(call.index, ["", ""])
        fn = call.function or {}
        fn = fn if isinstance(fn, dict) else fn.model_dump(exclude_none=True)
        entry[0] += fn.get("name") or ""
        entry[1] += fn.get("arguments") or ""


def compose_stream(parsers, deltas: list[str], request: Request, thinking: bool = True) -> Result:
    """The streaming chat path: per delta, reasoning until it ends, then the post-reasoning text to
    the tool parser's streaming method (``KimiK3Parser`` does so for tool_choice "none" too, and drops
    the tool calls: that is where the response wrapper is stripped)."""
    reasoning_cls, tool_cls = parsers
    rp = reasoning_cls(_Tokenizer(), chat_template_kwargs={"thinking": thinking})
    tp = tool_cls(_Tokenizer())
    use_tools = bool(request.tools) and request.tool_choice != "none"
    previous, reasoning, content = "", "", ""
    after: str = ""
    calls: dict[int, list[str]] = {}
    for delta in deltas:
        current = previous + delta
        msg = rp.extract_reasoning_streaming(previous, current, delta, [], [], [])
        previous = current
        if msg is None:
            continue
        reasoning += msg.reasoning or ""
        if msg.content is None:
            continue
        before = after
        after += msg.content
        out = tp.extract_tool_calls_streaming(before, after, msg.content, [], [], [], request)
        if out is None:
            continue
        content += out.content or ""
        _add_call_deltas(calls, out.tool_calls if use_tools else [])
    got_calls = [(name, json.loads(args)) for _, (name, args) in sorted(calls.items())]
    if got_calls and not content.strip():
        content = ""
    return Result(reasoning or None, content or None, got_calls)
