"""Action functions with a deterministic generator and a tiny in-memory retriever."""

from __future__ import annotations

import inspect
import re

import pytest

from ragcritic_lib.agent.actions import (
    PENDING,
    ActionSet,
    action_stubs,
    keyword_query,
    prf_terms,
    rule_decompose,
)
from ragcritic_lib.agent.executor import run_program
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval.rag import build_rag_messages
from ragcritic_lib.retrieval import Hit

CORPUS = {
    "d1": "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887. It is made of stone.",
    "d2": "Aldor\nThe Aldor is a river in the northern lowlands. It is 210 km long.",
    "d3": "Velta\nThe Velta is a river that flows 640 km to the sea.",
    "d4": "Orun (band)\nOrun is a folk band formed in 1999.",
    "d5": "Marsh frog\nThe marsh frog lives in wetlands. Its call is loud.",
}


class TinyRetriever:
    """Word-overlap search over CORPUS; ties keep corpus order."""

    name = "tiny"

    def __init__(self) -> None:
        self.queries: list[tuple[str, int]] = []

    def search(self, queries, k):
        out = []
        for q in queries:
            self.queries.append((q, k))
            words = set(re.findall(r"[a-z0-9]+", q.lower()))
            scored = []
            for i, (doc_id, text) in enumerate(CORPUS.items()):
                score = len(words & set(re.findall(r"[a-z0-9]+", text.lower())))
                scored.append((-score, i, doc_id, text))
            scored.sort()
            out.append([Hit(doc_id, float(-s), text) for s, _, doc_id, text in scored[:k]])
        return out


def last_user(prompt) -> str:
    return prompt[-1]["content"]


def make_llm(responses: dict[str, str], calls: list | None = None) -> CallableLLM:
    """A generator answering by the first key found in the last user message."""

    def fn(prompt, params):
        if calls is not None:
            calls.append(prompt)
        text = last_user(prompt)
        for key, value in responses.items():
            if key in text:
                return value
        return ""

    return CallableLLM(fn, name="scripted")


PARAMS = GenParams(max_new_tokens=32)


def make_actions(responses=None, **kw) -> tuple[ActionSet, TinyRetriever, list]:
    calls: list = []
    retriever = TinyRetriever()
    acts = ActionSet(make_llm(responses or {}, calls), retriever, gen_params=PARAMS, topk=2, **kw)
    return acts, retriever, calls


def test_functions_have_the_contract_signatures():
    acts, _, _ = make_actions()
    fns = acts.functions()
    assert list(fns) == ["Retrieval", "RewriteQuery", "DecomposeQuery", "RefineDoc", "GenerateAnswer"]
    sig = {name: str(inspect.signature(fn)) for name, fn in fns.items()}
    assert sig == {
        "Retrieval": "(query: 'str', topk: 'int' = 2) -> 'list[str]'",
        "RewriteQuery": "(query: 'str', instruction: 'str') -> 'list[str]'",
        "DecomposeQuery": "(query: 'str') -> 'list[str]'",
        "RefineDoc": "(query: 'str', doc: 'str', instruction: 'str') -> 'str'",
        "GenerateAnswer": "(query: 'str', docs: 'list[str]', additional_instruction: 'str | None' = None) -> 'str'",
    }
    stubs = {name: str(inspect.signature(fn)) for name, fn in action_stubs().items()}
    assert stubs == {**sig, "Retrieval": "(query: 'str', topk: 'int' = 5) -> 'list[str]'"}


def test_retrieval_topk_clamp_and_memo():
    acts, retriever, calls = make_actions(max_doc_words=5, max_topk=3)
    fns = acts.functions()
    assert fns["Retrieval"]("Kestrel Bridge Aldor") == [CORPUS["d1"], CORPUS["d2"]]  # full passages
    assert len(fns["Retrieval"]("Kestrel Bridge Aldor", topk=50)) == 3
    assert fns["Retrieval"]("Kestrel Bridge Aldor", topk=0) == [CORPUS["d1"]]
    fns["Retrieval"]("Kestrel Bridge Aldor")
    assert retriever.queries == [("Kestrel Bridge Aldor", 2), ("Kestrel Bridge Aldor", 3), ("Kestrel Bridge Aldor", 1)]
    assert fns["Retrieval"]("   ") == []
    assert calls == []
    assert acts.counts["Retrieval"] == 5


def test_retrieval_with_reranker_reorders_deeper_candidates():
    class ReverseReranker:
        def rerank(self, queries, hits, k):
            return [list(reversed(h))[:k] for h in hits]

    acts, retriever, _ = make_actions(reranker=ReverseReranker(), rerank_depth=4)
    docs = acts.functions()["Retrieval"]("Kestrel Bridge Aldor river", topk=2)
    assert retriever.queries == [("Kestrel Bridge Aldor river", 4)]
    assert [d.split("\n")[0] for d in docs] == ["Orun (band)", "Velta"]


def test_rewrite_query_keeps_grounded_rewrites_and_appends_keywords():
    acts, _, calls = make_actions({"Query: When was the Kestrel Bridge built?": "1. Kestrel Bridge construction date\n2. banana smoothie recipe\n"})
    out = acts.functions()["RewriteQuery"]("When was the Kestrel Bridge built?", "expand")
    assert out == ["Kestrel Bridge construction date", "Kestrel Bridge built"]
    assert [m["role"] for m in calls[0]] == ["system", "user", "assistant", "user"]  # one-shot example
    assert last_user(calls[0]) == ("Task: Add related terms and context so that a search engine finds more relevant "
                                   "pages.\nQuery: When was the Kestrel Bridge built?")
    assert acts.events[-1]["fallback"] is None


@pytest.mark.parametrize("model_text", [
    "", "banana smoothie recipe", "When was the Kestrel Bridge built?", "ok",
    "The Kestrel Bridge was completed on 2022-01-01",  # an invented answer, not a query
    "Kestrel Bridge built Kestrel Bridge built Kestrel Bridge",  # a loop
])
def test_rewrite_query_falls_back_to_keywords(model_text):
    acts, _, _ = make_actions({"Query:": model_text})
    out = acts.functions()["RewriteQuery"]("When was the Kestrel Bridge built?", "Please clarify this")
    assert out == ["Kestrel Bridge built"]
    assert acts.events[-1]["fallback"] == "keywords"
    assert acts.events[-1]["instruction"] == "clarify"


def test_prf_terms_prefer_words_of_the_top_passages_that_the_background_lacks():
    feedback = ["Acme Corp\nAcme Corp is a company led by Dana Wirth. The company was founded in 1990.",
                "Acme Corp (history)\nThe company moved. Dana Wirth joined the company in 2001."]
    background = feedback + [f"Other {i}\nThe company was founded by someone." for i in range(8)]
    terms = prf_terms("Who leads Acme Corp?", feedback, background, n_terms=3)
    assert terms[:2] == ["Dana", "Wirth"]  # the bridge entity, in every feedback passage, rare elsewhere
    assert not {"Acme", "Corp", "company", "1990", "2001", "the"} & set(terms)  # query words, common words, numbers
    assert prf_terms("Who leads Acme Corp?", feedback, background, n_terms=0) == []
    assert prf_terms("Who leads Acme Corp?", [], background) == []
    # The answer a critique rejected is never searched for again.
    assert "Dana" not in prf_terms("Who leads Acme Corp?", feedback, background, exclude="Dana Wirth")
    # Without a background every feedback word counts alike; the top-ranked passage weighs most.
    assert prf_terms("q", ["Alpha beta", "gamma gamma"], n_terms=2) == ["Alpha", "beta"]


def test_prf_expansion_asks_no_generator_and_matches_the_fallback():
    question = "Which river does the Kestrel Bridge cross?"
    llm_acts, _, _ = make_actions({"Query:": "banana smoothie recipe"})
    fallback = llm_acts.functions()["RewriteQuery"](question, "expand")
    acts, _, calls = make_actions({"Query:": "Kestrel Bridge river name and location"}, expand="prf")
    assert acts.functions()["RewriteQuery"](question, "expand") == fallback
    assert calls == [] and acts.events[-1]["source"] == "prf" and acts.events[-1]["fallback"] is None
    # The other rewrite modes still ask the generator.
    assert acts.functions()["RewriteQuery"](question, "clarify")[0] == "Kestrel Bridge river name and location"
    assert len(calls) == 1


def test_prf_expansion_without_feedback_terms_keeps_the_keyword_query():
    acts, _, calls = make_actions(expand="prf")
    acts.begin_sample(docs=["Which river"], prediction="x")  # feedback with nothing new to add
    out = acts.functions()["RewriteQuery"]("Which river?", "expand")
    assert out == ["river"] and calls == [] and acts.events[-1]["fallback"] == "keywords"


def test_an_unknown_expand_source_is_one_clear_error():
    with pytest.raises(ValueError, match="expand source 'web'"):
        make_actions(expand="web")


def test_expand_rewrite_falls_back_to_pseudo_relevance_feedback():
    acts, retriever, _ = make_actions({"Query:": "banana smoothie recipe"})
    out = acts.functions()["RewriteQuery"]("Which river does the Kestrel Bridge cross?", "expand")
    kw = "river Kestrel Bridge cross"
    assert out[-1] == kw and out[0].startswith(kw + " ")
    added = out[0][len(kw) + 1:].split()
    assert "Aldor" in added and len(added) == 4
    assert acts.events[-1]["fallback"] == "prf" and acts.events[-1]["prf_terms"] == added
    assert retriever.queries == [(kw, 20)]  # one background search, memoized
    acts.functions()["RewriteQuery"]("Which river does the Kestrel Bridge cross?", "expand")
    assert len(retriever.queries) == 1
    # With a sample context, the feedback passages are that context (the passages the answer came from).
    acts.begin_sample(docs=[CORPUS["d4"]], prediction="x")
    out = acts.functions()["RewriteQuery"]("Which river does the Kestrel Bridge cross?", "expand")
    assert set(out[0].split()[4:]) <= set(re.findall(r"[A-Za-z0-9]+", CORPUS["d4"]))


def test_keyword_query():
    assert keyword_query("Who is the spouse of the director of film Eden And After?") == "spouse director film Eden"
    assert keyword_query("the of a") == "the of a"


def test_decompose_uses_model_lines_when_on_topic():
    acts, _, _ = make_actions({"Question:": "- Who directed Eden And After?\n- Who is the spouse of that director?\nthanks"})
    subs = acts.functions()["DecomposeQuery"]("Who is the spouse of the director of film Eden And After?")
    assert subs == ["Who directed Eden And After?", "Who is the spouse of that director?"]


def test_decompose_falls_back_to_patterns_then_to_the_query():
    acts, _, _ = make_actions({"Question:": "I cannot help with that."})
    fns = acts.functions()
    assert fns["DecomposeQuery"]("Which river is longer, the Velta or the Orun?") == [
        "the Velta river longer", "the Orun river longer"]
    assert acts.events[-1]["fallback"] == "pattern_split"
    assert fns["DecomposeQuery"]("Who wrote Hamlet?") == ["wrote Hamlet"]  # never the question itself
    assert acts.events[-1]["fallback"] == "keywords"


def test_decompose_drops_a_line_that_repeats_the_question():
    acts, _, _ = make_actions({"Question:": "who wrote hamlet\nWhen was Hamlet written?"})
    assert acts.functions()["DecomposeQuery"]("Who wrote Hamlet?") == ["wrote Hamlet"]


@pytest.mark.parametrize(
    "question, expected",
    [
        ("Who is the spouse of the director of film Eden And After?",
         ["the director of film Eden And After", "Who is the spouse of the director of film Eden And After?"]),
        ("Are Jaws and Alien both horror films?", ["Jaws horror films", "Alien horror films"]),
        ("Is the Velta longer than the Aldor?", ["the Velta longer", "the Aldor longer"]),
        ("Who founded Orun and when was the band formed?", ["Who founded Orun", "when was the band formed"]),
        ("What is the capital of France?", []),
    ],
)
def test_rule_decompose_patterns(question, expected):
    assert rule_decompose(question) == expected


DOC = "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887. Frogs sing nearby."


def test_refine_doc_extractive_modes_cost_no_llm_call():
    acts, _, calls = make_actions()
    refine = acts.functions()["RefineDoc"]
    q = "When was the Kestrel Bridge completed?"
    assert refine(q, DOC, "refine") == "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887."
    assert refine(q, DOC, "summarize") == "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887."
    assert refine("Where do frogs sing?", DOC, "summarize") == "Kestrel Bridge\nFrogs sing nearby."
    assert refine("Who painted the Mona Lisa?", DOC, "refine") == "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river."
    assert refine(q, DOC, "delete") == DOC
    assert refine("Who painted the Mona Lisa?", DOC, "delete") == ""
    assert calls == []


def test_refine_doc_llm_modes_are_grounded():
    acts, _, calls = make_actions({
        "one concrete example": "For example, the Kestrel Bridge was completed in 1887.",
        "Explain": "Paris is lovely in spring.",
        "Restate the facts": "The Kestrel Bridge was completed in 1887.",
    })
    refine = acts.functions()["RefineDoc"]
    q = "When was the Kestrel Bridge completed?"
    assert refine(q, DOC, "exemplify") == DOC + "\nExample: For example, the Kestrel Bridge was completed in 1887."
    assert refine(q, DOC, "explain") == DOC  # ungrounded explanation: passage unchanged
    assert acts.events[-1]["fallback"] == "unchanged"
    assert refine(q, DOC, "correct") == "Kestrel Bridge\nThe Kestrel Bridge was completed in 1887."
    assert len(calls) == 3
    assert "Passage: Kestrel Bridge: The Kestrel Bridge crosses" in last_user(calls[0])


def test_refine_doc_correct_falls_back_to_extractive_refine():
    acts, _, _ = make_actions({"Restate": "The bridge was built by Martians from Venus in 2020 obviously."})
    out = acts.functions()["RefineDoc"]("When was the Kestrel Bridge completed?", DOC, "correct")
    assert out == "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887."
    assert acts.events[-1]["fallback"] == "extractive"


def test_generate_answer_reuses_the_standard_rag_prompt():
    acts, _, calls = make_actions({"Question: When": "The bridge dates from 1887. So the final answer is: 1887."})
    docs = ["A\nfirst", ["B\nsecond", "A\nfirst"], "", "  "]
    answer = acts.functions()["GenerateAnswer"]("When was it built?", docs, "Be brief.")
    assert answer == "1887"
    assert calls == [build_rag_messages("When was it built?", ["A\nfirst", "B\nsecond"], max_passage_words=80,
                                        additional_instruction="Be brief.")]
    event = acts.events[-1]
    assert event["docs"] == ["A\nfirst", "B\nsecond"] and event["followed_prefix"] is True
    assert acts.counts["llm_calls"] == 1


def test_prefetch_batches_and_then_serves_from_memo():
    batches: list[int] = []
    acts, _, calls = make_actions({"Query:": "Kestrel Bridge completion year", "Question: When": "So the final answer is: 1887"})
    original = acts.llm.generate

    def counting_generate(prompts, params=PARAMS, *, desc=None):
        batches.append(len(prompts))
        return original(prompts, params, desc=desc)

    acts.llm.generate = counting_generate  # type: ignore[method-assign]
    fns = acts.functions()
    acts.begin_prefetch()
    assert fns["RewriteQuery"]("When was the Kestrel Bridge built?", "expand") == [PENDING]
    assert fns["GenerateAnswer"]("When was it built?", [PENDING]) == PENDING
    assert fns["RefineDoc"]("q", PENDING, "delete") == PENDING
    assert acts.flush_prefetch() == 1
    acts.end_prefetch()
    assert acts.events == [] and acts.counts["llm_calls"] == 0
    assert fns["RewriteQuery"]("When was the Kestrel Bridge built?", "expand")[0] == "Kestrel Bridge completion year"
    assert batches == [1] and len(calls) == 1
    assert acts.counts["llm_calls"] == 1


def test_actions_run_a_rule_program_in_the_executor_with_an_exact_trace():
    acts, _, _ = make_actions({
        "Query:": "Kestrel Bridge completion year",
        "Question: When": "So the final answer is: 1887",
    })
    program = (
        'queries = RewriteQuery(query=question, instruction="expand")\n'
        "more_docs = docs + Retrieval(query=queries[0], topk=1)\n"
        'new_docs = [RefineDoc(query=question, doc=doc, instruction="refine") for doc in more_docs]\n'
        'final_answer = GenerateAnswer(query=question, docs=new_docs, additional_instruction="Use all passages.")'
    )
    res = run_program(program, acts.functions(),
                      variables={"question": "When was the Kestrel Bridge completed?", "docs": [CORPUS["d2"]], "prediction": ""})
    assert res.final_answer == "1887"
    assert [t["call"] for t in res.trace] == ["RewriteQuery", "Retrieval", "RefineDoc", "RefineDoc", "GenerateAnswer"]
    assert res.variables["more_docs"][1] == CORPUS["d1"]
    assert res.variables["new_docs"] == [
        "Aldor\nThe Aldor is a river in the northern lowlands.",
        "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887.",
    ]


def test_supplementary_retrieval_with_the_same_query_adds_only_new_passages():
    acts, _, _ = make_actions({"Question:": "So the final answer is: 1887"})
    program = ("more_docs = docs + Retrieval(query=question, topk=3)\n"
               "final_answer = GenerateAnswer(query=question, docs=more_docs)")
    res = run_program(program, acts.functions(),
                      variables={"question": "Kestrel Bridge Aldor river", "docs": [CORPUS["d1"]], "prediction": ""})
    assert res.final_answer == "1887"
    assert acts.events[-1]["docs"] == [CORPUS["d1"], CORPUS["d2"], CORPUS["d3"]]
