"""The simulated model: deterministic raw output in Kimi K3 XTML channels.

Chat output is ``<|open|>think<|sep|>REASONING<|close|>think<|sep|>`` (only when thinking is
on) followed by either ``<|open|>response<|sep|>ANSWER<|close|>response<|sep|>`` or a tool
section. Completions continue plain text. The text depends only on the prompt and the
``variant`` (0 for greedy, derived from the request seed otherwise), so P and D agree.
"""
from __future__ import annotations

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
