"""The LLM teacher's prompts: the instructions of its three roles (Stage-1 rationales, Stage-2
open-set tags, cluster names) and the worked examples it rotates per record
(:class:`ragcritic_lib.mining.teachers.LLMTeacher`). Our own words, following the structure of the
paper's Prompt B and Prompt C."""

from __future__ import annotations

RATIONALE_SYSTEM = (
    "You check answers written by a retrieval-augmented question answering system and explain "
    "precisely why a wrong answer is wrong."
)
RATIONALE_TASK = (
    "You get a question, the passages retrieved for it, the answer a model gave and the reference "
    "answer.\n\n{body}\n\n"
    "Decide whether the model answer is correct. Reply with one JSON object and nothing else.\n"
    'If it is wrong: {{"Judgement": "Error", "Error_analysis": "<why it is wrong: what the passages '
    'say, what the model did, what it should have done>"}}\n'
    'If it is correct: {{"Judgement": "Correct", "Error_analysis": ""}}'
)
TAG_SYSTEM = (
    "You label the errors of retrieval-augmented question answering systems with short, specific "
    "error tags, to help improve such systems."
)
TAG_TASK = (
    "Read the error analysis below and name each distinct kind of error it describes.\n\n"
    "Error analysis: {analysis}\n\n"
    "Give 2 to 4 error tags in your own words, a few words each, with one sentence of explanation "
    'each. Reply with a JSON list only: [{{"tag": "...", "explanation": "..."}}]'
)
NAME_SYSTEM = "You summarize groups of error tags into one category name."
NAME_TASK = (
    "These error tags were grouped together by clustering. They describe wrong answers of a "
    "retrieval-augmented question answering system.\n\n{tags}\n\n"
    "Write one short name (3 to 8 words) for the kind of error they share. "
    'Reply with JSON only: {{"name": "..."}}'
)

# Worked examples (our own). They rotate per record so a weak model cannot copy one fixed set.
RATIONALE_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Question: Which river flows through the city of Porto?\n"
        "Passages:\n[1] Porto\nPorto is a coastal city in northwest Portugal on the estuary of the Douro river.\n"
        "[2] Lisbon\nLisbon lies on the Tagus estuary.\n"
        "Model answer: Tagus\nReference answer: Douro",
        '{"Judgement": "Error", "Error_analysis": "Passage [1] states that Porto lies on the Douro, '
        'but the model took the river of Lisbon from passage [2], mixing up the two cities."}',
    ),
    (
        "Question: In which year did the Harlow Bridge open?\n"
        "Passages:\n[1] Harlow Town\nHarlow Town is a market town known for its Saturday market.\n"
        "Model answer: 1931\nReference answer: 1874",
        '{"Judgement": "Error", "Error_analysis": "No retrieved passage mentions the bridge, so the '
        'evidence was missing; the model still guessed a year instead of saying the information is '
        'insufficient."}',
    ),
    (
        "Question: Who composed the opera Carmen?\n"
        "Passages:\n[1] Carmen\nCarmen is an opera in four acts by the French composer Georges Bizet.\n"
        "Model answer: Georges Bizet\nReference answer: Bizet",
        '{"Judgement": "Correct", "Error_analysis": ""}',
    ),
)
TAG_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "The passage states that Porto lies on the Douro, but the model took the river of Lisbon "
        "from another passage, mixing up the two cities.",
        '[{"tag": "Confused two cities", "explanation": "The answer belongs to Lisbon, not Porto."}, '
        '{"tag": "Ignored the relevant passage", "explanation": "The passage naming the Douro was retrieved but not used."}]',
    ),
    (
        "No retrieved passage mentions the bridge, so the evidence was missing; the model still "
        "guessed a year instead of saying the information is insufficient.",
        '[{"tag": "Key document not retrieved", "explanation": "None of the passages is about the bridge."}, '
        '{"tag": "Guessed without evidence", "explanation": "The year is not supported by any passage."}]',
    ),
    (
        "The response repeats the question several times and stops at the length limit without "
        "ever stating a final answer.",
        '[{"tag": "Repetitive output", "explanation": "The same sentence is repeated."}, '
        '{"tag": "No final answer given", "explanation": "The response never commits to an answer."}]',
    ),
    (
        "The question asks for the total revenue of both divisions, but the answer gives only the "
        "figure of the first division found in passage [2].",
        '[{"tag": "Partial numeric answer", "explanation": "Only one of the two figures was used."}, '
        '{"tag": "Missed part of the question", "explanation": "The question asked for a sum."}]',
    ),
)
