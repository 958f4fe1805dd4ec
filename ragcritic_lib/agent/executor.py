"""Restricted executor for planner programs (RAG-Critic section 3.3, Algorithm 1).

The planner LLM writes a short straight-line program of calls to the action functions::

    clarified_query = RewriteQuery(query=question, instruction="clarify")
    retrieved_documents = Retrieval(query=clarified_query[0], topk=5)
    summarized = [RefineDoc(query=question, doc=d, instruction="summarize") for d in retrieved_documents]
    final_answer = GenerateAnswer(query=question, docs=summarized, additional_instruction="...")

Model output is data, never code. The text is parsed with :func:`ast.parse`, every node is checked
against a whitelist (:func:`validate_program`), and the checked tree is walked by the small
interpreter in this module (:func:`run_program`). Nothing is compiled to bytecode and nothing is
handed to ``exec``/``eval``; the only callables a program can reach are the action functions the
caller passes in and the five builtins in :data:`ALLOWED_BUILTINS` (our own bounded versions).

Allowed syntax (anything else is rejected with one of :data:`REASON_CODES`):

* statements: ``name = expr``, ``a, b = expr`` (names only), ``name += expr`` and an expression
  statement that is a call, a name or a constant;
* expressions: constants (str, int, float, bool, None), names, list and tuple displays,
  ``a + b``, a negative number literal, calls ``F(args, key=value)`` where ``F`` is an action or an
  allowed builtin named directly, subscripts ``x[0]``, ``x[-1]``, ``x[i]``, ``x[1:3]``, f-strings
  whose fields are a name, subscript or constant with an optional short constant format spec, and
  list comprehensions ``[expr for name in iterable if cond]`` with one ``for`` clause over a
  name, subscript, call, list or tuple (nested inside another comprehension at most once);
* inside comprehension filters only: comparisons, ``and``/``or``/``not``.

A program must assign ``final_answer``. Names must be defined before they are read: given
variables, names assigned by an earlier statement, or comprehension targets. Functions are values
nowhere: an action or builtin name may only appear as the callee of a direct call, so aliasing
(``r = Retrieval``), passing a function as an argument and rebinding a function name are all
rejected; with no ``def``/``lambda`` either, a program cannot recurse or reach any other callable.
Dict and set displays are rejected too (the actions take and return strings and lists).

The builtins ``len``, ``str``, ``int``, ``min`` and ``max`` take positional arguments only and work
on the safe value types; action calls are counted (``max_calls``) but builtin calls are not.
Runtime values are limited to str, int, float, bool, None and lists/tuples of these, with bounds
on string length, list length, nesting and total size; action results are checked the same way.

Statically detected problems raise :class:`UnsafeProgramError` before any action runs; so do the
runtime limits (number of action calls, wall clock, value sizes). Errors that come from the values
(an action raising, indexing past the end, adding a str to a list, formatting ``f'{n:c}'`` with
``n`` beyond U+10FFFF) raise :class:`ProgramRuntimeError`. Whatever the source text, these are the
only errors a program can cause: an exception that the checks did not foresee (raised by the
parser or by Python while evaluating a node) is reported as ``evaluation_error``, ``size``
(MemoryError) or ``depth`` (RecursionError), never passed on as it is. Both classes derive from
:class:`ProgramError`, carry ``reason_code``, ``message`` and ``lineno``, and, when raised while
running, the partial ``trace`` and ``n_calls``, so the workflow can keep the previous answer and
still account for the calls that were made.

Strings are model output, so every str a program can create (literals, f-string results, action
results, error messages) goes through :func:`ragcritic_lib.text.clean_text`: a lone surrogate such
as the literal ``'\\ud83d'`` becomes U+FFFD and cannot make a later UTF-8 write fail.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import re
import textwrap
import time
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragcritic_lib.text import clean_text, clean_value

__all__ = [
    "ALLOWED_BUILTINS",
    "REASON_CODES",
    "RUNTIME_CODES",
    "ExecutionResult",
    "ProgramError",
    "ProgramRuntimeError",
    "UnsafeProgramError",
    "extract_program",
    "run_program",
    "validate_program",
]

ALLOWED_BUILTINS: tuple[str, ...] = ("len", "str", "int", "min", "max")
"""Builtins a program may call besides the actions (bounded re-implementations, positional only)."""

REASON_CODES: dict[str, str] = {
    "syntax": "the text does not parse as Python",
    "size": "source, literal, AST node count or a runtime value exceeds its size bound",
    "depth": "syntax tree nested deeper than max_depth",
    "import": "import statements",
    "attribute": "attribute access (x.y) of any kind",
    "dunder": "a name, keyword or attribute starting with a double underscore",
    "lambda": "lambda expressions",
    "definition": "def / class statements",
    "loop": "for / while statements",
    "control_flow": "if / try / with / raise / assert / return / pass / del / match / x if c else y",
    "scope": "global / nonlocal",
    "async": "await / yield / async constructs",
    "walrus": "assignment expressions (:=)",
    "starred": "*args, **kwargs and {**d} unpacking",
    "comprehension": "generator, set and dict comprehensions; several for clauses; "
    "non-name targets; iterables that are not a name, subscript, call, list or tuple; "
    "nesting beyond two levels",
    "operator": "operators other than + (comparisons and and/or/not only in comprehension filters)",
    "format": "f-string conversions other than !s, fields that are not a name, subscript or "
    "constant, format specs that are not short constants",
    "subscript": "subscripts other than an int constant, a name or a simple slice",
    "bad_literal": "bytes, complex, Ellipsis, ints beyond 2**63 or non-finite floats",
    "node_not_allowed": "any other syntax (dict and set displays, other expression statements)",
    "assignment": "assignment forms other than name = ..., a, b = ... and name += ...",
    "reserved_name": "assigning to an action or builtin name",
    "function_reference": "an action or builtin used as a value instead of being called",
    "call_not_allowed": "calling anything but the actions and the allowed builtins by name",
    "unknown_name": "reading a name that is neither given nor assigned earlier",
    "bad_arguments": "unknown keyword, missing argument or too many positional arguments",
    "no_final_answer": "the program never assigns final_answer",
    "too_many_calls": "more than max_calls action calls",
    "timeout": "the wall-clock limit was exceeded",
}
"""Reason codes of :class:`UnsafeProgramError` (static rejections and runtime limits)."""

RUNTIME_CODES: dict[str, str] = {
    "action_error": "an action raised an exception",
    "bad_argument_type": "an action argument does not match the type its signature declares",
    "bad_return": "an action returned a value of a type programs cannot hold",
    "type_error": "an operation on values of the wrong type (e.g. str + list, indexing an int)",
    "value_error": "a builtin got a value it cannot convert (e.g. int('abc'), max of [])",
    "index_error": "an index past the end of a list or string",
    "unpack": "a, b = value where value is not a list/tuple of that length",
    "bad_final_answer": "final_answer is not a str or None",
    "evaluation_error": "any other exception Python raised while parsing or evaluating the program",
}
"""Reason codes of :class:`ProgramRuntimeError` (value-dependent failures)."""

MAX_INT = 2**63 - 1  # ints beyond this have no use in a plan (topk, indices) and slow str()
MAX_COMPREHENSION_NESTING = 2
MAX_VALUE_DEPTH = 6  # list-of-list nesting of runtime values
MAX_FORMAT_WIDTH = 100  # f-string width/precision; a spec like '>100000000' would allocate first
MAX_DEPTH_LIMIT = 100  # the validator and interpreter recurse once per tree level
TRACE_TEXT_LIMIT = 200
TRACE_LIST_LIMIT = 10
_EXTRACT_MAX_CHARS = 50_000
_EXTRACT_MAX_TRIMS = 40

_SOURCE_NAME = "<planner-program>"
# The parser warns about things like invalid escape sequences in model text; the program is data,
# so those warnings would only flood the logs of a run over thousands of samples.
for _category in (SyntaxWarning, DeprecationWarning):
    warnings.filterwarnings("ignore", category=_category, module=re.escape(_SOURCE_NAME))
_SEQUENCES = (list, tuple)


class ProgramError(Exception):
    """A planner program was rejected or stopped; the caller keeps the previous answer.

    Attributes:
        reason_code: Short stable code (see :data:`REASON_CODES` and :data:`RUNTIME_CODES`).
        message: Human-readable explanation naming the offending construct.
        lineno: Program line, when known.
        trace: Action calls completed before the error (empty for static rejections).
        n_calls: Number of action calls started before the error.
    """

    def __init__(self, reason_code: str, message: str, lineno: int | None = None) -> None:
        self.reason_code = reason_code
        message = clean_text(message)  # it may quote program text or an action's error
        self.message = message
        self.lineno = lineno
        self.trace: list[dict[str, Any]] = []
        self.n_calls = 0
        where = f" (line {lineno})" if lineno else ""
        super().__init__(f"{reason_code}: {message}{where}")

    @property
    def code(self) -> str:
        """Alias of :attr:`reason_code`."""
        return self.reason_code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason_code, self.message, self.lineno))


class UnsafeProgramError(ProgramError):
    """The program uses disallowed syntax or exceeded a resource limit."""


class ProgramRuntimeError(ProgramError):
    """A validated program failed on its values (an action raised, bad index, wrong types)."""

    def __init__(self, code: str, message: str, lineno: int | None = None) -> None:
        super().__init__(code, message, lineno)


@dataclass
class ExecutionResult:
    """Outcome of a successful :func:`run_program`.

    Attributes:
        final_answer: Value the program assigned to ``final_answer``.
        variables: Names the program assigned (not the given inputs) -> their final values.
        trace: One entry per action call, in call order: ``{"call", "args", "result_summary",
            "lineno"}``; long strings and lists in ``args`` are shortened.
        n_calls: Number of action calls.
        elapsed_s: Wall-clock seconds for validation and execution.
    """

    final_answer: str | None
    variables: dict[str, Any]
    trace: list[dict[str, Any]]
    n_calls: int
    elapsed_s: float


@dataclass(frozen=True)
class _Limits:
    max_calls: int
    timeout_s: float
    max_str_len: int
    max_list_len: int
    max_nodes: int
    max_depth: int
    max_total_chars: int
    max_source_len: int


# --------------------------------------------------------------------------------------------
# Static validation
# --------------------------------------------------------------------------------------------

_BANNED_NODES: dict[type, str] = {
    ast.Import: "import",
    ast.ImportFrom: "import",
    ast.Lambda: "lambda",
    ast.FunctionDef: "definition",
    ast.AsyncFunctionDef: "definition",
    ast.ClassDef: "definition",
    ast.For: "loop",
    ast.AsyncFor: "loop",
    ast.While: "loop",
    ast.If: "control_flow",
    ast.IfExp: "control_flow",
    ast.Try: "control_flow",
    ast.With: "control_flow",
    ast.AsyncWith: "async",
    ast.Raise: "control_flow",
    ast.Assert: "control_flow",
    ast.Return: "control_flow",
    ast.Break: "control_flow",
    ast.Continue: "control_flow",
    ast.Pass: "control_flow",
    ast.Delete: "control_flow",
    ast.Match: "control_flow",
    ast.Global: "scope",
    ast.Nonlocal: "scope",
    ast.Await: "async",
    ast.Yield: "async",
    ast.YieldFrom: "async",
    ast.NamedExpr: "walrus",
    ast.Starred: "starred",
    ast.GeneratorExp: "comprehension",
    ast.SetComp: "comprehension",
    ast.DictComp: "comprehension",
}
if hasattr(ast, "TryStar"):  # Python >= 3.11
    _BANNED_NODES[ast.TryStar] = "control_flow"

# Context and operator singletons carry no structure; leaving them out of the node count and
# depth keeps max_nodes/max_depth meaningful ("x" is one node, not two).
_UNCOUNTED = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)

_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Is, ast.IsNot)
_FORMAT_SPEC_RE = re.compile(
    r"(?:.?[<>=^])?[+\- ]?#?0?(?P<width>\d{0,4})[,_]?(?:\.(?P<prec>\d{1,4}))?[bcdeEfFgGnosxX%]?"
)

_POS = inspect.Parameter.POSITIONAL_ONLY
_BUILTIN_SIGNATURES: dict[str, inspect.Signature] = {
    "len": inspect.Signature([inspect.Parameter("value", _POS)]),
    "str": inspect.Signature([inspect.Parameter("value", _POS)]),
    "int": inspect.Signature([inspect.Parameter("value", _POS)]),
    "min": inspect.Signature([inspect.Parameter("values", inspect.Parameter.VAR_POSITIONAL)]),
    "max": inspect.Signature([inspect.Parameter("values", inspect.Parameter.VAR_POSITIONAL)]),
}


def _is_dunder(name: str | None) -> bool:
    return bool(name) and name.startswith("__")  # type: ignore[union-attr]


def _lineno(node: ast.AST) -> int | None:
    return getattr(node, "lineno", None)


def _reject(code: str, message: str, node: ast.AST | None = None) -> UnsafeProgramError:
    return UnsafeProgramError(code, message, _lineno(node) if node is not None else None)


def _signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some C callables have no introspectable signature
        return None


def _parse(source: str, limits: _Limits) -> ast.Module:
    if not isinstance(source, str):
        raise TypeError(f"program source must be str, got {type(source).__name__}")
    if len(source) > limits.max_source_len:
        raise _reject("size", f"program has {len(source)} characters, limit {limits.max_source_len}")
    try:
        return ast.parse(source, filename=_SOURCE_NAME)
    except SyntaxError as exc:
        raise UnsafeProgramError("syntax", f"{exc.msg}", exc.lineno) from None
    except ValueError as exc:  # null bytes on some Python versions
        raise UnsafeProgramError("syntax", str(exc)) from None
    except RecursionError:  # the parser's own guard against very deep nesting
        raise UnsafeProgramError("depth", "nesting too deep to parse") from None
    except MemoryError:  # parser stack overflow on some Python versions
        raise UnsafeProgramError("size", "program too large to parse") from None


def _check_shape(tree: ast.Module, limits: _Limits) -> None:
    """Bound node count and depth without recursion (the tree may be arbitrarily deep)."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > limits.max_depth:
            raise _reject("depth", f"nesting depth exceeds {limits.max_depth}", node)
        if count > limits.max_nodes:
            raise _reject("size", f"program has more than {limits.max_nodes} syntax nodes", node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _UNCOUNTED):
                stack.append((child, depth + 1))


def _dunder_in(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and _is_dunder(node.attr):
        return f"attribute '.{node.attr}'"
    if isinstance(node, ast.Name) and _is_dunder(node.id):
        return f"name '{node.id}'"
    if isinstance(node, ast.keyword) and _is_dunder(node.arg):
        return f"keyword '{node.arg}'"
    return None


def _scan_banned(tree: ast.Module) -> None:
    """First pass: dunder identifiers anywhere, then banned node kinds, outermost first.

    Dunders are looked for first because they mark attempts to reach interpreter internals
    (``().__class__.__bases__``, ``__import__``), which the rejection counts should show as such
    even when an outer construct (an attribute, a lambda) would be rejected too.
    """
    for node in ast.walk(tree):
        found = _dunder_in(node)
        if found is not None:
            raise _reject("dunder", f"{found} is not allowed", node)
    for node in ast.walk(tree):
        code = _BANNED_NODES.get(type(node))
        if code is not None:
            raise _reject(code, f"{type(node).__name__} is not allowed", node)
        if isinstance(node, ast.Attribute):
            raise _reject("attribute", f"attribute access '.{node.attr}' is not allowed", node)
        if isinstance(node, ast.keyword) and node.arg is None:
            raise _reject("starred", "**kwargs unpacking is not allowed", node)
        if isinstance(node, ast.Dict) and any(key is None for key in node.keys):
            raise _reject("starred", "{**mapping} unpacking is not allowed", node)
        if isinstance(node, ast.comprehension) and node.is_async:
            raise _reject("async", "async comprehensions are not allowed", node.iter)


class _Checker:
    """Second pass: structure, defined-before-use names, calls and their arguments."""

    def __init__(
        self,
        signatures: Mapping[str, inspect.Signature | None],
        actions: frozenset[str],
        defined: Iterable[str],
        limits: _Limits,
    ) -> None:
        self.signatures = signatures
        self.actions = actions
        self.defined = set(defined)
        self.limits = limits
        self.assigns_final = False
        self.static_calls = 0  # action calls outside comprehensions: a lower bound on calls

    def module(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            self.statement(stmt)
        if self.static_calls > self.limits.max_calls:
            raise _reject(
                "too_many_calls",
                f"program makes {self.static_calls} action calls, limit {self.limits.max_calls}",
            )
        if not self.assigns_final:
            raise _reject("no_final_answer", "the program never assigns final_answer")

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise _reject("assignment", "chained assignment a = b = ... is not allowed", node)
            self.expr(node.value, frozenset(), False, 0)
            self.bind(self.target_names(node.targets[0]))
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.op, ast.Add):
                raise _reject("operator", f"only += is allowed, not {type(node.op).__name__}=", node)
            if not isinstance(node.target, ast.Name):
                raise _reject("assignment", "augmented assignment must target a name", node)
            self.load_name(node.target, frozenset())
            self.expr(node.value, frozenset(), False, 0)
            self.bind(self.target_names(node.target))
        elif isinstance(node, ast.Expr):
            if not isinstance(node.value, (ast.Call, ast.Name, ast.Constant)):
                raise _reject(
                    "node_not_allowed",
                    f"an expression statement must be a call, not {type(node.value).__name__}",
                    node,
                )
            self.expr(node.value, frozenset(), False, 0)
        elif isinstance(node, ast.AnnAssign):
            raise _reject("assignment", "annotated assignment is not allowed", node)
        else:
            raise _reject("node_not_allowed", f"{type(node).__name__} statements are not allowed", node)

    def bind(self, names: list[str]) -> None:
        self.defined.update(names)
        if "final_answer" in names:
            self.assigns_final = True

    def store_name(self, name: str, node: ast.AST) -> str:
        if name in self.signatures:
            raise _reject("reserved_name", f"'{name}' names a function and cannot be assigned", node)
        return name

    def target_names(self, target: ast.expr) -> list[str]:
        if isinstance(target, ast.Name):
            return [self.store_name(target.id, target)]
        if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
            if not target.elts:
                raise _reject("assignment", "cannot assign to an empty tuple", target)
            return [self.store_name(e.id, e) for e in target.elts]  # type: ignore[attr-defined]
        raise _reject(
            "assignment", f"can only assign to names, not to {type(target).__name__}", target
        )

    def load_name(self, node: ast.Name, local: frozenset[str]) -> None:
        if node.id in local:
            return
        if node.id in self.signatures:
            raise _reject(
                "function_reference",
                f"'{node.id}' can only be called directly, not used as a value",
                node,
            )
        if node.id not in self.defined:
            raise _reject("unknown_name", f"name '{node.id}' is not defined", node)

    def expr(self, node: ast.expr, local: frozenset[str], in_filter: bool, level: int) -> None:
        if isinstance(node, ast.Constant):
            self.literal(node)
        elif isinstance(node, ast.Name):
            self.load_name(node, local)
        elif isinstance(node, (ast.List, ast.Tuple)):
            if len(node.elts) > self.limits.max_list_len:
                raise _reject("size", f"literal list has more than {self.limits.max_list_len} items", node)
            for elt in node.elts:
                self.expr(elt, local, False, level)
        elif isinstance(node, ast.BinOp):
            if not isinstance(node.op, ast.Add):
                raise _reject("operator", f"operator {type(node.op).__name__} is not allowed", node)
            self.expr(node.left, local, False, level)
            self.expr(node.right, local, False, level)
        elif isinstance(node, ast.UnaryOp):
            self.unary(node, local, in_filter, level)
        elif isinstance(node, (ast.BoolOp, ast.Compare)):
            if not in_filter:
                raise _reject(
                    "operator",
                    f"{type(node).__name__} is only allowed in a comprehension filter",
                    node,
                )
            if isinstance(node, ast.Compare):
                for op in node.ops:
                    if not isinstance(op, _COMPARE_OPS):
                        raise _reject("operator", f"comparison {type(op).__name__} is not allowed", node)
                children = [node.left, *node.comparators]
            else:
                children = list(node.values)
            for child in children:
                self.expr(child, local, True, level)
        elif isinstance(node, ast.Subscript):
            self.expr(node.value, local, False, level)
            self.subscript(node.slice, local)
        elif isinstance(node, ast.JoinedStr):
            self.fstring(node, local, level)
        elif isinstance(node, ast.ListComp):
            self.listcomp(node, local, level)
        elif isinstance(node, ast.Call):
            self.call(node, local, level)
        else:
            raise _reject("node_not_allowed", f"{type(node).__name__} is not allowed", node)

    def literal(self, node: ast.Constant) -> None:
        value = node.value
        kind = type(value)
        if kind is str:
            if len(value) > self.limits.max_str_len:
                raise _reject("size", f"string literal longer than {self.limits.max_str_len}", node)
        elif kind is int:
            if abs(value) > MAX_INT:
                raise _reject("bad_literal", "integer literal out of range", node)
        elif kind is float:
            if not math.isfinite(value):
                raise _reject("bad_literal", "non-finite float literal", node)
        elif kind not in (bool, type(None)):
            raise _reject("bad_literal", f"{kind.__name__} literals are not allowed", node)

    def unary(self, node: ast.UnaryOp, local: frozenset[str], in_filter: bool, level: int) -> None:
        if isinstance(node.op, ast.USub) and _is_number_constant(node.operand):
            return
        if isinstance(node.op, ast.Not) and in_filter:
            self.expr(node.operand, local, True, level)
            return
        raise _reject(
            "operator",
            f"unary {type(node.op).__name__} is only allowed on a number literal (or 'not' in a filter)",
            node,
        )

    def index(self, node: ast.expr, local: frozenset[str]) -> None:
        if _is_int_constant(node) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _is_int_constant(node.operand)
        ):
            return
        if isinstance(node, ast.Name):
            self.load_name(node, local)
            return
        raise _reject("subscript", "an index must be an int literal or a name", node)

    def subscript(self, node: ast.expr, local: frozenset[str]) -> None:
        if isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper):
                if bound is not None:
                    self.index(bound, local)
            if node.step is not None and not (_is_int_constant(node.step) and node.step.value != 0):  # type: ignore[attr-defined]
                raise _reject("subscript", "a slice step must be a non-zero int literal", node)
            return
        self.index(node, local)

    def fstring(self, node: ast.JoinedStr, local: frozenset[str], level: int) -> None:
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                self.literal(part)
                continue
            if not isinstance(part, ast.FormattedValue):
                raise _reject("format", f"unexpected f-string part {type(part).__name__}", part)
            if part.conversion not in (-1, ord("s")):
                raise _reject("format", f"f-string conversion !{chr(part.conversion)} is not allowed", part)
            if not isinstance(part.value, (ast.Name, ast.Subscript, ast.Constant)):
                raise _reject(
                    "format",
                    f"an f-string field must be a name, subscript or constant, not {type(part.value).__name__}",
                    part,
                )
            self.expr(part.value, local, False, level)
            if part.format_spec is not None:
                _constant_format_spec(part.format_spec)

    def listcomp(self, node: ast.ListComp, local: frozenset[str], level: int) -> None:
        if level + 1 > MAX_COMPREHENSION_NESTING:
            raise _reject(
                "comprehension",
                f"comprehensions may be nested at most {MAX_COMPREHENSION_NESTING} deep",
                node,
            )
        if len(node.generators) != 1:
            raise _reject("comprehension", "a comprehension may have only one 'for' clause", node)
        gen = node.generators[0]
        if not isinstance(gen.target, ast.Name):
            raise _reject("comprehension", "a comprehension target must be a single name", gen.target)
        if not isinstance(gen.iter, (ast.Name, ast.Subscript, ast.Call, ast.List, ast.Tuple)):
            raise _reject(
                "comprehension",
                f"a comprehension must iterate over a name, subscript, call, list or tuple, "
                f"not {type(gen.iter).__name__}",
                gen.iter,
            )
        self.expr(gen.iter, local, False, level)
        inner = local | {self.store_name(gen.target.id, gen.target)}
        for cond in gen.ifs:
            self.expr(cond, inner, True, level + 1)
        self.expr(node.elt, inner, False, level + 1)

    def call(self, node: ast.Call, local: frozenset[str], level: int) -> None:
        func = node.func
        if not isinstance(func, ast.Name):
            raise _reject("call_not_allowed", f"only named functions may be called, not {type(func).__name__}", node)
        name = func.id
        if name not in self.signatures or name in local:
            allowed = ", ".join(sorted(self.signatures))
            raise _reject("call_not_allowed", f"'{name}' is not an allowed function (allowed: {allowed})", node)
        for arg in node.args:
            self.expr(arg, local, False, level)
        for kw in node.keywords:
            self.expr(kw.value, local, False, level)
        signature = self.signatures[name]
        if signature is not None:
            try:
                signature.bind(*node.args, **{kw.arg: kw.value for kw in node.keywords if kw.arg})
            except TypeError as exc:
                raise _reject("bad_arguments", f"{name}(): {exc}", node) from None
        if name in self.actions and level == 0:
            self.static_calls += 1


def _is_int_constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _is_number_constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _constant_format_spec(spec: ast.expr) -> str:
    """Return an f-string format spec if it is a short constant with bounded width/precision."""
    if not isinstance(spec, ast.JoinedStr) or not all(
        isinstance(v, ast.Constant) and isinstance(v.value, str) for v in spec.values
    ):
        raise _reject("format", "f-string format specs must be constants", spec)
    text = "".join(v.value for v in spec.values)  # type: ignore[attr-defined]
    match = _FORMAT_SPEC_RE.fullmatch(text)
    if match is None:
        raise _reject("format", f"format spec {text!r} is not allowed", spec)
    for group in ("width", "prec"):
        if match.group(group) and int(match.group(group)) > MAX_FORMAT_WIDTH:
            raise _reject("format", f"format width/precision above {MAX_FORMAT_WIDTH}", spec)
    return text


def _make_limits(
    max_calls: int = 16,
    timeout_s: float = 30.0,
    max_str_len: int = 20000,
    max_list_len: int = 64,
    max_nodes: int = 400,
    max_depth: int = 12,
    max_total_chars: int = 200_000,
    max_source_len: int = 20_000,
) -> _Limits:
    ints = {
        "max_calls": max_calls,
        "max_str_len": max_str_len,
        "max_list_len": max_list_len,
        "max_nodes": max_nodes,
        "max_depth": max_depth,
        "max_total_chars": max_total_chars,
        "max_source_len": max_source_len,
    }
    for key, value in ints.items():
        if type(value) is not int or value < (0 if key == "max_calls" else 1):
            raise ValueError(f"{key} must be a {'non-negative' if key == 'max_calls' else 'positive'} int, got {value!r}")
    if max_depth > MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be at most {MAX_DEPTH_LIMIT}, got {max_depth}")
    if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
    return _Limits(
        max_calls, float(timeout_s), max_str_len, max_list_len, max_nodes, max_depth, max_total_chars, max_source_len
    )


def _check_function_names(names: Iterable[str], what: str) -> None:
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or _is_dunder(name):
            raise ValueError(f"{what} name {name!r} is not a plain identifier")


def _validate(
    source: str,
    signatures: Mapping[str, inspect.Signature | None],
    actions: frozenset[str],
    variables: Iterable[str],
    limits: _Limits,
) -> ast.Module:
    tree = _parse(source, limits)
    _check_shape(tree, limits)
    _scan_banned(tree)
    _Checker(signatures, actions, variables, limits).module(tree)
    return tree


def validate_program(
    source: str,
    allowed_calls: Iterable[str] | Mapping[str, Callable[..., Any]],
    *,
    variables: Iterable[str] = (),
    max_calls: int = 16,
    max_str_len: int = 20000,
    max_list_len: int = 64,
    max_nodes: int = 400,
    max_depth: int = 12,
    max_source_len: int = 20_000,
) -> ast.Module:
    """Statically check a program without running anything.

    Args:
        source: Program text (see :func:`extract_program` for model output).
        allowed_calls: Action names, or a mapping name -> callable; with callables, every call's
            keywords and argument count are also checked against the signature.
            :data:`ALLOWED_BUILTINS` are always allowed in addition.
        variables: Names the program may read without assigning them (e.g. question, docs).
        max_calls: Limit on action calls outside comprehensions (a lower bound on calls made).
        max_str_len: Limit on each string literal.
        max_list_len: Limit on list/tuple display length.
        max_nodes: Limit on syntax nodes.
        max_depth: Limit on syntax tree depth.
        max_source_len: Limit on the program text, checked before parsing.

    Returns:
        The parsed and checked module.

    Raises:
        UnsafeProgramError: With the first violation's reason code and line.
    """
    limits = _make_limits(
        max_calls, 30.0, max_str_len, max_list_len, max_nodes, max_depth, max_source_len=max_source_len
    )
    if isinstance(allowed_calls, Mapping):
        signatures = {name: _signature_of(fn) for name, fn in allowed_calls.items()}
    else:
        signatures = {name: None for name in allowed_calls}
    _check_function_names(signatures, "action")
    actions = frozenset(signatures) - set(ALLOWED_BUILTINS)
    signatures.update(_BUILTIN_SIGNATURES)
    return _validate(source, signatures, actions, list(variables), limits)


# --------------------------------------------------------------------------------------------
# Runtime values
# --------------------------------------------------------------------------------------------


def _value_problem(
    value: Any, *, max_str: float, max_list: float, budget: float
) -> tuple[str, str] | None:
    """Return (kind, description) if ``value`` is not a safe, bounded value, else None.

    Safe values are str, int, float, bool, None and lists/tuples of safe values. The walk is
    iterative and charged against ``budget`` (characters plus one per item), so shared or cyclic
    references cannot make it expensive.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > max_str:
                return "size", f"a string of {len(item)} characters exceeds the limit {max_str}"
            budget -= len(item) + 1
        elif kind in _SEQUENCES:
            if len(item) > max_list:
                return "size", f"a list of {len(item)} items exceeds the limit {max_list}"
            if depth >= MAX_VALUE_DEPTH:
                return "size", f"lists nested deeper than {MAX_VALUE_DEPTH}"
            budget -= 1
            stack.extend((child, depth + 1) for child in item)
        elif kind is int:
            if abs(item) > MAX_INT:
                return "size", "an int beyond 2**63"
            budget -= 1
        elif kind in (bool, float, type(None)):
            budget -= 1
        else:
            return "type", f"values of type {kind.__name__} are not allowed"
        if budget < 0:
            return "size", "the value's total size exceeds the limit"
    return None


def _summarize(value: Any) -> Any:
    """JSON-friendly, shortened view of a value for traces."""
    if isinstance(value, str):
        return value if len(value) <= TRACE_TEXT_LIMIT else value[:TRACE_TEXT_LIMIT] + "..."
    if isinstance(value, (list, tuple)):
        items = [_summarize(v) for v in value[:TRACE_LIST_LIMIT]]
        if len(value) > TRACE_LIST_LIMIT:
            items.append(f"... (+{len(value) - TRACE_LIST_LIMIT} more)")
        return items
    if isinstance(value, dict):
        return {str(k): _summarize(v) for k, v in list(value.items())[:TRACE_LIST_LIMIT]}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return f"<{type(value).__name__}>"


def _summary_text(value: Any) -> str:
    if isinstance(value, str):
        return _summarize(value)
    return json.dumps(_summarize(value), ensure_ascii=False)


_TYPE_NAMES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": _SEQUENCES,
    "List": _SEQUENCES,
    "Sequence": _SEQUENCES,
    "tuple": _SEQUENCES,
    "Tuple": _SEQUENCES,
    "None": (type(None),),
    "NoneType": (type(None),),
}


def _expected_types(annotation: Any) -> tuple[type, ...] | None:
    """Map a parameter annotation to the runtime types it accepts; None means 'do not check'.

    Handles real annotations and string ones (``from __future__ import annotations``) for the
    shapes the action signatures use: str, int, float, bool, list[...], X | None, Optional[X].
    """
    if annotation is inspect.Parameter.empty or annotation is Any:
        return None
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        optional = re.fullmatch(r"(?:typing\.)?Optional\[(.+)\]", text)
        parts = [optional.group(1), "None"] if optional else text.split("|")
        found: list[type] = []
        for part in parts:
            base = re.sub(r"\[.*\]$", "", part).rsplit(".", 1)[-1]
            if base not in _TYPE_NAMES:
                return None
            found.extend(_TYPE_NAMES[base])
        return tuple(found)
    if annotation is None or annotation is type(None):
        return (type(None),)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        found = []
        for member in typing.get_args(annotation):
            member_types = _expected_types(member)
            if member_types is None:
                return None
            found.extend(member_types)
        return tuple(found)
    base = origin if origin is not None else annotation
    if base is Sequence or base in _SEQUENCES:
        return _SEQUENCES
    if isinstance(base, type) and base.__name__ in _TYPE_NAMES and base in (str, int, float, bool):
        return _TYPE_NAMES[base.__name__]
    return None


# --------------------------------------------------------------------------------------------
# Interpreter
# --------------------------------------------------------------------------------------------


class _Interpreter:
    """Walks a validated module; every node kind handled here was admitted by :class:`_Checker`."""

    def __init__(
        self,
        actions: Mapping[str, Callable[..., Any]],
        signatures: Mapping[str, inspect.Signature | None],
        variables: Mapping[str, Any],
        limits: _Limits,
        deadline: float,
    ) -> None:
        self.actions = actions
        self.signatures = signatures
        self.env: dict[str, Any] = dict(variables)
        self.assigned: dict[str, Any] = {}
        self.limits = limits
        self.deadline = deadline
        self.trace: list[dict[str, Any]] = []
        self.n_calls = 0

    # -- plumbing ------------------------------------------------------------------------
    def tick(self, node: ast.AST) -> None:
        if time.monotonic() > self.deadline:
            raise UnsafeProgramError(
                "timeout", f"wall-clock limit of {self.limits.timeout_s:g}s exceeded", _lineno(node)
            )

    def check(self, value: Any, node: ast.AST, *, type_code: str = "type_error") -> Any:
        problem = _value_problem(
            value,
            max_str=self.limits.max_str_len,
            max_list=self.limits.max_list_len,
            budget=self.limits.max_total_chars,
        )
        if problem is not None:
            kind, message = problem
            if kind == "size":
                raise UnsafeProgramError("size", message, _lineno(node))
            raise ProgramRuntimeError(type_code, message, _lineno(node))
        return value

    # -- statements ----------------------------------------------------------------------
    def run(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            self.tick(stmt)
            if isinstance(stmt, ast.Assign):
                self.assign(stmt.targets[0], self.value(stmt.value, {}), stmt)
            elif isinstance(stmt, ast.AugAssign):
                name = stmt.target.id  # type: ignore[attr-defined]
                total = self.add(self.lookup(name, {}, stmt), self.value(stmt.value, {}), stmt)
                self.assign(stmt.target, total, stmt)
            elif isinstance(stmt, ast.Expr):
                self.value(stmt.value, {})
            else:  # pragma: no cover - excluded by validation
                raise UnsafeProgramError("node_not_allowed", type(stmt).__name__, _lineno(stmt))

    def assign(self, target: ast.expr, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            self.assigned[target.id] = value
            return
        names = [e.id for e in target.elts]  # type: ignore[attr-defined]
        if type(value) not in _SEQUENCES or len(value) != len(names):
            got = f"{len(value)} values" if type(value) in _SEQUENCES else type(value).__name__
            raise ProgramRuntimeError("unpack", f"cannot unpack {got} into {len(names)} names", _lineno(node))
        for name, item in zip(names, value):
            self.env[name] = item
            self.assigned[name] = item

    def lookup(self, name: str, scope: Mapping[str, Any], node: ast.AST) -> Any:
        if name in scope:
            return scope[name]
        if name in self.env:
            return self.env[name]
        raise UnsafeProgramError("unknown_name", f"name '{name}' is not defined", _lineno(node))

    # -- expressions ---------------------------------------------------------------------
    def value(self, node: ast.expr, scope: Mapping[str, Any]) -> Any:
        self.tick(node)
        if isinstance(node, ast.Constant):
            return clean_text(node.value) if type(node.value) is str else node.value
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope, node)
        if isinstance(node, ast.List):
            return self.check([self.value(e, scope) for e in node.elts], node)
        if isinstance(node, ast.Tuple):
            return self.check(tuple(self.value(e, scope) for e in node.elts), node)
        if isinstance(node, ast.BinOp):
            return self.add(self.value(node.left, scope), self.value(node.right, scope), node)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return -node.operand.value  # type: ignore[attr-defined]
            return not self.value(node.operand, scope)
        if isinstance(node, ast.BoolOp):
            return self.boolop(node, scope)
        if isinstance(node, ast.Compare):
            return self.compare(node, scope)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, scope)
        if isinstance(node, ast.JoinedStr):
            return self.fstring(node, scope)
        if isinstance(node, ast.ListComp):
            return self.listcomp(node, scope)
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        raise UnsafeProgramError("node_not_allowed", type(node).__name__, _lineno(node))  # pragma: no cover

    def add(self, left: Any, right: Any, node: ast.AST) -> Any:
        lt, rt = type(left), type(right)
        if lt is str and rt is str:
            if len(left) + len(right) > self.limits.max_str_len:
                raise UnsafeProgramError(
                    "size",
                    f"string of {len(left) + len(right)} characters exceeds {self.limits.max_str_len}",
                    _lineno(node),
                )
            return left + right
        if lt in _SEQUENCES and lt is rt:
            if len(left) + len(right) > self.limits.max_list_len:
                raise UnsafeProgramError(
                    "size",
                    f"list of {len(left) + len(right)} items exceeds {self.limits.max_list_len}",
                    _lineno(node),
                )
            return self.check(left + right, node)
        if lt in (int, float, bool) and rt in (int, float, bool):
            return self.check(left + right, node)
        raise ProgramRuntimeError("type_error", f"cannot add {lt.__name__} and {rt.__name__}", _lineno(node))

    def boolop(self, node: ast.BoolOp, scope: Mapping[str, Any]) -> Any:
        result: Any = None
        for operand in node.values:
            result = self.value(operand, scope)
            if isinstance(node.op, ast.And) and not result:
                return result
            if isinstance(node.op, ast.Or) and result:
                return result
        return result

    def compare(self, node: ast.Compare, scope: Mapping[str, Any]) -> bool:
        left = self.value(node.left, scope)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.value(comparator, scope)
            try:
                ok = _compare(op, left, right)
            except TypeError as exc:
                raise ProgramRuntimeError("type_error", str(exc), _lineno(node)) from None
            if not ok:
                return False
            left = right
        return True

    def as_index(self, node: ast.expr | None, scope: Mapping[str, Any]) -> int | None:
        if node is None:
            return None
        index = self.value(node, scope)
        if type(index) is not int:
            raise ProgramRuntimeError("type_error", f"indices must be int, not {type(index).__name__}", _lineno(node))
        return index

    def subscript(self, node: ast.Subscript, scope: Mapping[str, Any]) -> Any:
        container = self.value(node.value, scope)
        if type(container) not in (str, list, tuple):
            raise ProgramRuntimeError(
                "type_error", f"{type(container).__name__} cannot be indexed", _lineno(node)
            )
        sl = node.slice
        if isinstance(sl, ast.Slice):
            step = sl.step.value if sl.step is not None else None  # type: ignore[attr-defined]
            return container[self.as_index(sl.lower, scope) : self.as_index(sl.upper, scope) : step]
        index = self.as_index(sl, scope)
        try:
            return container[index]
        except IndexError:
            raise ProgramRuntimeError(
                "index_error", f"index {index} out of range for length {len(container)}", _lineno(node)
            ) from None

    def fstring(self, node: ast.JoinedStr, scope: Mapping[str, Any]) -> str:
        pieces: list[str] = []
        size = 0
        for part in node.values:
            if isinstance(part, ast.Constant):
                text = clean_text(part.value)
            else:
                fv: ast.FormattedValue = part  # type: ignore[assignment]
                value = self.value(fv.value, scope)
                if fv.conversion == ord("s"):
                    value = self.to_str(value, fv)
                spec = _constant_format_spec(fv.format_spec) if fv.format_spec is not None else ""
                try:
                    # 'c' makes a code point of an int and a fill character may be any code point:
                    # both can yield a lone surrogate.
                    text = clean_text(format(value, spec))
                except (TypeError, ValueError) as exc:
                    raise ProgramRuntimeError("type_error", f"cannot format value: {exc}", _lineno(fv)) from None
                except OverflowError as exc:  # f'{n:c}' with n < 0 or n > 0x10FFFF
                    raise ProgramRuntimeError("value_error", f"cannot format value: {exc}", _lineno(fv)) from None
            size += len(text)
            if size > self.limits.max_str_len:
                raise UnsafeProgramError(
                    "size", f"f-string longer than {self.limits.max_str_len} characters", _lineno(node)
                )
            pieces.append(text)
        return "".join(pieces)

    def listcomp(self, node: ast.ListComp, scope: Mapping[str, Any]) -> list[Any]:
        gen = node.generators[0]
        iterable = self.value(gen.iter, scope)
        if type(iterable) not in _SEQUENCES:
            raise ProgramRuntimeError(
                "type_error", f"can only iterate over a list, not {type(iterable).__name__}", _lineno(gen.iter)
            )
        if len(iterable) > self.limits.max_list_len:
            raise UnsafeProgramError(
                "size",
                f"comprehension over {len(iterable)} items exceeds {self.limits.max_list_len}",
                _lineno(node),
            )
        target = gen.target.id  # type: ignore[attr-defined]
        out: list[Any] = []
        for item in list(iterable):  # a copy: an action cannot grow the list while we iterate
            inner = {**scope, target: item}
            if all(self.value(cond, inner) for cond in gen.ifs):
                out.append(self.value(node.elt, inner))
        return self.check(out, node)

    def call(self, node: ast.Call, scope: Mapping[str, Any]) -> Any:
        name = node.func.id  # type: ignore[attr-defined]
        args = [self.value(a, scope) for a in node.args]
        kwargs = {kw.arg: self.value(kw.value, scope) for kw in node.keywords}
        if name in _BUILTIN_SIGNATURES:
            return self.check(self.builtin(name, args, node), node)
        return self.action(name, args, kwargs, node)  # type: ignore[arg-type]

    def action(self, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
        if self.n_calls >= self.limits.max_calls:
            raise UnsafeProgramError(
                "too_many_calls", f"more than {self.limits.max_calls} action calls", _lineno(node)
            )
        signature = self.signatures.get(name)
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:  # pragma: no cover - checked statically
                raise UnsafeProgramError("bad_arguments", f"{name}(): {exc}", _lineno(node)) from None
            self.check_argument_types(name, signature, bound.arguments, node)
            shown = {key: _summarize(value) for key, value in bound.arguments.items()}
        else:
            shown = {**({"args": _summarize(args)} if args else {}), **{k: _summarize(v) for k, v in kwargs.items()}}
        self.n_calls += 1
        try:
            result = self.actions[name](*args, **kwargs)
        except Exception as exc:  # actions are trusted code; their failures are the plan's failure
            raise ProgramRuntimeError(
                "action_error", f"{name} raised {type(exc).__name__}: {exc}", _lineno(node)
            ) from exc
        # Checked first: the check rejects cycles, which clean_value would refuse less clearly.
        result = clean_value(self.check(result, node, type_code="bad_return"))
        self.trace.append(
            {"call": name, "args": shown, "result_summary": _summary_text(result), "lineno": _lineno(node)}
        )
        self.tick(node)  # an action that overran is reported once it returns (and is in the trace)
        return result

    def check_argument_types(
        self, name: str, signature: inspect.Signature, arguments: Mapping[str, Any], node: ast.AST
    ) -> None:
        for key, value in arguments.items():
            param = signature.parameters[key]
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            expected = _expected_types(param.annotation)
            if expected is not None and not isinstance(value, expected):
                wanted = "/".join(sorted({t.__name__ for t in expected}))
                raise ProgramRuntimeError(
                    "bad_argument_type",
                    f"{name}(): argument '{key}' expects {wanted}, got {type(value).__name__}",
                    _lineno(node),
                )

    # -- builtins ------------------------------------------------------------------------
    def to_str(self, value: Any, node: ast.AST) -> str:
        text = str(value)  # value passed check(): bounded total size, safe types only
        if len(text) > self.limits.max_str_len:
            raise UnsafeProgramError(
                "size", f"str() result longer than {self.limits.max_str_len}", _lineno(node)
            )
        return text

    def builtin(self, name: str, args: list[Any], node: ast.Call) -> Any:
        lineno = _lineno(node)
        if name == "len":
            (value,) = args
            if type(value) not in (str, list, tuple):
                raise ProgramRuntimeError("type_error", f"len() of {type(value).__name__}", lineno)
            return len(value)
        if name == "str":
            return self.to_str(args[0], node)
        if name == "int":
            (value,) = args
            if type(value) is str and len(value) > 64:
                raise ProgramRuntimeError("value_error", "int() of a string longer than 64 characters", lineno)
            if type(value) not in (str, int, float, bool):
                raise ProgramRuntimeError("type_error", f"int() of {type(value).__name__}", lineno)
            try:
                return int(value)
            except (ValueError, OverflowError) as exc:
                raise ProgramRuntimeError("value_error", f"int(): {exc}", lineno) from None
        # min / max: one list argument or several values, as in Python
        values = args[0] if len(args) == 1 and type(args[0]) in _SEQUENCES else args
        if not values:
            raise ProgramRuntimeError("value_error", f"{name}() of an empty sequence", lineno)
        try:
            return min(values) if name == "min" else max(values)
        except TypeError as exc:
            raise ProgramRuntimeError("type_error", f"{name}(): {exc}", lineno) from None


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, (ast.In, ast.NotIn)):
        if type(right) not in (str, list, tuple):
            raise TypeError(f"'in' needs a str or list on the right, not {type(right).__name__}")
        if type(right) is str and type(left) is not str:
            raise TypeError("'in <str>' needs a str on the left")
        found = left in right
        return found if isinstance(op, ast.In) else not found
    if isinstance(op, ast.Eq):
        return left == right
    if isinstance(op, ast.NotEq):
        return left != right
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.IsNot):
        return left is not right
    if isinstance(op, ast.Lt):
        return left < right
    if isinstance(op, ast.LtE):
        return left <= right
    if isinstance(op, ast.Gt):
        return left > right
    return left >= right  # GtE; other operators were rejected by validation


def run_program(
    source: str,
    actions: Mapping[str, Callable[..., Any]],
    *,
    variables: Mapping[str, Any] | None = None,
    max_calls: int = 16,
    timeout_s: float = 30.0,
    max_str_len: int = 20000,
    max_list_len: int = 64,
    max_nodes: int = 400,
    max_depth: int = 12,
    max_total_chars: int = 200_000,
    max_source_len: int = 20_000,
) -> ExecutionResult:
    """Validate and run a planner program with the given actions.

    Args:
        source: Program text (use :func:`extract_program` on raw model output first).
        actions: Action name -> callable (trusted code), e.g. the five RAG-Critic actions.
        variables: Inputs the program may read (question, docs, prediction, feedback, ...);
            values must be str, int, float, bool, None or lists/tuples of these.
        max_calls: Limit on action calls, counting calls inside comprehensions.
        timeout_s: Wall-clock limit; checked between node evaluations and after each action
            returns (an action itself is not interrupted).
        max_str_len: Limit on string literals and every string value.
        max_list_len: Limit on list length and on comprehension iterables.
        max_nodes: Limit on syntax nodes.
        max_depth: Limit on syntax tree depth (at most 100).
        max_total_chars: Limit on a single value's total size (characters plus items).
        max_source_len: Limit on the program text, checked before parsing.

    Returns:
        The final answer, assigned variables, a trace of action calls, the call count and time.

    Raises:
        UnsafeProgramError: Disallowed syntax or an exceeded limit (see :data:`REASON_CODES`).
        ProgramRuntimeError: A value-dependent failure (see :data:`RUNTIME_CODES`), including
            ``evaluation_error`` for any exception the checks did not foresee.
        ValueError: Bad limits, action names or input variables (a caller bug, not the plan's).
        TypeError: ``source`` is not a str (a caller bug).

    No other exception escapes for any source text: whatever the program's text or values
    provoke is one of the two :class:`ProgramError` classes.
    """
    started = time.monotonic()
    if not isinstance(source, str):
        raise TypeError(f"program source must be str, got {type(source).__name__}")
    limits = _make_limits(
        max_calls, timeout_s, max_str_len, max_list_len, max_nodes, max_depth, max_total_chars, max_source_len
    )
    _check_function_names(actions, "action")
    for name, fn in actions.items():
        if name in _BUILTIN_SIGNATURES:
            raise ValueError(f"action name {name!r} collides with an allowed builtin")
        if not callable(fn):
            raise ValueError(f"action {name!r} is not callable")
    inputs = dict(variables or {})
    for name, value in inputs.items():
        if not isinstance(name, str) or not name.isidentifier() or _is_dunder(name):
            raise ValueError(f"variable name {name!r} is not a plain identifier")
        if name in actions:
            raise ValueError(f"variable {name!r} shadows an action")
        problem = _value_problem(value, max_str=math.inf, max_list=math.inf, budget=10**8)
        if problem is not None and problem[0] == "type":
            raise ValueError(f"variable {name!r}: {problem[1]}")
    signatures: dict[str, inspect.Signature | None] = {name: _signature_of(fn) for name, fn in actions.items()}
    signatures.update(_BUILTIN_SIGNATURES)

    interpreter = _Interpreter(actions, signatures, inputs, limits, started + limits.timeout_s)
    try:
        tree = _validate(source, signatures, frozenset(actions), inputs, limits)
        interpreter.run(tree)
        final_answer = interpreter.env["final_answer"]
        if final_answer is not None and type(final_answer) is not str:
            raise ProgramRuntimeError(
                "bad_final_answer", f"final_answer is a {type(final_answer).__name__}, expected str"
            )
    except ProgramError as err:
        err.trace = list(interpreter.trace)
        err.n_calls = interpreter.n_calls
        raise
    except Exception as exc:  # noqa: BLE001 - the program text provoked it, so it is the program's fault
        err = _unforeseen_error(exc)
        err.trace, err.n_calls = list(interpreter.trace), interpreter.n_calls
        raise err from exc
    return ExecutionResult(
        final_answer=final_answer,
        variables=dict(interpreter.assigned),
        trace=interpreter.trace,
        n_calls=interpreter.n_calls,
        elapsed_s=time.monotonic() - started,
    )


def _unforeseen_error(exc: Exception) -> ProgramError:
    """The :class:`ProgramError` reported for an exception the checks did not foresee.

    Actions' own exceptions never get here (they are ``action_error``); what remains comes from
    the parser or from Python evaluating a node on the program's values, so callers that keep
    the previous answer on a ProgramError stay correct for inputs nobody thought of.
    """
    if isinstance(exc, MemoryError):
        return UnsafeProgramError("size", "the program needed more memory than is available")
    if isinstance(exc, RecursionError):
        return UnsafeProgramError("depth", "evaluation recursed too deeply")
    return ProgramRuntimeError("evaluation_error", f"{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------------------------
# Extracting the program from model output
# --------------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```[ \t]*[A-Za-z0-9_+.-]*[ \t]*\r?\n(.*?)(?:```|\Z)", re.S)
_CODE_START_RE = re.compile(r"^\s*(?:[A-Za-z_]\w*\s*(?:,\s*[A-Za-z_]\w*\s*)*(?:\+)?=(?!=)|[A-Za-z_]\w*\()")


def _try_parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text, filename=_SOURCE_NAME)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _assigns_final_answer(stmt: ast.stmt) -> bool:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    names = []
    for target in targets:
        names.extend(target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])
    return any(isinstance(n, ast.Name) and n.id == "final_answer" for n in names)


def _trim_to_final_answer(program: str) -> str:
    """Drop trailing chatter: keep up to the last statement assigning final_answer.

    Tries the whole text, then ever shorter line prefixes (a bounded number of times); the first
    prefix that parses and assigns final_answer wins. Otherwise the text is returned unchanged so
    validation reports the real problem.
    """
    lines = program.split("\n")
    for end in range(len(lines), max(len(lines) - _EXTRACT_MAX_TRIMS, 0), -1):
        tree = _try_parse("\n".join(lines[:end]))
        if tree is None:
            continue
        last = [stmt for stmt in tree.body if _assigns_final_answer(stmt)]
        if not last:
            break
        stop = last[-1].end_lineno or end
        return "\n".join(lines[:stop]).rstrip()
    return program


def extract_program(text: str | None) -> str:
    """Pull the planner program out of raw model output; never raises.

    Uses the last fenced code block that mentions ``final_answer`` (else the first fenced block;
    an unclosed fence from truncated output runs to the end of the text); without fences, the
    text from the first line that looks like an assignment or a call. Leading indentation is
    removed and anything after the last statement assigning ``final_answer`` is dropped.

    Args:
        text: Model output.

    Returns:
        The program text, or "" when nothing looks like a program.
    """
    try:
        if not isinstance(text, str):
            return ""
        text = text[:_EXTRACT_MAX_CHARS].replace("\r\n", "\n").replace("\r", "\n")
        blocks = [m.group(1) for m in _FENCE_RE.finditer(text)]
        if blocks:
            with_answer = [b for b in blocks if "final_answer" in b]
            candidate = with_answer[-1] if with_answer else blocks[0]
        else:
            lines = text.split("\n")
            start = next((i for i, line in enumerate(lines) if _CODE_START_RE.match(line)), None)
            if start is None:
                return ""
            candidate = "\n".join(lines[start:])
        candidate = textwrap.dedent(candidate).strip()
        if not candidate:
            return ""
        return _trim_to_final_answer(candidate)
    except Exception:  # tolerant by contract: malformed output yields "", counted by the caller
        return ""
