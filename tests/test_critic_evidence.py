"""What the critic reads of the passages: sentence selection and the deciding-sentence measure."""

from ragcritic_lib.critic.critics import build_critic_messages
from ragcritic_lib.critic.evidence import (
    deciding_sentences, evidence_coverage, evidence_in_prompt, render_evidence, select_evidence, split_passage,
)

P1 = ("About Kanium Energy\nKanium Energy was founded in 1988. The chief executive is Adrian Sterling. "
      "The firm runs a small museum. Its staff enjoy a yearly picnic by the lake.")
P2 = "About Ivelfield\nIvelfield is a river town. The mayor of Ivelfield is Adrian Carlhurst."


class _Tax:
    tier1 = ["A"]
    tier2 = ["a"]

    def children(self, t1):
        return ["a"]


def test_split_passage_reads_title_and_sentences() -> None:
    title, sents = split_passage(P1)
    assert title == "About Kanium Energy"
    assert sents[0] == "Kanium Energy was founded in 1988." and len(sents) == 4
    assert split_passage("no title here. Two sentences.") == ("", ["no title here.", "Two sentences."])


def test_selection_keeps_the_deciding_sentence_within_budget() -> None:
    q = "Who is the mayor of Ivelfield?"
    chosen = select_evidence(q, "Adrian Sterling", [P1, P2], top_k=2, budget_words=14)
    kept = [s for _, _, sents in chosen for s in sents]
    assert "The mayor of Ivelfield is Adrian Carlhurst." in kept
    assert sum(len(s.split()) for s in kept) <= 14
    # passage order is kept and the numbering is the passage's own
    text = render_evidence(q, "Adrian Sterling", [P1, P2], top_k=2, budget_words=14)
    assert text.index("[") < text.index("[2] About Ivelfield")
    # the first-words prompt misses it: P2 is the second passage and it is its second sentence
    old = build_critic_messages(q, [P1, P2], "x", taxonomy=_Tax(), top_k=2, passage_words=5, label_list=False)
    assert evidence_in_prompt(old[1]["content"], [P1, P2], ["Adrian Carlhurst"]) is False
    new = build_critic_messages(q, [P1, P2], "x", taxonomy=_Tax(), top_k=2, evidence_words=14, label_list=False)
    assert evidence_in_prompt(new[1]["content"], [P1, P2], ["Adrian Carlhurst"]) is True


def test_a_single_long_sentence_is_cut_not_dropped() -> None:
    long = "About X\n" + " ".join(["word"] * 50) + " mayor."
    chosen = select_evidence("mayor?", "", [long], top_k=1, budget_words=10)
    assert chosen and chosen[0][2][0].endswith("...") and len(chosen[0][2][0].split()) == 11


def test_deciding_sentences_and_coverage() -> None:
    assert deciding_sentences([P1, P2], ["Adrian Carlhurst"]) == ["The mayor of Ivelfield is Adrian Carlhurst."]
    assert evidence_in_prompt("anything", [P1], ["Adrian Carlhurst"]) is None  # no passage holds it
    records = [{"passages": [P1, P2], "golden_answers": ["Adrian Carlhurst"]},
               {"passages": [P1], "golden_answers": ["Nobody"]}]
    cov = evidence_coverage(records, lambda r: P2)
    assert cov == {"n": 2, "with_deciding": 1, "in_prompt": 1, "share": 1.0}
    assert evidence_coverage(records, lambda r: "")["share"] == 0.0
