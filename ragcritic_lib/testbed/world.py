"""The testbed's world: its config, entities with typed attributes and relations, how values
are written and which gold strings accept them (the seeded builder is :mod:`.builder`)."""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

SPLITS: tuple[str, ...] = ("train", "dev", "test")
QUESTION_TYPES: tuple[str, ...] = (
    "factual", "multi_hop", "comparison", "numerical", "temporal", "summary", "unanswerable",
)
DOMAINS: tuple[str, ...] = ("finance", "law", "medical", "places", "sports")
UNANSWERABLE_ANSWER = "insufficient information"
DATASET_NAME = "testbed"

# The world's "present": profiles are dated in it, outdated reports before it.
_PRESENT = 2024

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestbedConfig:
    """Every knob of the generator (the ``testbed:`` section of params.yaml, flat scalars).

    Attributes:
        seed: master seed; world, rendering and questions use streams derived from it.
        domains: comma-separated subset of ``finance,law,medical,places,sports`` (towns and
            people always exist as support entities; ``places`` decides whether they are asked).
        n_entities_per_domain: main entities per domain over all splits (companies, cases,
            patients, towns, clubs); people and hospitals are added as the relations need them.
        frac_dev, frac_test: share of each domain's entities that belong to dev / test.
        passage_words: chunk size in words (passages never exceed it except by a split fact's
            cue); keep it <= the prompt's per-passage word cut so no fact is truncated.
        distractor_rate: probability that an entity gets near-duplicate twins.
        n_distractors: twins per such entity.
        conflict_rate: probability that an entity with a changeable attribute has an older dated
            report stating a superseded value.
        split_fact_rate: probability that a profile phrases one fact across a chunk boundary.
        filler_rate: probability of a filler sentence after each fact sentence.
        fact_sheet_rate: share of profiles written as terse "Label: value." fact sheets.
        name_mention_rate: probability that a fact sentence names its entity (else "the
            company", "she", ...); lower makes passages harder to match.
        knob_focus: probability that a factual/multi-hop question on an entity with a split or
            conflicting fact asks about that fact (raises knob coverage among questions).
        withheld_per_entity: attributes per main entity that are never stated (they feed the
            unanswerable questions).
        withheld_focus: probability that a factual question on an entity asks first about the
            attributes of its kind that may be withheld and that it states. Unanswerable
            questions ask only those attributes, so at 0 (the older sampling) an answerable
            question seldom asks one and a question's wording alone tells most unanswerable
            ones apart; raising it asks the same attributes of entities that state them.
        questions_per_type_train/dev/test: questions per type and split before weighting.
        weight_<type>: multiplier of a type's question count (0 drops the type).
    """

    __test__ = False  # not a pytest test class despite the name

    seed: int = 13
    domains: str = "finance,law,medical,places,sports"
    n_entities_per_domain: int = 40
    frac_dev: float = 0.15
    frac_test: float = 0.25
    passage_words: int = 60
    distractor_rate: float = 0.35
    n_distractors: int = 1
    conflict_rate: float = 0.35
    split_fact_rate: float = 0.35
    filler_rate: float = 0.35
    fact_sheet_rate: float = 0.15
    name_mention_rate: float = 0.75
    knob_focus: float = 0.35
    withheld_per_entity: int = 1
    withheld_focus: float = 0.0
    questions_per_type_train: int = 100
    questions_per_type_dev: int = 20
    questions_per_type_test: int = 40
    weight_factual: float = 1.0
    weight_multi_hop: float = 1.0
    weight_comparison: float = 1.0
    weight_numerical: float = 1.0
    weight_temporal: float = 1.0
    weight_summary: float = 1.0
    weight_unanswerable: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            want = {"int": int, "float": (int, float), "str": str}[str(f.type)]
            if isinstance(value, bool) or not isinstance(value, want):
                raise ValueError(f"testbed.{f.name}: expected {f.type}, got {value!r}")
        for name in ("frac_dev", "frac_test", "distractor_rate", "conflict_rate", "split_fact_rate",
                     "filler_rate", "fact_sheet_rate", "name_mention_rate", "knob_focus", "withheld_focus"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"testbed.{name}: must be in [0, 1], got {getattr(self, name)!r}")
        if self.frac_dev + self.frac_test >= 1.0:
            raise ValueError("testbed.frac_dev + testbed.frac_test: must leave entities for train")
        if self.passage_words < 30:
            raise ValueError(f"testbed.passage_words: must be >= 30, got {self.passage_words}")
        if self.n_entities_per_domain < 4:
            raise ValueError("testbed.n_entities_per_domain: must be >= 4")
        for name in ("n_distractors", "withheld_per_entity", "questions_per_type_train",
                     "questions_per_type_dev", "questions_per_type_test"):
            if getattr(self, name) < 0:
                raise ValueError(f"testbed.{name}: must be >= 0")
        for qtype in QUESTION_TYPES:
            if getattr(self, f"weight_{qtype}") < 0:
                raise ValueError(f"testbed.weight_{qtype}: must be >= 0")
        unknown = [d for d in self.domain_list() if d not in DOMAINS]
        if unknown or not self.domain_list():
            raise ValueError(f"testbed.domains: {self.domains!r}; choose a subset of {','.join(DOMAINS)}")
        for split in SPLITS:
            if self.entities_in_split(split) < 2:
                raise ValueError(f"testbed: split {split!r} gets fewer than 2 entities per domain; "
                                 "raise n_entities_per_domain or the split fractions")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TestbedConfig:
        """Build from the ``testbed:`` params section; unknown keys are one clear error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in params if k not in known)
        if unknown:
            raise ValueError(f"testbed: unknown parameter(s) {unknown}; known: {sorted(known)}")
        kwargs = dict(params)
        if isinstance(kwargs.get("domains"), (list, tuple)):
            kwargs["domains"] = ",".join(str(d) for d in kwargs["domains"])
        return cls(**kwargs)

    def to_params(self) -> dict[str, Any]:
        """The flat params dict (inverse of :meth:`from_params`)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def domain_list(self) -> list[str]:
        return [d.strip() for d in self.domains.split(",") if d.strip()]

    def entities_in_split(self, split: str) -> int:
        n = self.n_entities_per_domain
        n_dev, n_test = round(n * self.frac_dev), round(n * self.frac_test)
        return {"train": n - n_dev - n_test, "dev": n_dev, "test": n_test}[split]

    def n_questions(self, split: str, qtype: str) -> int:
        base = getattr(self, f"questions_per_type_{split}")
        return int(round(base * float(getattr(self, f"weight_{qtype}"))))


# --------------------------------------------------------------------------------------------
# World model
# --------------------------------------------------------------------------------------------


@dataclass
class Event:
    """A dated event in an entity's history ("the initial public offering", 2011)."""

    key: str
    phrase: str
    when: int | dt.date
    aliases: list[str] = field(default_factory=list)


@dataclass
class Entity:
    """One entity of the fictional world.

    ``attrs`` holds stated values (withheld attributes are removed); ``refs`` maps a relation
    attribute to the entity id it points at (its value in ``attrs`` is that entity's name);
    ``outdated`` maps an attribute to the superseded value an older report states.
    """

    id: str
    kind: str
    domain: str
    split: str
    name: str
    gender: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    outdated: dict[str, Any] = field(default_factory=dict)
    asof: str = ""
    old_when: str = ""
    twin_of: str | None = None
    twins: list[str] = field(default_factory=list)
    roles: list[tuple[str, str]] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        """JSON-ready view for inspection (entities.jsonl)."""
        def js(v: Any) -> Any:
            return v.isoformat() if isinstance(v, dt.date) else v
        return {
            "id": self.id, "kind": self.kind, "domain": self.domain, "split": self.split,
            "name": self.name, "attrs": {k: js(v) for k, v in self.attrs.items()},
            "refs": dict(self.refs),
            "events": [{"key": e.key, "phrase": e.phrase, "when": js(e.when)} for e in self.events],
            "withheld": list(self.withheld), "outdated": {k: js(v) for k, v in self.outdated.items()},
            "twin_of": self.twin_of, "twins": list(self.twins),
        }


@dataclass
class World:
    """Everything the generator decided, for inspection and for tests.

    ``fact_locations`` maps ``"entity_id|attribute"`` to the passage ids stating the current
    value; ``outdated_locations`` to those stating the superseded one.
    """

    entities: dict[str, Entity]
    docs: list[dict[str, Any]]
    fact_locations: dict[str, list[str]]
    outdated_locations: dict[str, list[str]]
    split_facts: list[dict[str, Any]]
    conflicts: list[dict[str, Any]]


@dataclass
class Testbed:
    """Generated corpus (FlashRAG records), question splits and the world behind them."""

    __test__ = False

    config: TestbedConfig
    corpus: list[dict[str, Any]]
    splits: dict[str, list[dict[str, Any]]]
    world: World


def fact_key(entity_id: str, attribute: str) -> str:
    return f"{entity_id}|{attribute}"


# --------------------------------------------------------------------------------------------
# Values: how each type is written in text and which gold strings accept it
# --------------------------------------------------------------------------------------------

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                 "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                 "seventeen", "eighteen", "nineteen", "twenty")


def _date_forms(d: dt.date) -> list[str]:
    return [f"{d.day} {_MONTHS[d.month - 1]} {d.year}", f"{_MONTHS[d.month - 1]} {d.day}, {d.year}",
            d.isoformat()]


def gold_forms(vtype: str, value: Any) -> list[str]:
    """Accepted answer strings for a value; the first is the canonical one.

    Every way :func:`_display` writes a value contains (after SQuAD normalization) one of these.
    """
    if vtype == "date":
        return _date_forms(value)
    if vtype == "usd_m":
        return [f"${value} million", f"{value} million dollars", f"{value * 1_000_000:,}"]
    if vtype == "usd":
        return [f"${value:,}", f"{value:,} dollars"]
    if vtype == "count":
        return [f"{value:,}"] + ([str(value)] if value >= 1000 else [])
    if vtype == "small":
        return [str(value)] + ([_NUMBER_WORDS[value]] if value < len(_NUMBER_WORDS) else [])
    if vtype == "age":
        return [str(value), f"{value} years old", f"{value} years"]
    if vtype == "metres":
        return [f"{value} metres", f"{value} meters", f"{value} m"]
    if vtype == "km2":
        return [f"{value} square kilometres", f"{value} square kilometers", f"{value} km2"]
    if vtype == "years":
        return [str(value), f"{value} years"]
    if vtype == "days":
        return [str(value), f"{value} days"]
    if vtype == "doctor":
        return [value, value.removeprefix("Dr ")]
    if vtype == "river":
        return [f"{value} River", value]
    if vtype == "treatment":
        plain = re.sub(r"^(a|an) ", "", value)
        return [value] if plain == value else [value, plain]
    return [str(value)]


def _display(vtype: str, value: Any, rng: random.Random) -> str:
    """One surface form of a value as written in a passage."""
    if vtype == "date":
        return rng.choice(_date_forms(value)[:2])
    if vtype == "year":
        return str(value)
    if vtype == "usd_m":
        return rng.choice([f"${value} million", f"{value} million dollars", f"USD {value} million"])
    if vtype == "usd":
        return rng.choice([f"${value:,}", f"{value:,} dollars"])
    if vtype == "count":
        return f"{value:,}" if value < 10000 or rng.random() < 0.7 else str(value)
    if vtype == "small":
        return _NUMBER_WORDS[value] if value < len(_NUMBER_WORDS) and rng.random() < 0.3 else str(value)
    if vtype == "metres":
        return f"{value} metres"
    if vtype == "km2":
        return f"{value} square kilometres"
    if vtype == "river":
        return f"the {value} River"
    return str(value)


def _canonical(vtype: str, value: Any) -> str:
    if vtype == "river":
        return f"{value} River"
    return gold_forms(vtype, value)[0]



_VOWELS = "aeiou"


def _article(word: str) -> str:
    return ("an " if word[:1].lower() in _VOWELS else "a ") + word


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def normalize(text: str) -> str:
    """Word-splitting normalization (punctuation to spaces, like :func:`ragcritic_lib.evaluation.scoring.normalize_words`)."""
    text = str(text).lower()
    text = re.sub(r"[^\w\s]|_", " ", text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())
