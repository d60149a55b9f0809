"""A small model of the bash the deployment guides use, so one source renders and resolves.

A guide script is a list of statements (assignments, exports, unsets, ``source``, the final
command). Rendering writes bash in the guide's shape; resolving evaluates the same statements in
Python to get the environment and the argv that the program finally receives. Both come from
one object, so the rendered script and ``plan.json`` cannot drift apart. Literal text is always
quoted with :func:`shlex.quote`, so any inventory value stays a literal.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Iterable, Union

_BARE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


@dataclass(frozen=True)
class Var:
    """``"$NAME"``; ``default_empty`` renders ``"${NAME:-}"`` (safe under ``set -u``)."""

    name: str
    default_empty: bool = False


@dataclass(frozen=True)
class ArrayRef:
    """``"${NAME[@]}"``: expands to zero or more words."""

    name: str


Part = Union[str, Var]


@dataclass(frozen=True)
class Word:
    parts: tuple[Part, ...]

    def render(self) -> str:
        if len(self.parts) == 1 and isinstance(self.parts[0], str):
            text = self.parts[0]
            return text if _BARE.match(text) else shlex.quote(text)
        out = []
        for part in self.parts:
            if isinstance(part, Var):
                out.append(f'"${{{part.name}:-}}"' if part.default_empty else f'"${part.name}"')
            elif part:
                out.append(shlex.quote(part))
        return "".join(out) or "''"

    def resolve(self, scope: "Scope") -> str:
        return "".join(scope.get(p.name) if isinstance(p, Var) else p for p in self.parts)


def w(*parts: Part | int) -> Word:
    """Build a word; ints become literal text."""
    return Word(tuple(str(p) if isinstance(p, int) else p for p in parts))


def words(*tokens: Part | int | Word | ArrayRef) -> list[Word | ArrayRef]:
    return [t if isinstance(t, (Word, ArrayRef)) else w(t) for t in tokens]


def plain_words(*tokens: Part | int | Word) -> list[Word]:
    """Words of a :class:`Line` (no array expansion there)."""
    return [t if isinstance(t, Word) else w(t) for t in tokens]


# ----------------------------------------------------------------------------- statements


@dataclass
class Scope:
    """Shell state while resolving: variables, which are exported, and positional args."""

    env: dict[str, str]
    positional: list[str] = field(default_factory=list)
    shell_vars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    unset: set[str] = field(default_factory=set)
    sourced: list[str] = field(default_factory=list)

    def get(self, name: str) -> str:
        if name.isdigit():
            idx = int(name) - 1
            return self.positional[idx] if 0 <= idx < len(self.positional) else ""
        if name in self.shell_vars:
            return self.shell_vars[name]
        return self.env.get(name, "")


class Stmt:
    def render(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def apply(self, scope: Scope) -> None:
        """Evaluate the statement; statements without effect on env or argv do nothing."""


@dataclass
class Raw(Stmt):
    """A line with no effect on env or argv (shebang, ``set -e``, a blank line, a comment)."""

    text: str

    def render(self) -> str:
        return self.text


@dataclass
class Assign(Stmt):
    name: str
    value: Word
    export: bool = False

    def render(self) -> str:
        return f"{'export ' if self.export else ''}{self.name}={self.value.render()}"

    def apply(self, scope: Scope) -> None:
        value = self.value.resolve(scope)
        scope.unset.discard(self.name)
        if self.export or self.name in scope.env:
            scope.env[self.name] = value
            scope.shell_vars.pop(self.name, None)
        else:
            scope.shell_vars[self.name] = value


@dataclass
class Unset(Stmt):
    names: tuple[str, ...]

    def render(self) -> str:
        return "unset " + " ".join(self.names)

    def apply(self, scope: Scope) -> None:
        for name in self.names:
            scope.env.pop(name, None)
            scope.shell_vars.pop(name, None)
            scope.unset.add(name)


@dataclass
class Source(Stmt):
    path: Word
    effect: Callable[[Scope], None] | None = None  # what the sourced file does, when known

    def render(self) -> str:
        return f"source {self.path.render()}"

    def apply(self, scope: Scope) -> None:
        scope.sourced.append(self.path.resolve(scope))
        if self.effect:
            self.effect(scope)


@dataclass
class Line(Stmt):
    """A command line without effect on the resolved env (``test -r``, ``: ${X:?msg}``)."""

    argv: list[Word]

    def render(self) -> str:
        return " ".join(a.render() for a in self.argv)


@dataclass
class Computed(Stmt):
    """``NAME="$(...)"`` or ``NAME=$((...))``: shell text plus the Python that computes it."""

    name: str
    shell: str
    compute: Callable[[Scope], str]
    export: bool = False

    def render(self) -> str:
        return f"{'export ' if self.export else ''}{self.name}={self.shell}"

    def apply(self, scope: Scope) -> None:
        value = self.compute(scope)
        if self.export:
            scope.env[self.name] = value
        else:
            scope.shell_vars[self.name] = value


@dataclass
class HeadlessArgs(Stmt):
    """The guides' ``headless_args=()`` block: ``--headless`` on PP node ranks above 0."""

    array: str
    rank_var: str
    style: str = "arith"  # "arith": (( NODE_RANK > 0 )); "string": [[ "$NODE_RANK" != 0 ]]

    def render(self) -> str:
        if self.style == "arith":
            return (f"{self.array}=()\nif (( {self.rank_var} > 0 )); then\n"
                    f"{self.array}=(--headless)\nfi")
        return (f"{self.array}=()\nif [[ \"${self.rank_var}\" != 0 ]]; then\n"
                f"{self.array}+=(--headless)\nfi")

    def apply(self, scope: Scope) -> None:
        rank = scope.get(self.rank_var)
        headless = int(rank) > 0 if self.style == "arith" else rank != "0"
        scope.arrays[self.array] = ["--headless"] if headless else []


Token = Union[Word, ArrayRef]


@dataclass
class Command(Stmt):
    """The script's final command, laid out in lines as the guides write it."""

    lines: list[list[Token]]
    exec_: bool = False

    @property
    def argv(self) -> list[Token]:
        return [tok for line in self.lines for tok in line]

    def render(self) -> str:
        def one(tok: Token) -> str:
            return f'"${{{tok.name}[@]}}"' if isinstance(tok, ArrayRef) else tok.render()

        rendered = [" ".join(one(t) for t in line) for line in self.lines]
        rendered[0] = ("exec " if self.exec_ else "") + rendered[0]
        return " \\\n".join(rendered)

    def resolve(self, scope: Scope) -> list[str]:
        out: list[str] = []
        for arg in self.argv:
            if isinstance(arg, ArrayRef):
                out.extend(scope.arrays.get(arg.name, []))
            else:
                out.append(arg.resolve(scope))
        return out


@dataclass
class Script:
    statements: list[Stmt]

    def command(self) -> Command:
        cmds = [s for s in self.statements if isinstance(s, Command)]
        if len(cmds) != 1:
            raise ValueError("a guide script has exactly one final command")
        return cmds[0]

    def render(self) -> str:
        return "\n".join(s.render() for s in self.statements) + "\n"

    def resolve(self, env: dict[str, str], positional: Iterable[str] = ()) -> tuple[dict[str, str], list[str], Scope]:
        """Return (environment the command receives, its argv, final scope)."""
        scope = Scope(env=dict(env), positional=list(positional))
        argv: list[str] = []
        for stmt in self.statements:
            if isinstance(stmt, Command):
                argv = stmt.resolve(scope)
            else:
                stmt.apply(scope)
        return scope.env, argv, scope
