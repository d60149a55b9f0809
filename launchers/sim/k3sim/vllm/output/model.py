"""The simulated model: deterministic raw output in Kimi K3 XTML channels.

Chat output is ``<|open|>think<|sep|>REASONING<|close|>think<|sep|>`` (only when thinking is
on) followed by either ``<|open|>response<|sep|>ANSWER<|close|>response<|sep|>`` or a tool
section. Completions continue plain text. The text depends only on the prompt and the
``variant`` (0 for greedy, derived from the request seed otherwise), so P and D agree.
"""
from __future__ import annotations

import re
from typing import Any

from k3sim.vllm.cache import tokenize
from k3sim.vllm.output import schema, xtml

_OPENERS = ("Here is a short answer", "In brief", "A concise answer", "To put it simply")
_FILLER = (" It keeps the answer grounded in the question.", " More detail can follow on request.",
           " The reasoning above supports this.", " This holds for the given context.")


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rstrip() + "..."


def _image_text(images: list[dict[str, Any]]) -> str:
    parts = []
    for i, img in enumerate(images, 1):
        lead = "The image" if len(images) == 1 else f"Image {i}"
        parts.append(f"{lead} is {img['width']}x{img['height']} pixels and is mostly {img['colour']}.")
    return " ".join(parts)


_STOP = frozenset((
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "get", "gets", "give",
    "how", "i", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "please", "show", "tell", "that",
    "the", "their", "this", "to", "use", "uses", "using", "was", "what", "when", "where", "which", "who", "why", "will",
    "with", "you", "your", "value", "values", "given", "returns", "return"))


def _terms(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower().replace("_", " "))
    return {w for w in words if w not in _STOP and len(w) > 2}


def _relevance(question: str, func: dict[str, Any]) -> int:
    """How many of a tool's name and description words the question mentions (``look up`` counts for
    ``lookup``, ``forecasts`` for ``forecast``)."""
    q_words = _terms(question)
    q_joined = "".join(re.findall(r"[a-z0-9]+", question.lower()))
    score = 0
    for term in _terms(f"{func.get('name', '')} {func.get('description', '')}"):
        if term in q_words or (len(term) > 4 and term in q_joined) or \
                any(len(term) > 3 and (w.startswith(term) or term.startswith(w)) and len(w) > 3 for w in q_words):
            score += 2 if term in _terms(func.get("name", "")) else 1
    return score


def choose_tool(question: str, funcs: list[dict[str, Any]], required: bool = False) -> dict[str, Any] | None:
    """The tool a question is about (most name/description words in common; the first on a tie), or
    None when it is about none of them, as a real model answers an unrelated question itself.
    ``tool_choice: required`` always calls one."""
    scores = [_relevance(question, f) for f in funcs]
    best = max(range(len(funcs)), key=lambda i: (scores[i], -i))
    if scores[best] == 0 and not required:
        return None
    return funcs[best]


def answer(render: dict[str, Any], variant: int) -> str:
    q = _quote(render.get("question", ""), 24)
    if render.get("images"):
        return _image_text(render["images"])
    return f'{_OPENERS[variant % len(_OPENERS)]} about "{q}": the model handled it.'


def generate(render: dict[str, Any], variant: int) -> tuple[str, str, str]:
    """(prefix, body, suffix) of the natural output; filler may be inserted before ``suffix``."""
    if render.get("kind") == "completion":
        q = _quote(render.get("question", ""), 40)
        return "", f" a continuation of \"{q}\".{_FILLER[variant % len(_FILLER)]}", ""
    prefix = ""
    if render.get("thinking", True):
        subject = "the image" if render.get("images") else f'"{_quote(render.get("question", ""), 24)}"'
        prefix = f"{xtml.opened('think')}The user asks about {subject}."
        tool = render.get("tool")
        if tool:
            prefix += f" I should call {tool['name']}."
        prefix += xtml.closed("think")
    tool = render.get("tool")
    if tool:
        args = schema.example(tool.get("parameters") or {"type": "object", "properties": {}})
        if not isinstance(args, dict):
            args = {}
        return prefix, xtml.tool_section(tool["name"], args), ""
    return prefix + xtml.opened("response"), answer(render, variant), xtml.closed("response")


def output_tokens(render: dict[str, Any], variant: int, max_tokens: int, min_tokens: int,
                  ignore_eos: bool) -> tuple[list[str], str]:
    """Token texts and finish reason (``stop`` | ``length``)."""
    prefix, body, suffix = generate(render, variant)
    tokens = tokenize(prefix + body + suffix)
    want = max_tokens if ignore_eos else min_tokens
    i = 0
    while len(tokens) < want and not render.get("tool"):
        body += _FILLER[(variant + i) % len(_FILLER)]
        i += 1
        tokens = tokenize(prefix + body + suffix)
    if len(tokens) > max_tokens or (ignore_eos and len(tokens) >= max_tokens):
        return tokens[:max_tokens], "length"
    return tokens, "stop"
