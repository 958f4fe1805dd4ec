"""Tests for the restricted planner-program executor (ragcritic_lib.agent.executor).

Three tiers: a corpus of hostile programs (each rejected with its reason code, or stopped by a
limit), valid programs with exact traces, and extraction of programs from raw model output.
The actions here are small deterministic fakes that record every call.
"""

import ast
import json
import pickle
import types
from pathlib import Path
from typing import Any

import pytest

from ragcritic_lib.agent import executor
from ragcritic_lib.agent.executor import (
    ALLOWED_BUILTINS,
    REASON_CODES,
    RUNTIME_CODES,
    ExecutionResult,
    ProgramError,
    ProgramRuntimeError,
    UnsafeProgramError,
    extract_program,
    run_program,
    validate_program,
)

QUESTION = "Who has trained the most Melbourne Cup winners?"
VARIABLES = {
    "question": QUESTION,
    "docs": ["Etienne de Mestre won the first two cups.", "Bart Cummings trained 12 winners."],
    "prediction": "Etienne de Mestre",
    "feedback": "The answer relies on partial information.",
}

PAPER_PROGRAM = '''clarified_query = RewriteQuery(query=question, instruction="clarify")
retrieved_documents = Retrieval(query=clarified_query[0], topk=5)
summarized_documents = [
    RefineDoc(query=question, doc=doc, instruction="summarize") for doc in retrieved_documents
]
final_answer = GenerateAnswer(
    query=question,
    docs=summarized_documents,
    additional_instruction="Ensure the answer is accurate and provides the name of the trainer."
)'''


class FakeActions:
    """The five RAG-Critic actions as deterministic functions that log their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def Retrieval(self, query: str, topk: int) -> list[str]:  # noqa: N802 - paper's names
        self.calls.append(("Retrieval", {"query": query, "topk": topk}))
        return [f"doc{i} for {query}" for i in range(topk)]

    def RewriteQuery(self, query: str, instruction: str) -> list[str]:  # noqa: N802
        self.calls.append(("RewriteQuery", {"query": query, "instruction": instruction}))
        return [f"{instruction}: {query}"]

    def DecomposeQuery(self, query: str) -> list[str]:  # noqa: N802
        self.calls.append(("DecomposeQuery", {"query": query}))
        return [f"sub1 of {query}", f"sub2 of {query}"]

    def RefineDoc(self, query: str, doc: str, instruction: str) -> str:  # noqa: N802
        self.calls.append(("RefineDoc", {"query": query, "doc": doc, "instruction": instruction}))
        return f"{instruction}({doc})"

    def GenerateAnswer(  # noqa: N802
        self, query: str, docs: list[str], additional_instruction: str | None = None
    ) -> str:
        self.calls.append(("GenerateAnswer", {"query": query, "docs": list(docs)}))
        return f"answer from {len(docs)} docs" + (f" [{additional_instruction}]" if additional_instruction else "")

    def mapping(self) -> dict[str, Any]:
        return {
            name: getattr(self, name)
            for name in ("Retrieval", "RewriteQuery", "DecomposeQuery", "RefineDoc", "GenerateAnswer")
        }


@pytest.fixture()
def fake() -> FakeActions:
    return FakeActions()


def run(fake: FakeActions, source: str, **kwargs: Any) -> ExecutionResult:
    variables = kwargs.pop("variables", VARIABLES)
    return run_program(source, fake.mapping(), variables=variables, **kwargs)


# ----------------------------------------------------------------------------------------------
# Hostile programs rejected before anything runs
# ----------------------------------------------------------------------------------------------

FA = "final_answer = prediction\n"  # appended where a program needs a final answer to get far

HOSTILE: list[tuple[str, str, str]] = [
    # (test id, program, expected reason code)
    ("import", "import os\n" + FA, "import"),
    ("from_import", "from os import system\n" + FA, "import"),
    ("dunder_import", '__import__("os").system("ls")\n' + FA, "dunder"),
    ("subclasses_walk", "x = ().__class__.__bases__[0].__subclasses__()\n" + FA, "dunder"),
    ("globals_walk", "final_answer = Retrieval.__globals__", "dunder"),
    ("builtins_assign", "__builtins__ = 1\n" + FA, "dunder"),
    ("dunder_keyword", "final_answer = GenerateAnswer(query=question, docs=docs, __class__=1)", "dunder"),
    ("fullwidth_dunder_import", "x = \uff3f\uff3fimport\uff3f\uff3f('os')\n" + FA, "syntax"),
    ("getattr", 'final_answer = getattr(question, "upper")()', "call_not_allowed"),
    ("getattr_value", 'x = getattr(question, "upper")\n' + FA, "call_not_allowed"),
    ("setattr", 'setattr(question, "x", 1)\n' + FA, "call_not_allowed"),
    ("vars", "final_answer = str(vars())", "call_not_allowed"),
    ("globals", "final_answer = str(globals())", "call_not_allowed"),
    ("locals", "final_answer = str(locals())", "call_not_allowed"),
    ("eval", 'final_answer = eval("1 + 1")', "call_not_allowed"),
    ("exec", 'exec("import os")\n' + FA, "call_not_allowed"),
    ("compile", 'x = compile("1", "f", "eval")\n' + FA, "call_not_allowed"),
    ("open", 'final_answer = open("/etc/passwd")', "call_not_allowed"),
    ("type", "final_answer = type(question)", "call_not_allowed"),
    ("breakpoint", "breakpoint()\n" + FA, "call_not_allowed"),
    ("print", FA + "print(final_answer)", "call_not_allowed"),
    ("fullwidth_eval", "final_answer = \uff45\uff56\uff41\uff4c('1')", "call_not_allowed"),
    ("call_result_call", 'final_answer = RewriteQuery(query=question, instruction="x")[0]()', "call_not_allowed"),
    ("str_join", 'final_answer = " ".join(docs)', "attribute"),
    ("list_append", "docs.append(1)\n" + FA, "attribute"),
    ("method_upper", "final_answer = question.upper()", "attribute"),
    ("attribute_store", "question.x = 1\n" + FA, "attribute"),
    ("str_mult", 'final_answer = "a" * 10**9', "operator"),
    ("list_mult", "x = [0] * 10**9\n" + FA, "operator"),
    ("pow", "x = 10**9\n" + FA, "operator"),
    ("minus_name", "x = -question\n" + FA, "operator"),
    ("not_outside_filter", "x = not docs\n" + FA, "operator"),
    ("and_outside_filter", "final_answer = prediction or question", "operator"),
    ("compare_outside_filter", 'final_answer = question == "x"', "operator"),
    ("aug_mult", FA + "final_answer *= 2", "operator"),
    ("lambda", "f = lambda: 1\n" + FA, "lambda"),
    ("lambda_default_walk", "f = lambda g=().__class__: g\n" + FA, "dunder"),
    ("walrus", "final_answer = (y := prediction)", "walrus"),
    ("while", "while True:\n    x = 1\n" + FA, "loop"),
    ("for", "for d in docs:\n    Retrieval(query=d, topk=1)\n" + FA, "loop"),
    ("try", "try:\n    final_answer = question\nexcept Exception:\n    final_answer = prediction", "control_flow"),
    ("if", "if docs:\n    final_answer = prediction", "control_flow"),
    ("ternary", 'final_answer = prediction if docs else "none"', "control_flow"),
    ("with", 'with open("f") as fh:\n    x = 1\n' + FA, "control_flow"),
    ("raise", "raise SystemExit\n" + FA, "control_flow"),
    ("del", "del docs\n" + FA, "control_flow"),
    ("match", "match docs:\n    case _:\n        x = 1\n" + FA, "control_flow"),
    ("def", "def f():\n    return 1\n" + FA, "definition"),
    ("class", "class A:\n    x = 1\n" + FA, "definition"),
    ("async_def", "async def f():\n    return 1\n" + FA, "definition"),
    ("global", "global docs\n" + FA, "scope"),
    ("await", "x = await Retrieval(query=question, topk=1)\n" + FA, "async"),
    ("yield", "x = yield 1\n" + FA, "async"),
    ("star_args", "final_answer = GenerateAnswer(*docs)", "starred"),
    ("star_list", "x = [*docs]\n" + FA, "starred"),
    ("kwargs_unpacking", 'final_answer = GenerateAnswer(**{"query": question, "docs": docs})', "starred"),
    ("dict_unpacking", "x = {**VARS}\n" + FA, "starred"),
    ("generator_exp", "x = (d for d in docs)\n" + FA, "comprehension"),
    ("set_comp", "x = {d for d in docs}\n" + FA, "comprehension"),
    ("dict_comp", "x = {d: 1 for d in docs}\n" + FA, "comprehension"),
    (
        "nested_generators",
        "x = [d for d in Retrieval(query=question, topk=5) for e in Retrieval(query=d, topk=5)]\n" + FA,
        "comprehension",
    ),
    (
        "comprehension_chain_3_deep",
        "x = [[[Retrieval(query=a, topk=1) for a in docs] for b in docs] for c in docs]\n" + FA,
        "comprehension",
    ),
    ("comprehension_over_comprehension", "x = [a for a in [b for b in docs]]\n" + FA, "comprehension"),
    ("comprehension_tuple_target", "x = [a for a, b in docs]\n" + FA, "comprehension"),
    ("comprehension_over_string", 'x = [c for c in "abc"]\n' + FA, "comprehension"),
    ("alias_action", "r = Retrieval\nfinal_answer = r(query=question, topk=1)", "function_reference"),
    ("alias_builtin", "f = len\n" + FA, "function_reference"),
    ("action_in_list", "fs = [Retrieval, GenerateAnswer]\n" + FA, "function_reference"),
    ("action_as_argument", "final_answer = GenerateAnswer(query=question, docs=Retrieval)", "function_reference"),
    ("call_via_comprehension", "x = [f(query=question) for f in docs]\n" + FA, "call_not_allowed"),
    ("rebind_action", 'Retrieval = "x"\n' + FA, "reserved_name"),
    ("rebind_builtin", "len = 1\n" + FA, "reserved_name"),
    ("comprehension_target_shadows_action", "x = [Retrieval for Retrieval in docs]\n" + FA, "reserved_name"),
    ("undefined_name", "final_answer = os", "unknown_name"),
    ("use_before_assign", "final_answer = later\nlater = prediction", "unknown_name"),
    ("comprehension_var_leak", "x = [d for d in docs]\nfinal_answer = d", "unknown_name"),
    ("unknown_keyword", "final_answer = GenerateAnswer(query=question, docs=docs, topK=3)", "bad_arguments"),
    ("missing_argument", "x = Retrieval(query=question)\n" + FA, "bad_arguments"),
    ("too_many_positional", "x = Retrieval(question, 5, 6)\n" + FA, "bad_arguments"),
    ("builtin_keyword", "x = len(value=docs)\n" + FA, "bad_arguments"),
    ("bytes_literal", 'final_answer = b"x"', "bad_literal"),
    ("complex_literal", "x = 1j\n" + FA, "bad_literal"),
    ("ellipsis", "x = ...\n" + FA, "bad_literal"),
    ("huge_int", "x = 123456789012345678901234567890\n" + FA, "bad_literal"),
    ("inf_literal", "x = 1e999\n" + FA, "bad_literal"),
    ("fstring_attribute", 'final_answer = f"{question.__class__}"', "dunder"),
    ("format_method", 'final_answer = "{0.__class__}".format(question)', "attribute"),
    ("fstring_repr_nested_spec", "final_answer = f\"{question!r:{'>'*10**8}}\"", "format"),
    ("fstring_nested_spec", "final_answer = f\"{question:{'>'}{1000}}\"", "format"),
    ("fstring_huge_width", 'final_answer = f"{question:>100000000}"', "format"),
    ("fstring_call_field", 'final_answer = f"{Retrieval(query=question, topk=1)}"', "format"),
    ("fstring_ascii", 'final_answer = f"{question!a}"', "format"),
    ("index_expression", "final_answer = docs[len(docs)]", "subscript"),
    ("string_index", 'final_answer = docs["a"]', "subscript"),
    ("zero_step", "x = docs[::0]\n" + FA, "subscript"),
    ("subscript_store", "docs[0] = 1\n" + FA, "assignment"),
    ("chained_assign", "a = b = 1\n" + FA, "assignment"),
    ("annotated_assign", "x: int = 1\n" + FA, "assignment"),
    ("starred_target", "a, *b = docs\n" + FA, "starred"),
    ("dict_display", 'final_answer = {"a": 1}', "node_not_allowed"),
    ("set_display", "x = {1, 2}\n" + FA, "node_not_allowed"),
    ("bare_operation", FA + "question + question", "node_not_allowed"),
    ("no_final_answer", 'x = Retrieval(query=question, topk=2)', "no_final_answer"),
    ("final_answer_only_in_comprehension", "x = [1 for final_answer in docs]", "no_final_answer"),
    ("empty", "", "no_final_answer"),
    ("static_too_many_calls", "x = Retrieval(query=question, topk=1)\n" * 17 + FA, "too_many_calls"),
    ("prose", "Here is the plan: retrieve again.", "syntax"),
    ("null_byte", "x\x00 = 1\n" + FA, "syntax"),
    ("nested_lists_300", "final_answer = " + "[" * 300 + "]" * 300, "syntax"),
    ("nested_parens_300", "final_answer = " + "(" * 300 + "prediction" + ")" * 300, "syntax"),
    ("nested_lists_50", "final_answer = " + "[" * 50 + "]" * 50, "depth"),
    ("long_concat_chain", "final_answer = " + "prediction + " * 1000 + "prediction", "depth"),
    ("unary_chain", "x = " + "-" * 3000 + "1\n" + FA, "depth"),
    ("many_statements", "x = 1\n" * 500 + FA, "size"),
]


@pytest.mark.parametrize(("source", "code"), [(s, c) for _, s, c in HOSTILE], ids=[i for i, _, _ in HOSTILE])
def test_hostile_program_is_rejected_before_any_call(fake: FakeActions, source: str, code: str) -> None:
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={**VARIABLES, "VARS": ["x"]})
    assert info.value.reason_code == code, info.value
    assert fake.calls == []  # static rejection: no action ran
    assert info.value.n_calls == 0 and info.value.trace == []


def test_every_expected_code_is_documented() -> None:
    assert {code for _, _, code in HOSTILE} <= set(REASON_CODES)
    assert not set(REASON_CODES) & set(RUNTIME_CODES)


def test_rejection_reports_line_and_message(fake: FakeActions) -> None:
    source = 'a = RewriteQuery(query=question, instruction="clarify")\nb = a[0].strip()\n' + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source)
    err = info.value
    assert (err.reason_code, err.code, err.lineno) == ("attribute", "attribute", 2)
    assert "'.strip'" in err.message
    assert str(err) == "attribute: attribute access '.strip' is not allowed (line 2)"
    restored = pickle.loads(pickle.dumps(err))
    assert (type(restored), restored.reason_code, restored.lineno) == (UnsafeProgramError, "attribute", 2)


def test_source_longer_than_limit_is_rejected(fake: FakeActions) -> None:
    source = f'final_answer = "{"x" * 200}"'
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, max_source_len=100)
    assert (info.value.reason_code, info.value.message) == ("size", "program has 217 characters, limit 100")


def test_long_string_literal_is_rejected(fake: FakeActions) -> None:
    source = f'final_answer = "{"x" * 150}"'
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, max_str_len=100)
    assert (info.value.reason_code, info.value.message) == ("size", "string literal longer than 100")


def test_static_checks_alone(fake: FakeActions) -> None:
    tree = validate_program(PAPER_PROGRAM, fake.mapping(), variables=["question"])
    assert isinstance(tree, ast.Module) and len(tree.body) == 4
    # names only: calls are allowed by name, signatures are not checked
    loose = "final_answer = GenerateAnswer(query=question, documents=docs)"
    validate_program(loose, ["GenerateAnswer"], variables=["question", "docs"])
    with pytest.raises(UnsafeProgramError) as info:
        validate_program(loose, {"GenerateAnswer": fake.GenerateAnswer}, variables=["question", "docs"])
    assert info.value.reason_code == "bad_arguments"
    with pytest.raises(UnsafeProgramError) as info:
        validate_program(PAPER_PROGRAM, fake.mapping())  # question not declared
    assert (info.value.reason_code, info.value.lineno) == ("unknown_name", 1)
    assert fake.calls == []


# ----------------------------------------------------------------------------------------------
# Hostile programs stopped by runtime limits
# ----------------------------------------------------------------------------------------------


def test_comprehension_with_a_thousand_calls_stops_at_max_calls(fake: FakeActions) -> None:
    items = [f"q{i}" for i in range(1000)]
    source = "x = [Retrieval(query=q, topk=1) for q in items]\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={**VARIABLES, "items": items}, max_calls=16, max_list_len=2000)
    assert (info.value.reason_code, info.value.lineno) == ("too_many_calls", 1)
    assert len(fake.calls) == 16
    assert info.value.n_calls == 16
    assert [t["args"]["query"] for t in info.value.trace] == items[:16]


def test_nested_comprehension_calls_count_against_the_limit(fake: FakeActions) -> None:
    items = [f"q{i}" for i in range(64)]
    source = "x = [[RefineDoc(query=a, doc=b, instruction='explain') for a in items] for b in items]\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={**VARIABLES, "items": items})
    assert info.value.reason_code == "too_many_calls"
    assert len(fake.calls) == 16


def test_calls_in_comprehension_filters_count(fake: FakeActions) -> None:
    source = "x = [d for d in docs if RefineDoc(query=question, doc=d, instruction='x')]\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, max_calls=1)
    assert info.value.reason_code == "too_many_calls"
    assert len(fake.calls) == 1


def test_comprehension_over_huge_list_is_refused_before_iterating(fake: FakeActions) -> None:
    source = "x = [RefineDoc(query=question, doc=d, instruction='x') for d in docs]\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={**VARIABLES, "docs": ["d"] * 10_000})
    assert info.value.reason_code == "size"
    assert fake.calls == []


def test_string_doubling_stops_at_max_str_len(fake: FakeActions) -> None:
    source = "a = question + question\nb = a + a\nc = b + b\nd = c + c\nfinal_answer = d + d"
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={"question": "x" * 1000}, max_str_len=10_000)
    assert (info.value.reason_code, info.value.lineno) == ("size", 4)  # d would be 16,000 chars


def test_list_doubling_stops_at_max_list_len(fake: FakeActions) -> None:
    source = "a = docs + docs\nb = a + a\nc = b + b\nd = c + c\ne = d + d\nf = e + e\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source)  # docs has 2 items: 4, 8, 16, 32, 64, then 128 > 64
    assert (info.value.reason_code, info.value.lineno) == ("size", 6)


def test_nested_list_total_size_is_bounded(fake: FakeActions) -> None:
    row = "[" + ", ".join(["question"] * 30) + "]"
    source = f"a = {row}\nb = [a, a, a, a, a, a, a, a]\nfinal_answer = str(b)"
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={"question": "y" * 1000})  # a: 30k chars, b: 240k > 200k
    assert (info.value.reason_code, info.value.lineno) == ("size", 2)


def test_fstring_result_is_bounded(fake: FakeActions) -> None:
    source = 'final_answer = f"{question}{question}{question}"'
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, variables={"question": "z" * 8000}, max_str_len=20_000)
    assert info.value.reason_code == "size"


def test_oversized_action_result_is_refused(fake: FakeActions) -> None:
    actions = {**fake.mapping(), "Retrieval": lambda query, topk: ["w" * 50_000]}
    with pytest.raises(UnsafeProgramError) as info:
        run_program("x = Retrieval(query=question, topk=1)\n" + FA, actions, variables=VARIABLES)
    assert info.value.reason_code == "size"


class FakeClock:
    """Stands in for the executor's clock: time moves only when the test says so."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step  # seconds added on every reading

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def test_slow_action_is_reported_as_timeout_once_it_returns(
    fake: FakeActions, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(executor, "time", clock)

    def slow_retrieval(query: str, topk: int) -> list[str]:
        clock.now += 10.0  # this call takes 10 "seconds"
        return ["late doc"]

    actions = {**fake.mapping(), "Retrieval": slow_retrieval}
    source = "x = Retrieval(query=question, topk=1)\ny = Retrieval(query=question, topk=1)\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run_program(source, actions, variables=VARIABLES, timeout_s=5.0)
    err = info.value
    assert (err.reason_code, err.lineno, err.n_calls) == ("timeout", 1, 1)
    assert [t["call"] for t in err.trace] == ["Retrieval"]  # the overrunning call is accounted for


def test_timeout_stops_a_comprehension_of_slow_calls(fake: FakeActions, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(executor, "time", clock)

    def slow_refine(query: str, doc: str, instruction: str) -> str:
        clock.now += 2.0
        return doc

    items = [f"d{i}" for i in range(60)]
    actions = {**fake.mapping(), "RefineDoc": slow_refine}
    source = "x = [RefineDoc(query=question, doc=d, instruction='x') for d in items]\n" + FA
    with pytest.raises(UnsafeProgramError) as info:
        run_program(source, actions, variables={**VARIABLES, "items": items}, max_calls=64, timeout_s=5.0)
    # 2 s per call: the clock reads 6 s > 5 s after the third call returns
    assert (info.value.reason_code, info.value.n_calls) == ("timeout", 3)


def test_timeout_is_checked_between_nodes(fake: FakeActions, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "time", FakeClock(step=1.0))  # every clock reading costs 1 s
    source = "x = 1\n" * 100 + FA
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source, timeout_s=50.0)
    assert info.value.reason_code == "timeout"
    assert 1 < info.value.lineno < 100


# ----------------------------------------------------------------------------------------------
# Runtime failures of valid programs (the caller falls back to the previous answer)
# ----------------------------------------------------------------------------------------------


def test_action_exception_is_wrapped_with_partial_trace(fake: FakeActions) -> None:
    def broken(query: str, docs: list[str], additional_instruction: str | None = None) -> str:
        raise ConnectionError("backend down")

    actions = {**fake.mapping(), "GenerateAnswer": broken}
    source = "d = Retrieval(query=question, topk=2)\nfinal_answer = GenerateAnswer(query=question, docs=d)"
    with pytest.raises(ProgramRuntimeError) as info:
        run_program(source, actions, variables=VARIABLES)
    err = info.value
    assert not isinstance(err, UnsafeProgramError) and isinstance(err, ProgramError)
    assert (err.reason_code, err.lineno, err.n_calls) == ("action_error", 2, 2)
    assert err.message == "GenerateAnswer raised ConnectionError: backend down"
    assert isinstance(err.__cause__, ConnectionError)
    assert [t["call"] for t in err.trace] == ["Retrieval"]


@pytest.mark.parametrize(
    ("source", "code", "lineno"),
    [
        # the planner forgot [0]: RewriteQuery returns a list, Retrieval wants a str
        ('q = RewriteQuery(query=question, instruction="clarify")\nd = Retrieval(query=q, topk=3)\n' + FA,
         "bad_argument_type", 2),
        ('d = Retrieval(query=question, topk="5")\n' + FA, "bad_argument_type", 1),
        ("final_answer = Retrieval(query=question, topk=2)", "bad_final_answer", None),
        ("a, b, c = DecomposeQuery(query=question)\n" + FA, "unpack", 1),
        ("x = docs[5]\n" + FA, "index_error", 1),
        ("x = docs[question]\n" + FA, "type_error", 1),
        ("final_answer = question + docs", "type_error", 1),
        ("x = [c for c in question]\n" + FA, "type_error", 1),
        ("x = len(5)\n" + FA, "type_error", 1),
        ('x = int("abc")\n' + FA, "value_error", 1),
        ("x = max([])\n" + FA, "value_error", 1),
        ('x = f"{docs:>10}"\n' + FA, "type_error", 1),
        ('x = [d for d in docs if d > 1]\n' + FA, "type_error", 1),
    ],
)
def test_runtime_failures(fake: FakeActions, source: str, code: str, lineno: int | None) -> None:
    with pytest.raises(ProgramError) as info:
        run(fake, source)
    assert (info.value.reason_code, info.value.lineno) == (code, lineno)
    expected_class = UnsafeProgramError if code in REASON_CODES else ProgramRuntimeError
    assert type(info.value) is expected_class


def test_unsafe_action_return_type_is_refused(fake: FakeActions) -> None:
    actions = {**fake.mapping(), "Retrieval": lambda query, topk: [{"id": 1}]}
    with pytest.raises(ProgramRuntimeError) as info:
        run_program("x = Retrieval(query=question, topk=1)\n" + FA, actions, variables=VARIABLES)
    assert info.value.reason_code == "bad_return"
    assert "dict" in info.value.message


def test_string_annotations_are_checked() -> None:
    def retrieval(query: "str", topk: "int") -> "list[str]":
        return ["doc"]

    def generate(query: "str", docs: "list[str]", additional_instruction: "str | None" = None) -> "str":
        return "ok"

    actions = {"Retrieval": retrieval, "GenerateAnswer": generate}
    ok = run_program(
        "d = Retrieval(query=question, topk=1)\nfinal_answer = GenerateAnswer(query=question, docs=d)",
        actions,
        variables={"question": "q"},
    )
    assert ok.final_answer == "ok"
    with pytest.raises(ProgramRuntimeError) as info:
        run_program(
            "final_answer = GenerateAnswer(query=question, docs=question)", actions, variables={"question": "q"}
        )
    assert info.value.reason_code == "bad_argument_type"
    assert info.value.message == "GenerateAnswer(): argument 'docs' expects list/tuple, got str"


# ----------------------------------------------------------------------------------------------
# Valid programs: exact traces and answers
# ----------------------------------------------------------------------------------------------


def test_paper_case_study_program_runs_with_exact_trace(fake: FakeActions) -> None:
    result = run(fake, PAPER_PROGRAM, max_calls=16)
    clarified = f"clarify: {QUESTION}"
    retrieved = [f"doc{i} for {clarified}" for i in range(5)]
    summarized = [f"summarize({d})" for d in retrieved]
    instruction = "Ensure the answer is accurate and provides the name of the trainer."
    assert result.final_answer == f"answer from 5 docs [{instruction}]"
    assert result.n_calls == 8
    assert [(t["call"], t["lineno"]) for t in result.trace] == [
        ("RewriteQuery", 1),
        ("Retrieval", 2),
        ("RefineDoc", 4),
        ("RefineDoc", 4),
        ("RefineDoc", 4),
        ("RefineDoc", 4),
        ("RefineDoc", 4),
        ("GenerateAnswer", 6),
    ]
    assert result.trace[0] == {
        "call": "RewriteQuery",
        "args": {"query": QUESTION, "instruction": "clarify"},
        "result_summary": f'["{clarified}"]',
        "lineno": 1,
    }
    assert result.trace[1]["args"] == {"query": clarified, "topk": 5}
    # the comprehension runs over the action's result, in order
    assert [t["args"]["doc"] for t in result.trace[2:7]] == retrieved
    assert [t["result_summary"] for t in result.trace[2:7]] == summarized
    assert result.trace[7]["args"] == {"query": QUESTION, "docs": summarized, "additional_instruction": instruction}
    assert result.variables == {
        "clarified_query": [clarified],
        "retrieved_documents": retrieved,
        "summarized_documents": summarized,
        "final_answer": result.final_answer,
    }
    # the fakes saw exactly what the trace reports
    assert [name for name, _ in fake.calls] == [t["call"] for t in result.trace]


def test_decompose_retrieve_each_and_merge(fake: FakeActions) -> None:
    source = """
sub_queries = DecomposeQuery(query=question)
per_query = [Retrieval(query=q, topk=2) for q in sub_queries]
merged = per_query[0] + per_query[1] + docs
kept = [d for d in merged if "sub2" not in d and len(d) > 5]
final_answer = GenerateAnswer(query=question, docs=kept[:3], additional_instruction=f"Fix: {feedback}")
"""
    result = run(fake, source)
    assert [t["call"] for t in result.trace] == ["DecomposeQuery", "Retrieval", "Retrieval", "GenerateAnswer"]
    assert [t["args"]["query"] for t in result.trace[1:3]] == [f"sub1 of {QUESTION}", f"sub2 of {QUESTION}"]
    assert result.variables["kept"] == [
        f"doc0 for sub1 of {QUESTION}",
        f"doc1 for sub1 of {QUESTION}",
        *VARIABLES["docs"],
    ]
    assert fake.calls[-1][1]["docs"] == result.variables["kept"][:3]
    assert result.final_answer == f"answer from 3 docs [Fix: {VARIABLES['feedback']}]"
    assert result.n_calls == 4


def test_small_syntax_features(fake: FakeActions) -> None:
    source = '''"""Plan: rewrite, retrieve twice, answer."""
# comments are fine
first, second = DecomposeQuery(question)
extra = Retrieval(second, 1)
extra += Retrieval(query=first, topk=1)
n = len(extra)
label = f"{n} docs, first={extra[0]!s:.8}, last={extra[-1][-4:]}, pct={0.5:.0%}"
top = max(n, 1, min([3, 4]))
picked = [x for x in extra if not x == "" or x is None]
total = str(n + 1) + "/" + str(int("7"))
Retrieval(query=question, topk=0)
final_answer = GenerateAnswer(query=question, docs=picked, additional_instruction=label)
'''
    result = run(fake, source)
    v = result.variables
    assert (v["first"], v["second"]) == (f"sub1 of {QUESTION}", f"sub2 of {QUESTION}")
    assert v["extra"] == [f"doc0 for sub2 of {QUESTION}", f"doc0 for sub1 of {QUESTION}"]
    assert v["label"] == "2 docs, first=doc0 for, last=ers?, pct=50%"
    assert (v["n"], v["top"], v["total"]) == (2, 3, "3/7")
    assert v["picked"] == v["extra"]
    assert result.final_answer == f"answer from 2 docs [{v['label']}]"
    assert [t["call"] for t in result.trace] == [
        "DecomposeQuery", "Retrieval", "Retrieval", "Retrieval", "GenerateAnswer"
    ]
    assert result.trace[1]["args"] == {"query": f"sub2 of {QUESTION}", "topk": 1}
    assert result.trace[3]["result_summary"] == "[]"
    assert set(v) == {"first", "second", "extra", "n", "label", "top", "picked", "total", "final_answer"}


def test_final_answer_may_keep_the_previous_prediction(fake: FakeActions) -> None:
    result = run(fake, "final_answer = prediction")
    assert (result.final_answer, result.n_calls, result.trace) == ("Etienne de Mestre", 0, [])


def test_trace_shortens_long_values(fake: FakeActions) -> None:
    long_doc = "w" * 500
    docs = [long_doc] * 12
    result = run(fake, "final_answer = GenerateAnswer(query=question, docs=docs)", variables={**VARIABLES, "docs": docs})
    shown = result.trace[0]["args"]["docs"]
    assert len(shown) == 11 and shown[-1] == "... (+2 more)"
    assert shown[0] == "w" * 200 + "..."


def test_bad_caller_inputs_raise_value_error(fake: FakeActions) -> None:
    with pytest.raises(ValueError, match="variable 'docs'"):
        run(fake, FA, variables={**VARIABLES, "docs": [object()]})
    with pytest.raises(ValueError, match="shadows an action"):
        run(fake, FA, variables={**VARIABLES, "Retrieval": "x"})
    with pytest.raises(ValueError, match="collides with an allowed builtin"):
        run_program(FA, {"len": len}, variables=VARIABLES)
    with pytest.raises(ValueError, match="max_depth"):
        run(fake, FA, max_depth=1000)
    with pytest.raises(ValueError, match="timeout_s"):
        run(fake, FA, timeout_s=0)


def test_allowed_builtins_are_the_documented_tiny_set() -> None:
    assert ALLOWED_BUILTINS == ("len", "str", "int", "min", "max")


def test_executor_source_never_evaluates_text() -> None:
    tree = ast.parse(Path(executor.__file__).read_text(encoding="utf-8"))
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert not called & {"eval", "exec", "compile", "__import__"}


# ----------------------------------------------------------------------------------------------
# extract_program on raw model output
# ----------------------------------------------------------------------------------------------

PROGRAM = 'd = Retrieval(query=question, topk=5)\nfinal_answer = GenerateAnswer(query=question, docs=d)'


def test_extract_fenced_program_with_prose_around() -> None:
    text = f"Sure! The critic says retrieval failed, so:\n```python\n{PROGRAM}\n```\nThis re-retrieves documents."
    assert extract_program(text) == PROGRAM


def test_extract_unfenced_program_with_leading_prose_and_trailing_chatter() -> None:
    text = f"Here is the optimized plan:\n\n{PROGRAM}\n\nThis should fix the incomplete answer.\nThanks!"
    assert extract_program(text) == PROGRAM


def test_extract_drops_statements_after_the_last_final_answer() -> None:
    text = f"```py\n{PROGRAM}\nprint(final_answer)\n```"
    assert extract_program(text) == PROGRAM


def test_extract_picks_the_block_with_final_answer_and_dedents() -> None:
    indented = "\n".join("    " + line for line in PROGRAM.split("\n"))
    text = f"Functions:\n```\nRetrieval(query, topk)\n```\nPlan:\n```Python\n{indented}\n```\n"
    assert extract_program(text) == PROGRAM


def test_extract_multiline_call_from_the_paper() -> None:
    assert extract_program(f"Agent Output:\n{PAPER_PROGRAM}\nNew Answer: ...") == PAPER_PROGRAM


@pytest.mark.parametrize("text", ["", "   \n", None, "I cannot help with that.", "```python\n```"])
def test_extract_empty_or_prose_only(text: str | None) -> None:
    assert extract_program(text) == ""


def test_extract_truncated_output_is_returned_and_rejected_as_syntax(fake: FakeActions) -> None:
    text = "```python\nd = Retrieval(query=question, topk=5)\nfinal_answer = GenerateAnswer(query=question, do"
    program = extract_program(text)
    assert program == "d = Retrieval(query=question, topk=5)\nfinal_answer = GenerateAnswer(query=question, do"
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, program)
    assert info.value.reason_code == "syntax"
    assert fake.calls == []


def test_extract_unclosed_fence_with_complete_program() -> None:
    assert extract_program(f"```python\n{PROGRAM}\n") == PROGRAM


def test_extracted_program_runs(fake: FakeActions) -> None:
    text = f"Plan below.\n```python\n{PAPER_PROGRAM}\n```"
    result = run(fake, extract_program(text))
    assert result.n_calls == 8


# ----------------------------------------------------------------------------------------------
# Faults no check foresaw: only ProgramError escapes, and model strings stay encodable
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", ["1114112", "-1", "9223372036854775807"])
def test_format_code_point_out_of_range_is_a_value_error(fake: FakeActions, n: str) -> None:
    with pytest.raises(ProgramRuntimeError) as info:
        run(fake, f"n = {n}\nfinal_answer = f'{{n:c}}'")
    assert (info.value.reason_code, info.value.lineno) == ("value_error", 2)
    assert info.value.message == "cannot format value: %c arg not in range(0x110000)"


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("final_answer = " + "9" * 5000, "syntax"),  # int->str digit limit, raised by the parser
        ("final_answer = 10**10**10", "operator"),
        ("final_answer = 'ab' * 10**9", "operator"),
        ("final_answer = 'a\ud83d'", "syntax"),  # a raw lone surrogate cannot be encoded to parse
        ("final_answer = " + "not " * 4000 + "prediction", "depth"),
        ("final_answer = " + "(" * 201 + "prediction" + ")" * 201, "syntax"),  # the parser's own limit
        ("final_answer = '\\N{NO SUCH NAME}'", "syntax"),
    ],
    ids=["digit_limit", "power_tower", "string_times", "raw_surrogate", "not_chain", "parens_201", "bad_escape"],
)
def test_compile_time_faults_are_program_errors(fake: FakeActions, source: str, code: str) -> None:
    with pytest.raises(UnsafeProgramError) as info:
        run(fake, source)
    assert info.value.reason_code == code
    assert fake.calls == []


@pytest.mark.parametrize(
    ("raised", "kind", "code"),
    [
        (ArithmeticError("boom"), ProgramRuntimeError, "evaluation_error"),
        (UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed"), ProgramRuntimeError,
         "evaluation_error"),
        (MemoryError(), UnsafeProgramError, "size"),
        (RecursionError("deep"), UnsafeProgramError, "depth"),
    ],
    ids=["arithmetic", "unicode", "memory", "recursion"],
)
def test_unforeseen_evaluation_exception_becomes_a_program_error(
    fake: FakeActions, monkeypatch: pytest.MonkeyPatch, raised: Exception, kind: type, code: str
) -> None:
    def failing_add(self: Any, left: Any, right: Any, node: Any) -> Any:
        raise raised

    monkeypatch.setattr(executor._Interpreter, "add", failing_add)
    source = "d = Retrieval(query=question, topk=1)\nfinal_answer = prediction + 'x'"
    with pytest.raises(kind) as info:
        run(fake, source)
    assert info.value.reason_code == code
    assert info.value.n_calls == 1 and [t["call"] for t in info.value.trace] == ["Retrieval"]
    assert info.value.__cause__ is raised


def test_unforeseen_parser_exception_becomes_a_program_error(
    fake: FakeActions, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_parse(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("parser overflow")

    # Only the executor's view of the ast module changes (pytest itself parses with ast too).
    monkeypatch.setattr(executor, "ast", types.SimpleNamespace(**{**vars(ast), "parse": failing_parse}))
    with pytest.raises(ProgramRuntimeError) as info:
        run(fake, FA)
    assert (info.value.reason_code, info.value.message) == ("evaluation_error", "OverflowError: parser overflow")


def test_source_of_wrong_type_is_still_a_caller_error(fake: FakeActions) -> None:
    with pytest.raises(TypeError, match="program source must be str"):
        run_program(b"final_answer = 'x'", fake.mapping())  # type: ignore[arg-type]


def test_evaluation_error_is_documented() -> None:
    assert "evaluation_error" in RUNTIME_CODES


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("final_answer = '\\ud83d'", "\ufffd"),
        ("final_answer = 'a\\ud83d\\ude00b'", "a\U0001f600b"),  # an escaped pair joins
        ("final_answer = '\\ude00\\ud83d'", "\ufffd\ufffd"),  # reversed: two lone halves
        ("final_answer = f'{55357:c}'", "\ufffd"),
        ("final_answer = f'x\\udc00{1:\\ud83d<3}'", "x\ufffd1\ufffd\ufffd"),
        ("final_answer = str(['\\ud83d'])[2]", "\ufffd"),
    ],
    ids=["literal", "pair", "reversed_pair", "format_c", "fstring_fill", "str_of_list"],
)
def test_program_strings_are_cleaned_of_lone_surrogates(fake: FakeActions, source: str, expected: str) -> None:
    result = run(fake, source)
    assert result.final_answer == expected
    json.dumps(result.variables, ensure_ascii=False).encode("utf-8")  # would raise before the fix


def test_action_results_and_error_messages_are_cleaned() -> None:
    def Retrieval(query: str, topk: int) -> list[str]:  # noqa: N802
        return ["doc \ud83d", query]

    def RewriteQuery(query: str, instruction: str) -> list[str]:  # noqa: N802
        raise ValueError(f"cannot rewrite {query}")

    result = run_program(
        "d = Retrieval(query=question, topk=1)\nfinal_answer = d[0]", {"Retrieval": Retrieval}, variables=VARIABLES
    )
    assert result.final_answer == "doc \ufffd"
    assert result.trace[0]["result_summary"] == '["doc \ufffd", "' + QUESTION + '"]'
    with pytest.raises(ProgramRuntimeError) as info:
        run_program("x = RewriteQuery(query='q\\ud83d', instruction='clarify')\n" + FA,
                    {"RewriteQuery": RewriteQuery}, variables=VARIABLES)
    assert info.value.message == "RewriteQuery raised ValueError: cannot rewrite q\ufffd"
    assert str(info.value) == "action_error: RewriteQuery raised ValueError: cannot rewrite q\ufffd (line 1)"


# ----------------------------------------------------------------------------------------------
# Callers record a program's fault as the sample's rejection and never raise
# ----------------------------------------------------------------------------------------------

OVERFLOW = "n = 1114112\nfinal_answer = f'{n:c}'"


class PrefetchingActions:
    """Stand-in for an ActionSet: the fake actions plus the prefetch and event hooks."""

    def __init__(self, fake: FakeActions) -> None:
        self.fake = fake
        self.prefetching = 0
        self.flushes = 0

    def functions(self) -> dict[str, Any]:
        return self.fake.mapping()

    def begin_prefetch(self) -> None:
        self.prefetching += 1

    def flush_prefetch(self, desc: str | None = None) -> int:
        self.flushes += 1
        return 0

    def end_prefetch(self) -> None:
        self.prefetching -= 1

    def drain_events(self) -> list[dict[str, Any]]:
        return []


def test_workflow_execute_records_the_fault_as_a_runtime_error(fake: FakeActions) -> None:
    from ragcritic_lib.agent.workflow import _execute

    out = _execute(OVERFLOW, PrefetchingActions(fake), fake.mapping(), VARIABLES, 16, 30.0)
    assert out == {"answer": None, "trace": [], "reason": "value_error", "status": "runtime_error",
                   "message": "cannot format value: %c arg not in range(0x110000)", "n_calls": 0, "events": []}


def test_workflow_prefetch_survives_the_fault(fake: FakeActions) -> None:
    from ragcritic_lib.agent.workflow import _prefetch

    actions = PrefetchingActions(fake)
    jobs = [(OVERFLOW, VARIABLES), ("d = Retrieval(query=question, topk=1)\n" + FA, VARIABLES)]
    assert _prefetch(jobs, actions, fake.mapping(), 16, 30.0, 3) == 0
    assert (actions.flushes, actions.prefetching) == (1, 0)
    assert [name for name, _ in fake.calls] == ["Retrieval"]  # the job after the faulty one ran


class ProgramPlanner:
    """Plans the given program for every sample."""

    def __init__(self, program: str) -> None:
        self.program = program

    def plan(self, contexts: list[Any]) -> list[Any]:
        from ragcritic_lib.agent.planner import Plan

        return [Plan(program=self.program, raw=self.program, source="rule") for _ in contexts]


class AlwaysErrorCritic:
    def critique(self, records: list[Any]) -> list[dict[str, Any]]:
        return [{"judgement": "Error", "analysis": "cut \ud83d", "tag1": [], "tag2": [], "tag3": []} for _ in records]


@pytest.mark.parametrize(
    ("program", "status", "reason", "final"),
    [
        (OVERFLOW, "runtime_error", "value_error", "Etienne de Mestre"),
        ("final_answer = prediction + ' \\ud83d'", "corrected", None, "Etienne de Mestre \ufffd"),
    ],
    ids=["overflow", "surrogate"],
)
def test_run_correction_keeps_its_work_and_writes_it(
    fake: FakeActions, tmp_path: Path, program: str, status: str, reason: str | None, final: str
) -> None:
    from ragcritic_lib.agent.workflow import run_correction
    from ragcritic_lib.io import read_jsonl, write_jsonl

    records = [{"id": "q1", "question": QUESTION, "passages": [], "prediction": "Etienne de Mestre",
                "golden_answers": ["Bart Cummings"]}]
    out = run_correction(records, critic=AlwaysErrorCritic(), planner=ProgramPlanner(program),
                         actions=PrefetchingActions(fake))
    step = out[0]["steps"][0]
    assert (step["status"], step["reason"], out[0]["final_prediction"]) == (status, reason, final)
    write_jsonl(tmp_path / "out.jsonl", out)  # the critic's lone surrogate used to make this raise
    back = read_jsonl(tmp_path / "out.jsonl")
    assert back[0]["final_prediction"] == final
    assert back[0]["steps"][0]["critic"]["analysis"] == "cut \ufffd"


def test_repair_execute_plans_reports_the_fault(fake: FakeActions) -> None:
    from ragcritic_lib.baselines.repair import execute_plans

    jobs = [(OVERFLOW, VARIABLES), ("final_answer = prediction", VARIABLES)]
    for action_set in (PrefetchingActions(fake), type("Plain", (), {"functions": lambda self: fake.mapping()})()):
        out = execute_plans(jobs, action_set)
        assert out[0] == {"answer": None, "ok": False, "error": "value_error", "n_calls": 0, "trace": []}
        assert out[1] == {"answer": "Etienne de Mestre", "ok": True, "error": None, "n_calls": 0, "trace": []}
