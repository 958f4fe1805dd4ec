"""Property-based tests of ``run_program``: for any source text it returns or raises a
ProgramError, within its time limit and bounded memory, and every string it hands back is
encodable as UTF-8.

Three generators feed it: random text (surrogates included), text built from a grammar of
Python-like statements over the five action names (literals, big numbers, f-strings with format
specs, deep nesting, surrogate escapes), and random ``ast`` trees turned into source with
:func:`ast.unparse`. Examples are derandomized, so a run is reproducible and needs no example
database.
"""

from __future__ import annotations

import ast
import json
import time
import tracemalloc
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ragcritic_lib.agent.executor import REASON_CODES, RUNTIME_CODES, ProgramError, run_program
from ragcritic_lib.text import has_unencodable

TIMEOUT_S = 2.0
# Generous bounds: the interpreter checks its clock between nodes and after each action, and
# its value limits keep every value well under a megabyte; these only catch a runaway.
ELAPSED_BOUND_S = TIMEOUT_S + 10.0
PEAK_MEMORY_BOUND = 64 * 2**20

ACTION_NAMES = ("Retrieval", "RewriteQuery", "DecomposeQuery", "RefineDoc", "GenerateAnswer")
BUILTIN_NAMES = ("len", "str", "int", "min", "max")
VARIABLES = {
    "question": "Who trained the most Melbourne Cup winners?",
    "docs": ["Bart Cummings trained 12 winners.", "Etienne de Mestre won the first two cups."],
    "prediction": "Etienne de Mestre",
    "feedback": "The answer relies on partial information.",
}
NAMES = (*VARIABLES, "x", "y", "d", "final_answer")
KEYWORDS = ("query", "topk", "instruction", "doc", "docs", "additional_instruction", "k")


def Retrieval(query: str, topk: int) -> list[str]:  # noqa: N802 - the paper's action names
    return [f"doc{i}: {query[:40]}" for i in range(min(max(topk, 0), 5))]


def RewriteQuery(query: str, instruction: str) -> list[str]:  # noqa: N802
    return [f"{instruction}: {query[:200]}"]


def DecomposeQuery(query: str) -> list[str]:  # noqa: N802
    return [f"part 1 of {query[:100]}", f"part 2 of {query[:100]}"]


def RefineDoc(query: str, doc: str, instruction: str) -> str:  # noqa: N802
    return doc[:300] + "\ud83d"  # a generation cut inside a surrogate pair


def GenerateAnswer(query: str, docs: list[str], additional_instruction: str | None = None) -> str:  # noqa: N802
    return f"answer from {len(docs)} docs"


ACTIONS = {fn.__name__: fn for fn in (Retrieval, RewriteQuery, DecomposeQuery, RefineDoc, GenerateAnswer)}


def check_run(source: str) -> None:
    """Run ``source``; only ProgramError may escape, within the bounds, with clean strings."""
    tracemalloc.start()
    started = time.monotonic()
    result = None
    try:
        result = run_program(source, ACTIONS, variables=VARIABLES, timeout_s=TIMEOUT_S)
    except ProgramError as err:
        assert err.reason_code in REASON_CODES or err.reason_code in RUNTIME_CODES, err.reason_code
        assert not has_unencodable(err.message)
        assert not has_unencodable(json.dumps(err.trace, ensure_ascii=False))
    finally:
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < ELAPSED_BOUND_S, f"run took {elapsed:.1f}s"
    assert peak < PEAK_MEMORY_BOUND, f"run allocated {peak / 2**20:.0f} MiB at its peak"
    if result is not None:
        assert result.final_answer is None or type(result.final_answer) is str
        dumped = json.dumps([result.final_answer, result.variables, result.trace], ensure_ascii=False)
        assert not has_unencodable(dumped)


FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None)

# --------------------------------------------------------------------------------------------
# Random text
# --------------------------------------------------------------------------------------------
ANY_CHAR = st.characters(exclude_categories=())  # surrogates (category Cs) included
PROGRAM_CHARS = st.one_of(ANY_CHAR, st.sampled_from(list("()[]{}'\"=+-*:,.\n fx0129_\\")))


@FUZZ
@given(st.text(alphabet=PROGRAM_CHARS, max_size=200))
def test_random_text(source: str) -> None:
    check_run(source)


# --------------------------------------------------------------------------------------------
# A grammar of Python-like statements
# --------------------------------------------------------------------------------------------
# One family of programs uses only syntax the executor admits (so they run, and their values hit
# the runtime checks: code points out of range, big ints, surrogates, bad indices); the other
# also mixes in operators, deep nesting, prefix chains and statements it must refuse.
SMALL_INTS = st.sampled_from(["0", "3", "-1", "55357", "1114111", "1114112", "9223372036854775807", "True", "None"])
HOSTILE_INTS = st.one_of(
    st.sampled_from(["9223372036854775808", "0x" + "f" * 40, "10**10**10", "2**64", "1e309"]),
    st.integers(4200, 4400).map(lambda n: "9" * n),  # around the int->str conversion limit (4300 digits)
)
FLOAT_LITERALS = st.sampled_from(["1.5", "1e308", "-1e308", "0.0", "1e-320", "(1e308 + 1e308)"])
STR_LITERALS = st.one_of(
    st.text(alphabet=st.one_of(ANY_CHAR, st.sampled_from(list("{}'\"\\\n"))), max_size=12).map(repr),
    st.sampled_from([
        "'\\ud83d'", "'\\ud83d\\ude00'", "'\\ude00'", "'\\x00'", "'\\N{BULLET}'", "'{}'", "\"'\"", "'%s'",
    ]),
)
# Ints at the edges of the code-point range, where 'c' formatting changes behaviour.
CODE_POINTS = st.sampled_from(["65", "55357", "56832", "1114111", "1114112", "9223372036854775807"])
# Fill, alignment, width and presentation type, as a model might combine them (all admitted) ...
ADMITTED_SPECS = st.builds(
    lambda align, width, kind: f"{align}{width}{kind}", st.sampled_from(["", "", ">", "*^", "0="]),
    st.sampled_from(["", "", "5", "100"]), st.sampled_from(list("cccdxbeEfgns%")),
)
# ... and specs the validator refuses or that fail on most values.
FORMAT_SPECS = st.one_of(
    ADMITTED_SPECS,
    st.sampled_from([
        "", "^101", ",", "_b", ".100f", "100.100%", "#x", "=", "0=5", "\ud83d<5", "\\ud83d<5", "{x}",
        ">99999", ".0", "0>100c", ",c",
    ]),
)
NAME = st.sampled_from(NAMES)


SIGNATURES = {
    "Retrieval": ("query", "topk"), "RewriteQuery": ("query", "instruction"), "DecomposeQuery": ("query",),
    "RefineDoc": ("query", "doc", "instruction"), "GenerateAnswer": ("query", "docs"),
}


def _well_formed_call(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """An action called with its own keywords, or a builtin with one positional argument."""
    action = st.sampled_from(ACTION_NAMES).flatmap(
        lambda name: st.lists(children, min_size=len(SIGNATURES[name]), max_size=len(SIGNATURES[name])).map(
            lambda values: _call(name, [], list(zip(SIGNATURES[name], values)))
        )
    )
    return st.one_of(action, st.builds(lambda name, arg: f"{name}({arg})", st.sampled_from(BUILTIN_NAMES), children))


def _call(name: str, args: list[str], kwargs: list[tuple[str, str]]) -> str:
    return f"{name}({', '.join([*args, *(f'{k}={v}' for k, v in kwargs)])})"


def _fstring(field: str, conversion: str, spec: str) -> str:
    return f'f"x{{{field}{conversion}{":" + spec if spec else ""}}}"'


def _expressions(
    names: st.SearchStrategy[str], ints: st.SearchStrategy[str], specs: st.SearchStrategy[str], refuse: bool
) -> st.SearchStrategy[str]:
    # A formatted number is an atom too: plans format counts and indices into their instructions.
    formatted = st.builds(_fstring, st.one_of(CODE_POINTS, names), st.just(""), specs)
    atoms = st.one_of(ints, FLOAT_LITERALS, STR_LITERALS, names, formatted)

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        iterable = st.one_of(names, _well_formed_call(children), st.builds(lambda items: f"[{', '.join(items)}]",
                                                                           st.lists(children, max_size=3)))
        # Plans mostly join text, so '+' usually gets strings (random operands would nearly always
        # stop the program at its first type error, before its later statements run).
        text = st.one_of(STR_LITERALS, formatted, st.sampled_from(["question", "prediction", "feedback"]),
                         st.builds(lambda e: f"str({e})", children))
        allowed = st.one_of(
            st.builds(lambda a, b: f"{a} + {b}", text, text),
            st.builds(lambda a, b: f"{a} + {b}", children, children),
            _well_formed_call(children),
            st.builds(lambda a, i: f"{a}[{i}]", children,
                      st.sampled_from(["0", "-1", "1:3", "::2", "9223372036854775807", "-9223372036854775807"])),
            st.builds(lambda e, it, cond: f"[{e} for item in {it}{cond}]", children, iterable,
                      st.sampled_from(["", " if item", " if len(item) > 1", " if not item", " if item in question"])),
            st.builds(lambda items: f"[{', '.join(items)}]", st.lists(children, max_size=3)),
            st.builds(_fstring, st.one_of(ints, ints, names, FLOAT_LITERALS, st.sampled_from(["'a'", "''", "item"])),
                      st.sampled_from(["", "", "!s"]), specs),
        )
        if not refuse:
            return allowed
        refused = st.one_of(
            st.builds(_call, st.sampled_from(ACTION_NAMES + BUILTIN_NAMES), st.lists(children, max_size=2),
                      st.lists(st.tuples(st.sampled_from(KEYWORDS), children), max_size=3)),
            st.builds(lambda a, op, b: f"{a} {op} {b}", children,
                      st.sampled_from(["*", "**", "-", "%", "and", "<"]), children),
            st.builds(lambda e, n: "(" * n + e + ")" * n, children, st.sampled_from([1, 2, 201])),
            st.builds(lambda e, op, n: op * n + e, children, st.sampled_from(["-", "not ", "~"]),
                      st.sampled_from([1, 2, 50, 3000])),
        )
        return st.one_of(allowed, allowed, allowed, refused)

    return st.recursive(atoms, extend, max_leaves=6)


# Admitted programs start with ``n = <int>`` (as plans set topk), so n is a name holding an int,
# negative ones included (a negative literal is no f-string field of its own).
ADMITTED_EXPR = _expressions(st.sampled_from([*VARIABLES, "n", "n"]), SMALL_INTS, ADMITTED_SPECS, refuse=False)
ANY_EXPR = _expressions(NAME, st.one_of(SMALL_INTS, HOSTILE_INTS), FORMAT_SPECS, refuse=True)
ADMITTED_PROGRAM = st.builds(
    lambda n, body, answer: "\n".join([f"n = {n}", *body, f"final_answer = {answer}"]),
    st.one_of(CODE_POINTS, st.sampled_from(["-1", "-9223372036854775807", "0"])),
    st.lists(st.builds(lambda n, e: f"{n} = {e}", st.sampled_from(["x", "y", "d"]), ADMITTED_EXPR), max_size=3),
    ADMITTED_EXPR,
)
ANY_STATEMENT = st.one_of(
    st.builds(lambda n, e: f"{n} = {e}", NAME, ANY_EXPR),
    st.builds(lambda n, e: f"{n} += {e}", NAME, ANY_EXPR),
    st.builds(lambda a, b, e: f"{a}, {b} = {e}", NAME, NAME, ANY_EXPR),
    ANY_EXPR,
    st.sampled_from(["import os", "pass", "def f(): pass", "x.y = 1", "while True: pass", "del x"]),
)
ANY_PROGRAM = st.builds(
    lambda body, answer: "\n".join([*body, f"final_answer = {answer}"]), st.lists(ANY_STATEMENT, max_size=4), ANY_EXPR
)


@FUZZ
@given(ADMITTED_PROGRAM)
def test_grammar_programs_of_admitted_syntax(source: str) -> None:
    check_run(source)


@settings(FUZZ, max_examples=200)
@given(ANY_PROGRAM)
def test_grammar_programs_with_refused_syntax(source: str) -> None:
    check_run(source)


# --------------------------------------------------------------------------------------------
# Generated syntax trees
# --------------------------------------------------------------------------------------------
LOAD = ast.Load()
CONSTANT_VALUES = st.one_of(
    st.text(alphabet=ANY_CHAR, max_size=8),
    st.integers(-(2**70), 2**70),
    st.sampled_from([1114112, -1, 55357, 56832, 2**63 - 1, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from([b"bytes", 1j, ...]),
)
AST_LEAF = st.one_of(
    st.builds(ast.Constant, CONSTANT_VALUES),
    st.builds(lambda n: ast.Name(id=n, ctx=LOAD), st.sampled_from(tuple(VARIABLES))),
)


AST_INDEX = st.one_of(
    st.builds(ast.Constant, st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63) + 1])),
    st.builds(lambda n: ast.Name(id=n, ctx=LOAD), st.sampled_from(tuple(VARIABLES))),
)


def _ast_call(name: str, args: list[ast.expr], kwargs: list[tuple[str, ast.expr]]) -> ast.Call:
    keywords = [ast.keyword(arg=k, value=v) for k, v in kwargs]
    return ast.Call(func=ast.Name(id=name, ctx=LOAD), args=args, keywords=keywords)


def _ast_fstring(value: ast.expr, conversion: int, spec: str, text: str) -> ast.JoinedStr:
    format_spec = ast.JoinedStr(values=[ast.Constant(spec)]) if spec else None
    return ast.JoinedStr(values=[ast.Constant(text), ast.FormattedValue(value=value, conversion=conversion,
                                                                        format_spec=format_spec)])


def _ast_listcomp(elt: ast.expr, target: str, iterable: ast.expr, conds: list[ast.expr]) -> ast.ListComp:
    gen = ast.comprehension(target=ast.Name(id=target, ctx=ast.Store()), iter=iterable, ifs=conds, is_async=0)
    return ast.ListComp(elt=elt, generators=[gen])


def _ast_extend(children: st.SearchStrategy[ast.expr], refuse: bool) -> st.SearchStrategy[ast.expr]:
    allowed = st.one_of(
        st.builds(lambda a, b: ast.BinOp(left=a, op=ast.Add(), right=b), children, children),
        st.builds(_ast_call, st.sampled_from(ACTION_NAMES + BUILTIN_NAMES), st.lists(children, max_size=2),
                  st.lists(st.tuples(st.sampled_from(KEYWORDS), children), max_size=3)),
        st.builds(lambda a, i: ast.Subscript(value=a, slice=i, ctx=LOAD), children, AST_INDEX),
        st.builds(lambda a, lo, hi: ast.Subscript(value=a, slice=ast.Slice(lower=lo, upper=hi), ctx=LOAD),
                  children, st.none() | AST_INDEX, st.none() | AST_INDEX),
        st.builds(_ast_fstring, st.one_of(children, st.builds(ast.Constant, st.sampled_from([1114112, -1, 55357, 65]))),
                  st.sampled_from([-1, -1, ord("s"), ord("r")]), FORMAT_SPECS, st.text(max_size=3)),
        st.builds(_ast_listcomp, children, st.just("item"), children, st.lists(children, max_size=1)),
        st.builds(lambda items: ast.List(elts=items, ctx=LOAD), st.lists(children, max_size=3)),
        st.builds(lambda items: ast.Tuple(elts=items, ctx=LOAD), st.lists(children, max_size=3)),
    )
    if not refuse:
        return allowed
    ops = st.sampled_from([ast.Mult, ast.Pow, ast.Sub, ast.Mod, ast.LShift])
    refused = st.one_of(
        st.builds(lambda a, i: ast.Subscript(value=a, slice=i, ctx=LOAD), children, children),
        st.builds(lambda a, op, b: ast.BinOp(left=a, op=op(), right=b), children, ops, children),
        st.builds(lambda op, a: ast.UnaryOp(op=op(), operand=a),
                  st.sampled_from([ast.USub, ast.Not, ast.Invert]), children),
        st.builds(lambda n: ast.Name(id=n, ctx=LOAD), st.sampled_from(ACTION_NAMES + ("__import__", "open"))),
        st.builds(lambda a, op, b: ast.Compare(left=a, ops=[op()], comparators=[b]), children,
                  st.sampled_from([ast.Lt, ast.Eq, ast.In, ast.Is]), children),
        st.builds(lambda a, b: ast.BoolOp(op=ast.And(), values=[a, b]), children, children),
        st.builds(lambda a, b, c: ast.IfExp(test=a, body=b, orelse=c), children, children, children),
        st.builds(lambda a, attr: ast.Attribute(value=a, attr=attr, ctx=LOAD), children,
                  st.sampled_from(["upper", "__class__"])),
    )
    return st.one_of(allowed, allowed, allowed, refused)


# As in the grammar: half of the trees use only admitted node kinds, half mix in refused ones.
AST_ADMITTED = st.recursive(AST_LEAF, lambda children: _ast_extend(children, refuse=False), max_leaves=8)
AST_ANY = st.recursive(AST_LEAF, lambda children: _ast_extend(children, refuse=True), max_leaves=8)


def _ast_statements(expr: st.SearchStrategy[ast.expr]) -> st.SearchStrategy[ast.stmt]:
    return st.one_of(
        st.builds(lambda n, v: ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=v),
                  st.sampled_from(["x", "y", "d"]), expr),
        st.builds(lambda n, v: ast.AugAssign(target=ast.Name(id=n, ctx=ast.Store()), op=ast.Add(), value=v),
                  st.sampled_from(tuple(VARIABLES)), expr),
        st.builds(lambda v: ast.Expr(value=v), expr),
    )


@st.composite
def ast_programs(draw: Any) -> str:
    expr = draw(st.sampled_from([AST_ADMITTED, AST_ANY]))
    body = draw(st.lists(_ast_statements(expr), max_size=3))
    answer = draw(expr)
    body.append(ast.Assign(targets=[ast.Name(id="final_answer", ctx=ast.Store())], value=answer))
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    try:
        return ast.unparse(module)
    except ValueError:  # e.g. a backslash in an f-string field, which 3.11 cannot spell
        assume(False)
        raise  # pragma: no cover - assume(False) does not return


@FUZZ
@given(ast_programs())
def test_generated_syntax_trees(source: str) -> None:
    check_run(source)
