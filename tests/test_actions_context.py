"""Actions that see the sample's context: retrieval that skips seen passages, cross-encoder
sentence selection, the rejected answer for answer-rewriting strategies, the abstain path."""

from __future__ import annotations

import re

import pytest

from ragcritic_lib.agent.actions import ActionSet
from ragcritic_lib.agent.planner import load_error_actions
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval import Hit

CORPUS = {
    "d1": "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887. It is made of stone.",
    "d2": "Aldor\nThe Aldor is a river in the northern lowlands. It is 210 km long.",
    "d3": "Velta\nThe Velta is a river that flows 640 km to the sea.",
    "d4": "Orun (band)\nOrun is a folk band formed in 1999.",
}


class TinyRetriever:
    """Word-overlap search over CORPUS; ties keep corpus order."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, int]] = []

    def search(self, queries, k):
        out = []
        for q in queries:
            self.queries.append((q, k))
            words = set(re.findall(r"[a-z0-9]+", q.lower()))
            scored = sorted((-len(words & set(re.findall(r"[a-z0-9]+", t.lower()))), i, d, t)
                            for i, (d, t) in enumerate(CORPUS.items()))
            out.append([Hit(d, float(-s), t) for s, _, d, t in scored[:k]])
        return out


class KeywordScorer:
    """A stand-in cross-encoder: the logit is the sum of the weights of the words it contains."""

    WEIGHTS = {"completed": 5.0, "stone": 2.0, "crosses": 1.0, "river": -0.5, "band": -3.0}

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def score_pairs(self, queries, passages):
        self.pairs += list(zip(queries, passages))
        return [sum(w for word, w in self.WEIGHTS.items() if word in p.lower()) - 1.0 for p in passages]

    def rerank(self, queries, hits, k):
        out = []
        for q, hs in zip(queries, hits):
            scores = self.score_pairs([q] * len(hs), [h.contents for h in hs])
            order = sorted(range(len(hs)), key=lambda i: (-scores[i], i))[:k]
            out.append([hs[i] for i in order])
        return out


def make(answer: str = "1887", **kw):
    prompts: list = []

    def fn(prompt, params):
        prompts.append(prompt)
        return f"The passages say so. So the final answer is: {answer}"

    acts = ActionSet(CallableLLM(fn, name="scripted"), TinyRetriever(), gen_params=GenParams(max_new_tokens=32),
                     topk=2, **kw)
    return acts, prompts


def test_retrieval_skips_passages_already_in_the_context():
    acts, _ = make()
    q = "Kestrel Bridge Aldor river"
    assert acts.retrieval(q, 2) == [CORPUS["d1"], CORPUS["d2"]]
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1850")
    # Searched one deeper so that two unseen passages remain.
    assert acts.retrieval(q, 2) == [CORPUS["d2"], CORPUS["d3"]]
    assert acts.retriever.queries[-1] == (q, 3)
    assert acts.events[-1]["skipped_context"] == 1
    acts.begin_sample()
    assert acts.retrieval(q, 2) == [CORPUS["d1"], CORPUS["d2"]]


def test_retrieval_reranks_at_depth_then_skips_context():
    acts, _ = make(reranker=KeywordScorer(), rerank_depth=4)
    acts.begin_sample(docs=[CORPUS["d1"]])
    # Reranked: d1 (completed, stone, crosses), then d2/d3 (river), d4 (band); d1 is in the context.
    assert acts.retrieval("Kestrel Bridge", 2) == [CORPUS["d2"], CORPUS["d3"]]
    assert acts.retriever.queries == [("Kestrel Bridge", 4)]


def test_refine_and_summarize_keep_the_best_scored_sentences_in_text_order():
    acts, prompts = make(reranker=KeywordScorer())
    q = "When was the Kestrel Bridge completed?"
    # Scores: "crosses the Aldor river" 1 - .5 - 1, "completed" 4, "stone" 1.
    assert acts.refine_doc(q, CORPUS["d1"], "summarize") == (
        "Kestrel Bridge\nIt was completed in 1887. It is made of stone.")
    assert acts.refine_doc(q, CORPUS["d1"], "refine") == CORPUS["d1"]  # three sentences: all kept
    # The title is scored with each sentence.
    assert acts.reranker.pairs[0] == (q, "Kestrel Bridge. The Kestrel Bridge crosses the Aldor river.")
    assert prompts == []


def test_extractive_notes_come_from_the_cross_encoder_without_a_generator_call():
    acts, prompts = make(reranker=KeywordScorer(), notes="extractive")
    q = "When was the Kestrel Bridge completed?"
    # explain / exemplify: the passage plus its best sentence as the note; correct: the two best.
    assert acts.refine_doc(q, CORPUS["d1"], "explain") == CORPUS["d1"] + "\nExplanation: It was completed in 1887."
    assert acts.refine_doc(q, CORPUS["d1"], "exemplify") == CORPUS["d1"] + "\nExample: It was completed in 1887."
    assert acts.refine_doc(q, CORPUS["d1"], "correct") == "Kestrel Bridge\nIt was completed in 1887. It is made of stone."
    assert prompts == []
    assert acts.events[-1]["selector"] == "cross-encoder"


def test_llm_notes_ask_the_generator_and_extractive_notes_need_a_cross_encoder():
    acts, prompts = make(reranker=KeywordScorer())
    out = acts.refine_doc("When was the Kestrel Bridge completed?", CORPUS["d1"], "explain")
    assert len(prompts) == 1 and out.startswith(CORPUS["d1"] + "\nExplanation: ")
    with pytest.raises(ValueError, match="needs a reranker"):
        make(notes="extractive")
    with pytest.raises(ValueError, match="unknown note source 'model'"):
        make(reranker=KeywordScorer(), notes="model")


def test_delete_uses_the_cross_encoder_threshold():
    acts, _ = make(reranker=KeywordScorer())
    q = "When was the Kestrel Bridge completed?"
    assert acts.refine_doc(q, CORPUS["d1"], "delete") == CORPUS["d1"]
    # "Orun is a folk band formed in 1999." shares no word with the question and scores -4.
    assert acts.refine_doc(q, CORPUS["d4"], "delete") == ""
    # Word overlap alone would keep a passage sharing one content word ("river") with the question.
    assert acts.refine_doc("Which river is the Kestrel Bridge on?", CORPUS["d3"], "delete") == ""


def test_generate_answer_keeps_the_best_scored_passages_and_falls_back_to_context():
    acts, prompts = make(reranker=KeywordScorer(), max_docs=2)
    q = "When was the Kestrel Bridge completed?"
    assert acts.generate_answer(q, [CORPUS["d4"], CORPUS["d2"], CORPUS["d1"]]) == "1887"
    assert acts.events[-1]["docs"] == [CORPUS["d1"], CORPUS["d2"]]
    acts.begin_sample(docs=[CORPUS["d3"]])
    acts.generate_answer(q, ["", ""])  # every passage deleted: the context passages are read
    assert acts.events[-1]["docs"] == [CORPUS["d3"]]


def test_rejected_answer_is_named_where_the_table_rewrites_the_answer():
    table = load_error_actions()
    acts, prompts = make(table=table)
    q = "When was the Kestrel Bridge completed?"
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1850", critique={"tag1": ["Erroneous Information"]})
    acts.generate_answer(q, [CORPUS["d1"]], "Prefer recent facts.")
    strategy = table.answer_strategies[table.rule("Erroneous Information").answer_strategy]
    assert acts.events[-1]["instruction"] == f'Prefer recent facts. {strategy} The earlier answer "1850" was judged wrong.'
    assert 'The earlier answer "1850" was judged wrong.' in str(prompts[-1])
    # A label without a strategy leaves the instruction alone.
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1850", critique={"tag1": ["Irrelevant Information"]})
    acts.generate_answer(q, [CORPUS["d1"]], "Prefer recent facts.")
    assert acts.events[-1]["instruction"] == "Prefer recent facts."


@pytest.mark.parametrize(("answer", "expected"), [
    ("1850", "insufficient information"),  # not in the passages: abstain
    ("1887", "1887"),  # supported by the passages: kept
    ("Kestrel", "insufficient information"),  # the rejected answer again: abstain
    ("insufficient information", "insufficient information"),
    # A longer answer most of whose words the passages state is grounded (a summary paraphrases);
    # one with most words invented is not.
    ("Kestrel Bridge completed 1887 after long delays", "Kestrel Bridge completed 1887 after long delays"),
    ("Kestrel Bridge painted purple by Venetian sailors", "insufficient information"),
])
def test_abstain_path_for_an_unsupported_answer_critique(answer, expected):
    acts, _ = make(answer=answer, table=load_error_actions())
    critique = {"tag1": ["Inaccurate or Misunderstood Response"], "tag2": ["Factual Inaccuracies"]}
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="Kestrel", critique=critique)
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == expected
    assert acts.events[-1]["abstained"] is (expected != answer)


def test_no_abstain_without_the_unsupported_label():
    acts, _ = make(answer="1850", table=load_error_actions())
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="Kestrel", critique={"tag1": ["Incomplete Information"]})
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == "1850"


def test_an_abstention_does_not_replace_an_answer_unless_the_critique_says_unsupported():
    acts, _ = make(answer="insufficient information", table=load_error_actions())
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1887", critique={"tag1": ["Incomplete Information"]})
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == "1887"
    assert acts.events[-1]["kept_previous"] is True
    # With the unsupported label, the abstention stands.
    critique = {"tag1": ["Inaccurate or Misunderstood Response"], "tag2": ["Factual Inaccuracies"]}
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1850", critique=critique)
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == "insufficient information"
    # A first answer that was itself an abstention may stay one.
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="not mentioned", critique={"tag1": ["Incomplete Information"]})
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == "insufficient information"


def test_answer_candidates_are_spans_of_the_passages_and_options_of_the_question():
    from ragcritic_lib.agent.actions import answer_candidates

    docs = ["Harbor Bank\nHarbor Bank was founded on 3 July 1987 in Lisbon and employs 1,250 people. It is run by Ana Silva.",
            "Delta Trust\nDelta Trust was founded in 1990. Revenue was $211 million in 2023."]
    cands = answer_candidates("Which is older, Harbor Bank or Delta Trust?", docs, first="1990 and")
    assert cands[:3] == ["1990", "Harbor Bank", "Delta Trust"]  # the free answer, then the question's options
    for span in ("3 July 1987", "1,250 people", "Ana Silva", "Lisbon", "$211 million", "2023"):
        assert span in cands, span
    assert cands[-1] == "insufficient information" and len(cands) == len({c.lower() for c in cands})
    assert not any(c.endswith(" It") or c in ("July", "It") for c in cands)
    assert len(answer_candidates("Q?", docs * 10, max_candidates=5)) == 5


def test_span_mode_answers_with_the_option_the_model_chooses():
    prompts: list = []

    def fn(prompt, params):
        prompts.append(prompt)
        if isinstance(prompt, list) and prompt[-1]["role"] == "assistant":
            return " 1887"  # the constrained choice after the answer phrase
        return "So the final answer is: 1850"

    acts = ActionSet(CallableLLM(fn, name="scripted"), TinyRetriever(), gen_params=GenParams(max_new_tokens=32), topk=2,
                     answer_mode="spans")
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == "1887"
    assert acts.events[-1]["free_answer"] == "1850" and acts.counts["choose_calls"] == 1
    # A long free answer (a summary) is kept as written.
    long = "The Kestrel Bridge crosses the Aldor river and was completed in 1887 from local stone blocks"
    acts = ActionSet(CallableLLM(lambda p, g: f"So the final answer is: {long}"), TinyRetriever(),
                     gen_params=GenParams(max_new_tokens=32), topk=2, answer_mode="spans")
    assert acts.generate_answer("Describe the Kestrel Bridge.", [CORPUS["d1"]]).startswith("The Kestrel Bridge crosses")
    assert acts.counts["choose_calls"] == 0
    with pytest.raises(ValueError, match="answer mode"):
        ActionSet(CallableLLM(fn), TinyRetriever(), gen_params=GenParams(), answer_mode="guess")


def test_span_mode_never_offers_the_rejected_answer():
    offered = []

    class Chooser(CallableLLM):
        def choose(self, prompts, options, desc=None):
            offered.extend(options[0])
            return super().choose(prompts, options, desc=desc)

    def fn(prompt, params):
        return " 1887" if prompt[-1]["role"] == "assistant" else "So the final answer is: 1850"

    acts = ActionSet(Chooser(fn, name="scripted"), TinyRetriever(), gen_params=GenParams(max_new_tokens=32), topk=2,
                     answer_mode="spans")
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1850", critique={"tag1": ["Incomplete Information"]})
    assert acts.generate_answer("When was the Kestrel Bridge completed?", [CORPUS["d1"]]) == "1887"
    assert " 1850" not in offered and " 1887" in offered


def test_only_the_answer_to_the_samples_question_gets_the_critique():
    table = load_error_actions()
    critique = {"tag1": ["Inaccurate or Misunderstood Response"], "tag2": ["Factual Inaccuracies"]}
    q = "When was the Kestrel Bridge completed?"
    acts, prompts = make(answer="1850", table=table)
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="Kestrel", critique=critique, question=q)
    # A sub-question's answer (a bridging hop) is the reader's answer as it is: no abstain path.
    assert acts.generate_answer("Which river does the bridge cross?", [CORPUS["d1"]]) == "1850"
    assert acts.events[-1]["intermediate"] is True and acts.events[-1]["abstained"] is False
    # The answer to the question itself is the corrected answer (whitespace and case do not matter).
    assert acts.generate_answer("  when was the Kestrel Bridge completed? ", [CORPUS["d1"]]) == "insufficient information"
    assert "intermediate" not in acts.events[-1]
    # The strategy note names the rejected answer only in the final answer's prompt.
    acts, prompts = make(answer="insufficient information", table=table)
    acts.begin_sample(docs=[CORPUS["d1"]], prediction="1887", question=q,
                      critique={"tag1": ["Erroneous Information"]})
    # ... and a hop that abstains passes on nothing (no "insufficient information" in the next search).
    assert acts.generate_answer("Which river does the bridge cross?", [CORPUS["d1"]]) == ""
    assert "judged wrong" not in prompts[-1][-1]["content"] + prompts[-1][0]["content"]
    assert acts.generate_answer(q, [CORPUS["d1"]]) == "1887"  # kept over an abstention
    assert "judged wrong" in str(prompts[-1])


def test_bridging_program_feeds_the_first_hops_answer_into_the_second_search():
    from ragcritic_lib.agent.executor import run_program
    from ragcritic_lib.agent.planner import RuleBasedPlanner

    def fn(prompt, params):
        text = prompt[-1]["content"]
        if "sub-questions" in text:
            return "Which river does the Kestrel Bridge cross?\nHow long is that river?"
        if "Which river does the Kestrel Bridge cross?" in text:
            return "So the final answer is: Aldor"
        return "So the final answer is: 210 km"

    retriever = TinyRetriever()
    acts = ActionSet(CallableLLM(fn, name="scripted"), retriever, gen_params=GenParams(max_new_tokens=32), topk=1,
                     table=load_error_actions())
    program, _ = RuleBasedPlanner(acts.table, topk=1).program_for(
        {"tag1": ["Incomplete Information"], "tag2": ["Data Insufficiency in Retrieval"]})
    question = "How long is the river that the Kestrel Bridge crosses?"
    acts.begin_sample(docs=[CORPUS["d4"]], prediction="insufficient information", question=question)
    res = run_program(program, acts.functions(), variables={"question": question, "docs": [CORPUS["d4"]],
                                                           "prediction": "insufficient information"})
    assert res.final_answer == "210 km"
    assert ("How long is that river? Aldor", 2) in retriever.queries  # the bridge joins the second search
    answers = [e for e in acts.events if e["action"] == "GenerateAnswer"]
    assert [e.get("intermediate", False) for e in answers] == [True, False]
    assert CORPUS["d2"] in answers[-1]["docs"]  # the second hop's passage reached the final answer
