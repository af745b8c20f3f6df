"""The subset of CEL used by the snapshot CRDs' ``x-kubernetes-validations`` rules.

Grammar: ``||``, ``&&``, ``!``, comparisons (``== != < > <= >=``), parentheses, ``has(a.b)``,
``size(x)``, field access from ``self`` / ``oldSelf`` (``__name__`` escapes reserved words),
integer, string and boolean literals. ``compile_rule(text)`` returns a function of
``(self, old_self)`` giving a bool, or None when the rule uses anything else (the caller then
skips it, as a lenient server would; the upstream CRDs' rules are all inside the subset).
``uses_old_self(text)`` tells a transition rule (evaluated only on update when the old value
exists).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(r"\s*(\|\||&&|==|!=|<=|>=|[()!<>.]|'[^']*'|\"[^\"]*\"|\d+|[A-Za-z_][A-Za-z0-9_]*)")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()
Rule = Callable[[Any, Any], bool]


class _Unsupported(Exception):
    pass


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise _Unsupported(text[pos:])
        out.append(m.group(1))
        pos = m.end()
    return out


def _field(name: str) -> str:
    m = re.fullmatch(r"__([A-Za-z0-9_]+)__", name)
    return m.group(1) if m else name


class _Parser:
    def __init__(self, tokens: list[str]):
        self.t = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise _Unsupported(f"expected {want!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self):
        node = self.or_()
        if self.peek() is not None:
            raise _Unsupported(f"trailing {self.peek()!r}")
        return node

    def or_(self):
        node = self.and_()
        while self.peek() == "||":
            self.take()
            node = ("or", node, self.and_())
        return node

    def and_(self):
        node = self.unary()
        while self.peek() == "&&":
            self.take()
            node = ("and", node, self.unary())
        return node

    def unary(self):
        if self.peek() == "!":
            self.take()
            return ("not", self.unary())
        return self.cmp()

    def cmp(self):
        node = self.primary()
        if self.peek() in ("==", "!=", "<", ">", "<=", ">="):
            op = self.take()
            node = ("cmp", op, node, self.primary())
        return node

    def primary(self):
        tok = self.take()
        if tok == "(":
            node = self.or_()
            self.take(")")
            return node
        if tok in ("has", "size") and self.peek() == "(":
            self.take("(")
            arg = self.or_()
            self.take(")")
            if tok == "has" and arg[0] != "path":
                raise _Unsupported("has() needs a field selection")
            return (tok, arg)
        if tok in ("true", "false"):
            return ("lit", tok == "true")
        if tok.isdigit():
            return ("lit", int(tok))
        if tok[0] in "'\"":
            return ("lit", tok[1:-1])
        if tok in ("self", "oldSelf"):
            path = [tok]
            while self.peek() == ".":
                self.take()
                path.append(_field(self.take()))
            return ("path", tuple(path))
        raise _Unsupported(tok)


def _get(path: tuple[str, ...], env: dict[str, Any]) -> Any:
    cur = env[path[0]]
    for part in path[1:]:
        cur = cur.get(part, MISSING) if isinstance(cur, dict) else MISSING
    return cur


def _eval(node, env: dict[str, Any]) -> Any:
    kind = node[0]
    if kind == "or":
        return bool(_eval(node[1], env)) or bool(_eval(node[2], env))
    if kind == "and":
        return bool(_eval(node[1], env)) and bool(_eval(node[2], env))
    if kind == "not":
        return not _eval(node[1], env)
    if kind == "lit":
        return node[1]
    if kind == "path":
        return _get(node[1], env)
    if kind == "has":
        return _get(node[1][1], env) is not MISSING
    if kind == "size":
        value = _eval(node[1], env)
        return len(value) if value is not MISSING else 0
    if kind == "cmp":
        op, a, b = node[1], _eval(node[2], env), _eval(node[3], env)
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        if a is MISSING or b is MISSING:
            return False
        return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    raise _Unsupported(kind)


def compile_rule(text: str) -> Rule | None:
    try:
        tree = _Parser(_tokens(text)).parse()
    except _Unsupported:
        return None

    def rule(self_value: Any, old_value: Any = MISSING) -> bool:
        return bool(_eval(tree, {"self": self_value, "oldSelf": old_value}))

    return rule


def uses_old_self(text: str) -> bool:
    return re.search(r"\boldSelf\b", text) is not None
