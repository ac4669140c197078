"""A small, safe expression language for a sweep's `when:` constraint.

    workload.batch * workload.prompt_len <= 65536 and hw != "groq_lpu"
    hw.memory.@device.bandwidth_bytes_per_s > 1e12      # a machine alias, as an axis path takes it

The text is parsed with Python's `ast` (expression mode only) and evaluated by
walking a whitelist of node types: numbers, strings, names as dotted paths
into the point's config, + - * / // % ** (exponents bounded), unary - + not,
comparisons (== != < <= > >= in, not in against a literal list), and/or, and
calls to min, max and abs. Everything else (attribute access on anything but a
dotted name, subscripts, other calls, lambdas, comprehensions) is refused when
the expression is compiled, before any point runs. Nothing is ever `eval`ed.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from sim.core.errors import ConfigError

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}
_MAX_EXPONENT = 64  # keeps `10 ** 10 ** 10` from hanging the sweep
_MAX_DIGITS = 300   # and `((9 ** 64) ** 64) ** 64`, whose exponents are each small
# A dotted name's `.@device` part (a machine alias, sim.core.settings.HW_ALIASES; a results column such as
# peak_memory_bytes.@device) is not Python: parsed as this identifier, read back as `@device`.
_AT, _AT_NAME = re.compile(r"\.@(?=[A-Za-z])"), "sim_alias_at_"


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` as a string if the node is a chain of attributes on a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts)).replace(_AT_NAME, "@")


@dataclass(frozen=True)
class Expr:
    text: str
    tree: ast.Expression
    names: tuple[str, ...]     # dotted paths the expression reads

    where: str = "when"        # names the file and key in errors found while evaluating

    def __call__(self, lookup: Callable[[str], Any]) -> Any:
        try:
            return _eval(self.tree.body, lookup, self.text)
        except ConfigError as exc:  # _eval's messages start "when: "; say which file and key
            msg = str(exc)
            raise ConfigError(f"{self.where}: {msg.removeprefix('when: ')}" if msg.startswith("when: ") else msg) from None


def compile_expr(text: str, where: str = "when") -> Expr:
    """Parse and check `text`; raises ConfigError naming `where` for anything outside the language."""
    try:
        tree = ast.parse(_AT.sub("." + _AT_NAME, text), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"{where}: syntax error in {text!r}: {exc.msg}") from None
    names: list[str] = []
    _check(tree.body, names, where, text)
    return Expr(text, tree, tuple(dict.fromkeys(names)), where)


def _check(node: ast.AST, names: list[str], where: str, text: str) -> None:
    def refuse(what: str) -> None:
        raise ConfigError(f"{where}: {what} is not allowed in {text!r} "
                          "(only numbers, dotted names, arithmetic, comparisons, and/or/not, min/max/abs)")

    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool)) or node.value is None:
            refuse(f"the constant {node.value!r}")
        return
    if isinstance(node, (ast.Name, ast.Attribute)):
        path = _dotted(node)
        if path is None:
            refuse("attribute access on an expression")
        if any(p.startswith("_") for p in path.split(".")):
            refuse(f"the name {path!r}")
        names.append(path)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            refuse(f"the operator {type(node.op).__name__}")
        _check(node.left, names, where, text)
        _check(node.right, names, where, text)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            refuse(f"the operator {type(node.op).__name__}")
        _check(node.operand, names, where, text)
        return
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, names, where, text)
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _CMPOPS:
                refuse(f"the comparison {type(op).__name__}")
        for v in (node.left, *node.comparators):
            _check(v, names, where, text)
        return
    if isinstance(node, (ast.List, ast.Tuple)):
        for v in node.elts:
            if not isinstance(v, ast.Constant):
                refuse("a non-literal list element")
            _check(v, names, where, text)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS:
            refuse(f"calling {ast.unparse(node.func)!r}")
        if node.keywords:
            refuse("keyword arguments")
        for a in node.args:
            if isinstance(a, ast.Starred):
                refuse("*args")
            _check(a, names, where, text)
        return
    refuse(f"{type(node).__name__!r}")


def _eval(node: ast.AST, lookup: Callable[[str], Any], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Name, ast.Attribute)):
        return lookup(_dotted(node))
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, lookup, text), _eval(node.right, lookup, text)
        if not all(isinstance(v, (int, float)) for v in (left, right)):
            raise ConfigError(f"when: arithmetic needs numbers, got {left!r} and {right!r} in {text!r}")
        if isinstance(node.op, ast.Pow):
            _check_power(left, right, text)
        try:
            out = _BINOPS[type(node.op)](left, right)
        except (TypeError, ZeroDivisionError, OverflowError, ValueError) as exc:
            raise ConfigError(f"when: {exc} in {text!r}") from None
        if not isinstance(out, (int, float)):  # (-8) ** 0.5 is complex
            raise ConfigError(f"when: {ast.unparse(node)} is not a real number in {text!r}")
        return out
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, lookup, text)
        if isinstance(node.op, ast.Not):
            return not v
        if not isinstance(v, (int, float)):
            raise ConfigError(f"when: unary {'-' if isinstance(node.op, ast.USub) else '+'} needs a number, "
                              f"got {v!r} in {text!r}")
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, lookup, text) for v in node.values)
        return any(_eval(v, lookup, text) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, lookup, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, lookup, text)
            try:
                if not _CMPOPS[type(op)](left, right):
                    return False
            except TypeError as exc:
                raise ConfigError(f"when: {exc} in {text!r}") from None
            left = right
        return True
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(v, lookup, text) for v in node.elts]
    if isinstance(node, ast.Call):
        args = [_eval(a, lookup, text) for a in node.args]
        try:
            return _FUNCS[node.func.id](*args)
        except (TypeError, ValueError) as exc:  # min(), max([]), abs("x")
            raise ConfigError(f"when: {node.func.id}: {exc} in {text!r}") from None
    raise ConfigError(f"when: cannot evaluate {type(node).__name__} in {text!r}")  # unreachable after _check


def _check_power(base: float, exponent: float, text: str) -> None:
    """Refuse a power whose result would be huge: a big integer power takes minutes (and
    memory) to compute, a float one overflows. Sizes up to 1e300 are plenty for a constraint."""
    if abs(exponent) > _MAX_EXPONENT:
        raise ConfigError(f"when: exponent {exponent} too large in {text!r}")
    if abs(base) > 1 and exponent > 0 and math.log10(abs(base)) * exponent > _MAX_DIGITS:
        raise ConfigError(f"when: {base!r:.20} ** {exponent} is too large (over 1e{_MAX_DIGITS}) in {text!r}")


def lookup_in(tree: Mapping[str, Any], where: str = "when") -> Callable[[str], Any]:
    """A name resolver over nested mappings: `workload.batch` -> tree['workload']['batch']."""
    def lookup(path: str) -> Any:
        node: Any = tree
        for i, key in enumerate(path.split(".")):
            if not isinstance(node, Mapping) or key not in node:
                raise ConfigError(f"{where}: {'.'.join(path.split('.')[: i + 1])}: no such field")
            node = node[key]
        return node

    return lookup
