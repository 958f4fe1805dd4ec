"""A controlled RAG testbed: a seeded fictional world rendered into a corpus and typed questions.

The generator is template-based (no LLM) and fully deterministic: one ``random.Random`` stream
per concern (world, rendering, questions), all derived from the seed; nothing depends on set
order or string hashing, so the same config gives the same bytes.

The world has five domains in the spirit of RAGEval's DragonBall (finance: companies; law: court
cases; medical: patients and hospitals; places: towns and people; sports: clubs). Entities have
typed attributes (years, dates, amounts, counts, names) and relations (founder, headquarters,
presiding judge, mayor, coach, hospital). Each entity is rendered into a profile document in
varied wording and order with filler sentences, then chunked into passages of about
``passage_words`` words. Difficulty knobs, each recorded per question:

- ``distractor``: a near-duplicate entity ("Veltrix Systems" / "Veltrix Instruments") with its
  own, different values;
- ``conflict``: an older, clearly dated report states a superseded value (the newest dated
  statement is the true one);
- ``split_fact``: a fact phrased so that its cue ends one passage and its value starts the next.

Questions follow DragonBall's types: factual, multi_hop (bridge), comparison, numerical, temporal,
summary and unanswerable (gold ``"insufficient information"``). Train/dev/test are split by
entity: every split has its own entities (towns and people included), so no fact of a test
entity is needed by a train question; the corpus is shared.

Entry points: :class:`TestbedConfig`, :func:`generate_testbed`, :func:`write_testbed`,
:func:`testbed_stats`, :func:`example_per_type`.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ragcritic_lib import io as rio

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
                     "filler_rate", "fact_sheet_rate", "name_mention_rate", "knob_focus"):
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


# --------------------------------------------------------------------------------------------
# Schema: attributes, how they are stated, asked, compared and summarized
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Attr:
    vtype: str
    label: str
    say: tuple[str, ...]
    ask: tuple[str, ...]
    kp: str = ""                      # summary phrase, "{v}" = canonical value
    compare: tuple[tuple[str, str], ...] = ()   # (question with {a},{b}; "max"|"min")
    conflict: tuple[str, ...] = ()    # templates of the outdated statement ({oy})
    withhold_keywords: tuple[str, ...] = ()     # non-empty: may be withheld; words that state it


@dataclass(frozen=True)
class _Kind:
    domain: str
    mentions: tuple[str, ...]         # short mentions besides the name
    intro_attr: str
    intro: tuple[str, ...]
    titles: tuple[str, ...]
    attrs: dict[str, _Attr]
    fillers: tuple[str, ...]
    report_title: str = ""
    report_lead: tuple[str, ...] = ()
    event_say: tuple[str, ...] = ()
    event_prep: str = "for"
    summary_attrs: tuple[str, ...] = ()
    split_ok: tuple[str, ...] = ()    # attributes that may be phrased across a chunk boundary


# Templates: {S}/{s} mention of the subject (capitalized / not), {name} full name,
# {v} the value as written, {va} the value with an indefinite article, {asof} the present
# date of the profile, {oy} the date of the outdated report, {y} a year the attribute concerns.
_KINDS: dict[str, _Kind] = {
    "company": _Kind(
        domain="finance", mentions=("the company", "the firm"),
        intro_attr="industry",
        intro=("{name} is a company working in {v}.", "{name} is a business in the field of {v}.",
               "{name} operates in the {v} sector."),
        titles=("{name}", "{name}: company profile", "About {name}"),
        attrs={
            "industry": _Attr("text", "line of business", (), (
                "What line of business is {name} in?", "In which sector does {name} operate?"),
                kp="works in {v}"),
            "founded": _Attr("year", "founding year", (
                "{S} was founded in {v}.", "{S} was established in {v}.",
                "Established in {v}, {s} has grown steadily since."), (
                "In which year was {name} founded?", "When was {name} established?"),
                kp="was founded in {v}",
                compare=(("Which company was founded earlier, {a} or {b}?", "min"),
                         ("Which company is younger, {a} or {b}?", "max"))),
            "founder": _Attr("name", "founder", (
                "{S} was founded by {v}.", "{v} is the founder of {s}.", "The founder of {s} is {v}."), (
                "Who founded {name}?", "Who is the founder of {name}?"),
                kp="was founded by {v}"),
            "hq": _Attr("name", "headquarters city", (
                "{S} is headquartered in {v}.", "The headquarters of {s} are in {v}.",
                "{S} has its head office in {v}."), (
                "In which city is {name} headquartered?", "Where are the headquarters of {name}?"),
                kp="is headquartered in {v}"),
            "ceo": _Attr("name", "chief executive", (
                "As of {asof}, the chief executive of {s} is {v}.",
                "In {asof}, {v} serves as chief executive of {s}."), (
                "Who is the current chief executive of {name}?",
                "Who leads {name} as chief executive today?"),
                kp="is led by chief executive {v}",
                conflict=("In {oy}, {v} was the chief executive of {s}.",
                          "The {oy} report names {v} as chief executive of {s}.")),
            "employees": _Attr("count", "number of employees", (
                "As of {asof}, {s} employs {v} people.", "{S} had a workforce of {v} employees in {asof}."), (
                "How many people does {name} currently employ?",
                "How many employees does {name} have according to the latest figures?"),
                kp="employs {v} people",
                compare=(("Which company has more employees, {a} or {b}?", "max"),),
                conflict=("At the end of {oy}, {s} employed {v} people.",
                          "The workforce of {s} stood at {v} employees in {oy}.")),
            "revenue_2022": _Attr("usd_m", "revenue for 2022", (
                "In 2022, {s} reported revenue of {v}.", "Revenue at {s} reached {v} in 2022.",
                "{S} recorded sales of {v} for 2022."), (
                "What revenue did {name} report for 2022?", "How much revenue did {name} make in 2022?"),
                kp="had revenue of {v} in 2022"),
            "revenue_2023": _Attr("usd_m", "revenue for 2023", (
                "In 2023, {s} reported revenue of {v}.", "Revenue at {s} came to {v} in 2023.",
                "{S} recorded sales of {v} for 2023."), (
                "What revenue did {name} report for 2023?", "How much revenue did {name} make in 2023?"),
                kp="had revenue of {v} in 2023",
                compare=(("Which company reported higher revenue in 2023, {a} or {b}?", "max"),)),
            "net_profit": _Attr("usd_m", "net profit for 2023", (
                "{S} posted a net profit of {v} in 2023.", "Net profit at {s} came to {v} for 2023."), (
                "What net profit did {name} report for 2023?",),
                withhold_keywords=("net profit", "profit")),
            "exchange": _Attr("text", "stock exchange listing", (
                "Shares of {s} trade on the {v}.", "{S} is listed on the {v}."), (
                "On which stock exchange is {name} listed?",),
                withhold_keywords=("exchange", "listed on", "shares")),
            "auditor": _Attr("text", "auditor", (
                "The accounts of {s} are audited by {v}.", "{v} audits the accounts of {s}."), (
                "Which firm audits the accounts of {name}?",),
                withhold_keywords=("audit",)),
        },
        fillers=(
            "{S} places great emphasis on training its staff.",
            "Customers often praise the reliability of the products made by {s}.",
            "{S} regularly takes part in regional trade fairs.",
            "The management of {s} describes its culture as practical and open.",
            "Over the years, {s} has built long relationships with its suppliers.",
            "{S} publishes a newsletter for its customers.",
            "Analysts describe the market in which {s} operates as highly competitive.",
            "{S} supports several local charities.",
            "The offices of {s} were renovated not long ago.",
            "Like many firms of its size, {s} invests steadily in research.",
        ),
        report_title="{name} annual report {oy}",
        report_lead=("This summary is taken from the annual report that {name} published for {oy}.",
                     "The following figures come from the {oy} annual report of {name}."),
        event_say=("The {ev} took place {when}.", "{When}, {s} completed the {ev}.",
                   "{S} marked the {ev} {when}."),
        summary_attrs=("industry", "founded", "founder", "hq", "ceo", "employees", "revenue_2023"),
        split_ok=("founded", "hq", "revenue_2022", "revenue_2023", "net_profit", "auditor"),
    ),
    "person": _Kind(
        domain="places", mentions=(),
        intro_attr="occupation",
        intro=("{name} is {va}.", "{name} works as {va}."),
        titles=("{name}", "{name} (biography)"),
        attrs={
            "occupation": _Attr("text", "occupation", (), ("What is the occupation of {name}?",),
                                kp="works as {v}"),
            "birth_year": _Attr("year", "year of birth", (
                "{S} was born in {v}.", "{S} was born in the year {v}."), (
                "In which year was {name} born?", "What is the year of birth of {name}?"),
                kp="was born in {v}"),
            "birthplace": _Attr("name", "birthplace", (
                "{S} was born in the town of {v}.", "{S} grew up in {v}, where {pr} was born."), (
                "In which town was {name} born?", "Where was {name} born?"),
                kp="was born in {v}"),
            "education": _Attr("text", "alma mater", (
                "{S} studied at the {v}.", "{S} graduated from the {v}."), (
                "Where did {name} study?", "Which institution did {name} graduate from?"),
                kp="studied at the {v}"),
            "appointed": _Attr("year", "year of appointment to the bench", (
                "{S} was appointed to the bench in {v}.", "{S} became a judge in {v}."), (
                "In which year was {name} appointed to the bench?",), kp="became a judge in {v}"),
        },
        fillers=(
            "{S} enjoys long walks in the hills.",
            "Colleagues describe {s} as thorough and calm.",
            "{S} has given talks at several regional events.",
            "In spare time, {s} plays the piano.",
            "{S} rarely gives interviews.",
            "Friends say {s} is an avid reader of history books.",
        ),
        split_ok=("birth_year", "education", "appointed"),
    ),
    "town": _Kind(
        domain="places", mentions=("the town",),
        intro_attr="region",
        intro=("{name} is a town in {v}.", "{name} is a small town in {v}.",
               "{name} lies in {v}."),
        titles=("{name}", "{name} (town)", "Town of {name}"),
        attrs={
            "region": _Attr("text", "province", (), (
                "In which province is {name} located?", "Which province is {name} part of?"),
                kp="lies in {v}"),
            "founded": _Attr("year", "founding year", (
                "{S} was founded in {v}.", "The first settlement at {s} dates from {v}.",
                "{S} received its town charter in {v}."), (
                "In which year was {name} founded?", "When was {name} founded?"),
                kp="was founded in {v}",
                compare=(("Which town was founded earlier, {a} or {b}?", "min"),
                         ("Which town is younger, {a} or {b}?", "max"))),
            "population": _Attr("count", "population", (
                "According to the {asof} census, {s} has {v} inhabitants.",
                "{S} had a population of {v} at the {asof} census."), (
                "What is the current population of {name}?",
                "How many people live in {name} according to the latest census?"),
                kp="has {v} inhabitants",
                compare=(("Which town has the larger population, {a} or {b}?", "max"),),
                conflict=("The {oy} census counted {v} inhabitants in {s}.",
                          "In {oy}, {s} had {v} residents.")),
            "mayor": _Attr("name", "mayor", (
                "The mayor of {s} is {v}.", "{S} is governed by mayor {v}.", "{v} serves as mayor of {s}."), (
                "Who is the mayor of {name}?",), kp="is governed by mayor {v}"),
            "river": _Attr("river", "river", (
                "{S} lies on {v}.", "{v_cap} flows through {s}."), (
                "On which river does {name} lie?", "Which river flows through {name}?"),
                kp="lies on the {v}"),
            "elevation": _Attr("metres", "elevation", (
                "{S} lies at an elevation of {v} above sea level.",), (
                "At what elevation does {name} lie?",),
                withhold_keywords=("elevation", "above sea level")),
            "area": _Attr("km2", "area", ("{S} covers {v}.",), (
                "How large is the area of {name}?",), withhold_keywords=("square kilomet",)),
            "sister_city": _Attr("text", "sister city", ("{S} is twinned with the town of {v}.",), (
                "Which town is the sister city of {name}?",), withhold_keywords=("twinned", "sister")),
        },
        fillers=(
            "{S} is known for its weekly farmers' market.",
            "Visitors to {s} often mention its narrow cobbled streets.",
            "The hills around {s} are popular with hikers.",
            "Winters in {s} are usually mild and wet.",
            "{S} has a small but active historical society.",
            "Several old churches stand in the centre of {s}.",
            "Local bakeries in {s} are known for their rye bread.",
            "Cycling paths connect {s} with neighbouring villages.",
        ),
        report_title="Census bulletin {oy}: {name}",
        report_lead=("This bulletin summarizes the {oy} census results for {name}.",
                     "The figures below were published after the {oy} census of {name}."),
        event_say=("The {ev} took place {when}.", "{When}, {s} celebrated the {ev}.",
                   "{S} saw the {ev} {when}."),
        event_prep="in",
        summary_attrs=("region", "founded", "population", "mayor", "river"),
        split_ok=("founded", "river", "elevation", "area"),
    ),
    "case": _Kind(
        domain="law", mentions=("the case", "the lawsuit", "the dispute"),
        intro_attr="court",
        intro=("{name} is a civil case heard by the {v}.", "{name} was a lawsuit before the {v}.",
               "The civil dispute {name} came before the {v}."),
        titles=("{name}", "Case summary: {name}"),
        attrs={
            "court": _Attr("text", "court", (), ("Which court heard {name}?",), kp="was heard by the {v}"),
            "plaintiff": _Attr("name", "plaintiff", (
                "The plaintiff in {s} was {v}.", "{v} brought {s} as plaintiff."), (
                "Who was the plaintiff in {name}?",), kp="was brought by {v}"),
            "judge": _Attr("name", "presiding judge", (
                "Judge {v} presided over {s}.", "{S} was presided over by Judge {v}."), (
                "Which judge presided over {name}?", "Who was the presiding judge in {name}?"),
                kp="was presided over by Judge {v}"),
            "filed": _Attr("date", "filing date", (
                "{S} was filed on {v}.", "The complaint in {s} was filed on {v}."), (
                "On what date was {name} filed?", "When was the complaint in {name} filed?"),
                kp="was filed on {v}",
                compare=(("Which case was filed earlier, {a} or {b}?", "min"),)),
            "verdict_date": _Attr("date", "verdict date", (
                "The verdict in {s} was delivered on {v}.", "On {v}, the court delivered its verdict in {s}."), (
                "When was the verdict in {name} delivered?",), kp="had its verdict on {v}"),
            "claimed": _Attr("usd", "damages claimed", (
                "The plaintiff in {s} sought damages of {v}.", "{S} involved a damages claim of {v}."), (
                "How much in damages was claimed in {name}?",), kp="involved a claim of {v}",
                compare=(("In which case were higher damages claimed, {a} or {b}?", "max"),)),
            "awarded": _Attr("usd", "final award", (
                "After the appeal decided in {asof}, the final award in {s} stood at {v}.",
                "Following the appeal ruling of {asof}, the plaintiff in {s} was finally awarded {v}."), (
                "What was the final amount awarded in {name}?",
                "How much was the plaintiff in {name} finally awarded?"),
                kp="ended with a final award of {v}",
                compare=(("In which case was the larger final award made, {a} or {b}?", "max"),),
                conflict=("A press report from {oy} stated that the jury in {s} had awarded {v} to the plaintiff.",
                          "In {oy}, the jury in {s} awarded {v}, a sum later revised on appeal.")),
            "case_number": _Attr("text", "case number", (
                "{S} is registered under case number {v}.", "The court file number of {s} is {v}."), (
                "What is the case number of {name}?",), kp="has case number {v}"),
            "defense_counsel": _Attr("name", "defense counsel", (
                "The defendant in {s} was represented by attorney {v}.",), (
                "Who represented the defendant in {name}?",),
                withhold_keywords=("represented", "attorney", "counsel", "lawyer")),
            "jurors": _Attr("small", "number of jurors", ("A jury of {v} jurors heard {s}.",), (
                "How many jurors heard {name}?",), withhold_keywords=("juror",)),
            "witnesses": _Attr("small", "number of witnesses", ("In {s}, {v} witnesses testified.",), (
                "How many witnesses testified in {name}?",), withhold_keywords=("witness",)),
        },
        fillers=(
            "Legal commentators followed {s} closely.",
            "{S} raised questions about contract law in the region.",
            "Both parties in {s} issued brief statements to the press.",
            "The proceedings in {s} were open to the public.",
            "Observers described the arguments in {s} as technical.",
            "{S} is sometimes cited in later disputes of a similar kind.",
        ),
        report_title="Press report on {name} ({oy})",
        report_lead=("This press report on {name} appeared in {oy}.",
                     "The following account of {name} was published in {oy}."),
        event_say=("The {ev} was held {when}.", "{When}, the parties in {s} attended the {ev}.",
                   "The {ev} in {s} took place {when}."),
        event_prep="in",
        summary_attrs=("court", "plaintiff", "judge", "filed", "claimed", "awarded"),
        split_ok=("filed", "verdict_date", "claimed", "case_number"),
    ),
    "patient": _Kind(
        domain="medical", mentions=("the patient",),
        intro_attr="hospital",
        intro=("{name} was a patient at {v}.", "{name} was treated at {v}."),
        titles=("Patient record: {name}", "{name}: hospital stay summary"),
        attrs={
            "hospital": _Attr("name", "hospital", (), (
                "At which hospital was {name} treated?",), kp="was treated at {v}"),
            "age": _Attr("age", "age at admission", (
                "{S} was {v} years old at admission.", "At the time of admission, {s} was {v} years old."), (
                "How old was {name} when admitted to hospital?",), kp="was {v} years old",
                compare=(("Which patient was older at admission, {a} or {b}?", "max"),)),
            "admitted": _Attr("date", "admission date", (
                "{S} was admitted on {v}.", "The admission of {s} took place on {v}."), (
                "On what date was {name} admitted?", "When was {name} admitted to hospital?"),
                kp="was admitted on {v}",
                compare=(("Which patient was admitted earlier, {a} or {b}?", "min"),)),
            "discharged": _Attr("date", "discharge date", (
                "{S} was discharged on {v}.", "{S} left the hospital on {v}."), (
                "When was {name} discharged?",), kp="was discharged on {v}"),
            "diagnosis": _Attr("text", "final diagnosis", (
                "The final diagnosis for {s}, confirmed on {asof}, was {v}.",
                "On {asof}, the doctors confirmed a final diagnosis of {v} for {s}."), (
                "What was the final diagnosis for {name}?",), kp="was diagnosed with {v}",
                conflict=("On {oy}, the initial assessment of {s} suggested {v}.",
                          "The admission note of {oy} records a suspected diagnosis of {v} for {s}.")),
            "physician": _Attr("doctor", "attending physician", (
                "{S} was under the care of {v}.", "The attending physician of {s} was {v}."), (
                "Who was the attending physician of {name}?",), kp="was cared for by {v}"),
            "treatment": _Attr("treatment", "treatment", (
                "{S} received {v}.", "Treatment for {s} consisted of {v}."), (
                "What treatment did {name} receive?",), kp="received {v}"),
            "blood_type": _Attr("text", "blood type", ("{S} has blood type {v}.",), (
                "What is the blood type of {name}?",), withhold_keywords=("blood type", "blood group")),
            "allergy": _Attr("text", "allergy", ("{S} is allergic to {v}.",), (
                "What is {name} allergic to?",), withhold_keywords=("allerg",)),
            "insurer": _Attr("text", "insurer", ("{S} is insured with {v}.",), (
                "With which company is {name} insured?",), withhold_keywords=("insur",)),
        },
        fillers=(
            "The nursing staff noted that {s} was cooperative throughout the stay.",
            "Family members visited {s} regularly.",
            "{S} was advised to rest at home after leaving the hospital.",
            "Follow-up appointments were arranged for {s}.",
            "The medical team kept detailed notes on the progress of {s}.",
            "{S} reported feeling much better towards the end of the stay.",
        ),
        report_title="Admission note: {name} ({oy})",
        report_lead=("This note was written when {name} was admitted on {oy}.",
                     "Admission note for {name}, dated {oy}."),
        event_say=("The {ev} took place {when}.", "{When}, {s} had the {ev}.",
                   "{S} had the {ev} {when}."),
        summary_attrs=("hospital", "admitted", "diagnosis", "physician", "treatment", "discharged"),
        split_ok=("age", "admitted", "discharged", "physician", "treatment"),
    ),
    "hospital": _Kind(
        domain="medical", mentions=("the hospital",),
        intro_attr="city",
        intro=("{name} is a hospital in {v}.", "{name} is a hospital located in {v}."),
        titles=("{name}", "{name} (hospital)"),
        attrs={
            "city": _Attr("name", "town", (), ("In which town is {name} located?",),
                          kp="is located in {v}"),
            "beds": _Attr("count", "number of beds", (
                "As of {asof}, {s} has {v} beds.", "{S} operated {v} beds in {asof}."), (
                "How many beds does {name} currently have?",), kp="has {v} beds",
                compare=(("Which hospital has more beds, {a} or {b}?", "max"),),
                conflict=("In {oy}, {s} had {v} beds.", "The {oy} yearbook lists {v} beds at {s}.")),
            "founded": _Attr("year", "founding year", (
                "{S} opened in {v}.", "{S} was founded in {v}."), (
                "In which year was {name} founded?",), kp="was founded in {v}",
                compare=(("Which hospital was founded earlier, {a} or {b}?", "min"),)),
            "director": _Attr("doctor", "director", (
                "As of {asof}, the director of {s} is {v}.", "In {asof}, {s} is directed by {v}."), (
                "Who is the current director of {name}?",), kp="is directed by {v}",
                conflict=("In {oy}, {s} was directed by {v}.",
                          "The {oy} yearbook names {v} as director of {s}.")),
            "specialty": _Attr("text", "best-known department", (
                "{S} is known for its {v} department.", "The {v} department of {s} is well regarded."), (
                "Which department is {name} best known for?",), kp="is known for its {v} department"),
        },
        fillers=(
            "{S} trains medical students from the region.",
            "The main building of {s} was extended some years ago.",
            "{S} runs a volunteer programme for local residents.",
            "Patients at {s} can use a small garden near the entrance.",
            "{S} works closely with family doctors nearby.",
        ),
        report_title="{name} yearbook {oy}",
        report_lead=("This entry comes from the {oy} yearbook of {name}.",
                     "The {oy} yearbook of {name} gives the following figures."),
        summary_attrs=("city", "founded", "beds", "director", "specialty"),
        split_ok=("founded", "specialty"),
    ),
    "club": _Kind(
        domain="sports", mentions=("the club",),
        intro_attr="sport",
        intro=("{name} is a {v} club.", "{name} is a professional {v} club."),
        titles=("{name}", "{name} (club profile)"),
        attrs={
            "sport": _Attr("text", "sport", (), ("Which sport does {name} play?",), kp="plays {v}"),
            "city": _Attr("name", "home town", (
                "{S} is based in {v}.", "{S} plays its home games in {v}."), (
                "In which town is {name} based?",), kp="is based in {v}"),
            "founded": _Attr("year", "founding year", (
                "{S} was founded in {v}.", "{S} was formed in {v}."), (
                "In which year was {name} founded?",), kp="was founded in {v}",
                compare=(("Which club was founded earlier, {a} or {b}?", "min"),)),
            "stadium": _Attr("text", "home ground", (
                "{S} plays at {v}.", "The home ground of {s} is {v}."), (
                "What is the home ground of {name}?", "At which ground does {name} play?"),
                kp="plays at {v}"),
            "capacity": _Attr("count", "stadium capacity", (
                "As of {asof}, the home ground of {s} has a capacity of {v}.",
                "In {asof}, the stadium of {s} holds {v} spectators."), (
                "What is the current capacity of the home ground of {name}?",), kp="has a ground for {v} spectators",
                compare=(("Which club has the larger home ground, {a} or {b}?", "max"),),
                conflict=("In {oy}, the stadium of {s} held {v} spectators.",
                          "The {oy} season guide lists a capacity of {v} for the ground of {s}.")),
            "coach": _Attr("name", "head coach", (
                "The head coach of {s} is {v}.", "{S} is coached by {v}."), (
                "Who is the head coach of {name}?",), kp="is coached by {v}"),
            "titles": _Attr("small", "number of league titles", (
                "{S} has won {v} league titles.", "Over its history, {s} has collected {v} league titles."), (
                "How many league titles has {name} won?",), kp="has won {v} league titles",
                compare=(("Which club has won more league titles, {a} or {b}?", "max"),)),
            "mascot": _Attr("text", "mascot", ("The mascot of {s} is {v}.",), (
                "What is the mascot of {name}?",), withhold_keywords=("mascot",)),
            "record_attendance": _Attr("count", "record attendance", (
                "The record attendance of {s} is {v}.",), (
                "What is the record attendance of {name}?",), withhold_keywords=("attendance",)),
            "sponsor": _Attr("text", "shirt sponsor", ("{S} is sponsored by {v}.",), (
                "Which company sponsors {name}?",), withhold_keywords=("sponsor",)),
        },
        fillers=(
            "Supporters of {s} are known for their loud singing.",
            "{S} has a long rivalry with a neighbouring club.",
            "The youth teams of {s} train several evenings a week.",
            "{S} organises a summer camp for children.",
            "Matches of {s} are broadcast on regional radio.",
            "Local fans wear the colours of {s} with pride.",
        ),
        report_title="{name} season guide {oy}",
        report_lead=("This is an excerpt from the {oy} season guide of {name}.",
                     "The {oy} season guide of {name} includes the following details."),
        event_say=("The {ev} took place {when}.", "{When}, {s} celebrated the {ev}.",
                   "{S} marked the {ev} {when}."),
        summary_attrs=("sport", "city", "founded", "stadium", "coach", "titles"),
        split_ok=("founded", "stadium", "titles"),
    ),
}

# Names carry no abbreviation periods ("Dr Ines Varga", "St Aldric Hospital", "Keller v Norava
# Foods"): answer extraction cuts at the first sentence end, and a period inside a name would be
# read as one.

# Main (question-bearing) kinds per domain; people and hospitals are support entities.
_MAIN_KIND = {"finance": "company", "law": "case", "medical": "patient", "places": "town", "sports": "club"}
# Kinds asked about as main entities per domain (comparisons and numerics also use hospitals).
_DOMAIN_KINDS = {"finance": ("company",), "law": ("case",), "medical": ("patient", "hospital"),
                 "places": ("town",), "sports": ("club",)}
_ID_PREFIX = {"company": "co", "person": "pe", "town": "tw", "case": "ca", "patient": "pa",
              "hospital": "ho", "club": "cl"}
_GENERIC_FILLERS = (
    "The following summary is based on publicly available records.",
    "Some details below have been simplified for readability.",
    "This overview was last reviewed by the editorial team.",
)
# Relation attribute -> the noun phrase used to describe the bridge entity in multi-hop questions.
_BRIDGES: dict[tuple[str, str], str] = {
    ("company", "founder"): "the founder of {name}",
    ("company", "hq"): "the city where {name} is headquartered",
    ("case", "judge"): "the judge who presided over {name}",
    ("patient", "hospital"): "the hospital where {name} was treated",
    ("town", "mayor"): "the mayor of {name}",
    ("club", "coach"): "the head coach of {name}",
    ("club", "city"): "the home town of {name}",
}
_BRIDGE_TARGETS: dict[str, tuple[str, ...]] = {
    "person": ("birth_year", "birthplace", "education", "appointed"),
    "town": ("mayor", "region", "river", "population", "founded"),
    "hospital": ("city", "director", "beds", "founded"),
}

# --------------------------------------------------------------------------------------------
# Name pools (fictional)
# --------------------------------------------------------------------------------------------

_FIRST_F = ("Lena", "Mara", "Ines", "Clara", "Hanna", "Greta", "Nora", "Elise", "Vera", "Sofia",
            "Alma", "Ida", "Maren", "Tessa", "Livia", "Ada", "Rosa", "Helena", "Irene", "Judith",
            "Petra", "Selma", "Ruth", "Edith", "Miriam", "Linnea", "Freya", "Oda", "Yara", "Amara")
_FIRST_M = ("Tomas", "Anton", "Elias", "Jonas", "Felix", "Victor", "Oskar", "Henrik", "Matteo",
            "Lucas", "Emil", "Adrian", "Bruno", "Caspar", "Darius", "Gideon", "Hugo", "Ivo", "Jasper",
            "Konrad", "Leon", "Milo", "Nils", "Otto", "Pavel", "Rafael", "Simon", "Teodor", "Viggo",
            "Anselm")
_SURNAMES = ("Marsh", "Keller", "Dunmore", "Halvorsen", "Brandt", "Okafor", "Lindqvist", "Moreau",
             "Castellan", "Varga", "Whitlock", "Ashby", "Thorne", "Radcliffe", "Vance", "Eriksen",
             "Fairbanks", "Calloway", "Holm", "Strand", "Mercer", "Quill", "Rowan", "Sterling",
             "Tolliver", "Ibarra", "Kovacs", "Larkin", "Navarro", "Pryce", "Renwick", "Salonen",
             "Underhill", "Voss", "Wexley", "Yardley", "Zeller", "Albrecht", "Bellamy", "Corwin",
             "Delacroix", "Ellery", "Finchley", "Garrick", "Hollis", "Iverson", "Jarvik",
             "Kendrick", "Lowell", "Marchetti", "Norwood", "Oakley", "Pellham", "Quinlan",
             "Redfield", "Sandoval", "Thackeray", "Valdez", "Winslow", "Abernethy", "Birkett",
             "Crane", "Dalgaard", "Esterhaus", "Falk", "Greaves", "Hargrove", "Ostrander",
             "Pennick", "Rasmussen", "Szabo", "Tremaine", "Vesper", "Wolcott")
# Surnames of the main people (founders, judges, mayors, coaches, patients, plaintiffs) are
# distinct from each other and from the minor names above, so only the deliberate
# near-duplicates look alike.
_MAIN_SURNAME_HEADS = ("Ash", "Brad", "Carl", "Fair", "Kings", "Lang", "North", "Pem", "Ross", "Stan",
                       "Wal", "Whit", "Yar", "Brom", "Chad", "Dray", "Eller", "Gil", "Hollings", "Merri")
_MAIN_SURNAME_TAILS = ("ley", "wood", "well", "ridge", "croft", "shaw", "ham", "worth", "by", "ton",
                       "cott", "hurst")
_CO_ONSETS = ("V", "N", "Qu", "K", "Z", "Tr", "Br", "Pl", "Sk", "L", "M", "D", "Th", "Gr", "Cr",
              "F", "H", "R", "S", "T", "Ost", "Ald", "Bel", "Cal", "Dor")
_CO_NUCLEI = ("el", "ar", "or", "ex", "an", "ir", "ul", "en", "ov", "al", "yn", "om")
_CO_CODAS = ("trix", "bel", "ion", "ara", "exa", "is", "ora", "ent", "ium", "ava", "on", "ix", "ant",
             "eon", "ura")
_INDUSTRIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("industrial sensors", ("Systems", "Instruments", "Sensorics")),
    ("freight logistics", ("Logistics", "Freight", "Transport")),
    ("organic foods", ("Foods", "Farms", "Provisions")),
    ("medical imaging software", ("Imaging", "Medtech", "Diagnostics")),
    ("renewable energy", ("Energy", "Power", "Renewables")),
    ("consumer electronics", ("Electronics", "Devices", "Labs")),
    ("textiles", ("Textiles", "Mills", "Fabrics")),
    ("construction materials", ("Materials", "Building", "Cement")),
    ("financial software", ("Solutions", "Software", "Analytics")),
    ("pharmaceuticals", ("Pharma", "Therapeutics", "Biolabs")),
)
_TOWN_ROOTS = ("Kess", "Dun", "Mar", "Hal", "Brea", "Ost", "Wend", "Fal", "Gorm", "Lint", "Rave",
               "Sel", "Thorn", "Ulm", "Varn", "Wick", "Ard", "Bel", "Cal", "Elm", "Fen", "Glen",
               "Hart", "Ivel", "Kirn", "Lud", "Mor", "Nesh", "Orm", "Pell", "Quen", "Rud", "Stav",
               "Tarn", "Ves", "Yell", "Aber", "Bryn", "Cor", "Dal", "Eas", "Fro", "Gar", "Hen", "Ilm",
               "Jor", "Kil", "Lan", "Mal", "Pen", "Rom", "Sal", "Tor", "Wes", "Zen", "Oak")
_TOWN_ENDINGS = ("ington", "ford", "by", "mere", "wick", "holm", "stead", "bridge", "haven",
                 "dale", "ton", "moor", "field", "wood")
_REGIONS = ("Varnholt Province", "Elsmere Province", "Corridan Province", "Halden Province",
            "Ostmark Province", "Brannock Province", "Sylvane Province", "Tarrow Province")
_RIVERS = ("Ossel", "Brine", "Tarrow", "Vell", "Amber", "Kessel", "Lorn", "Mirel", "Sable", "Wend",
           "Corra", "Dunlin", "Esk", "Fallow", "Glimm", "Heron")
_UNIVERSITIES = ("Halden Institute of Technology", "University of Corridan", "Royal College of Varnholt",
                 "Elsmere School of Economics", "Brannock Conservatory of Music", "University of Ostmark",
                 "Sylvane Academy of Law", "University of Tarrow")
_EXCHANGES = ("Northgate Stock Exchange", "Calder Stock Exchange", "Varnholt Stock Exchange",
              "Meridian Stock Exchange")
_AUDITORS = ("Brandt & Holm Auditors", "Crane Whitfield LLP", "Ostrander Partners", "Lowell & Pryce",
             "Norwood Assurance")
_DEFENDANT_SUFFIXES = ("Freight", "Foods", "Holdings", "Builders", "Motors", "Textiles", "Media",
                       "Trading")
_DIAGNOSES: tuple[tuple[str, str], ...] = (
    ("bacterial pneumonia", "intravenous antibiotics"),
    ("acute appendicitis", "a laparoscopic appendectomy"),
    ("a fractured left tibia", "surgical fixation with a metal plate"),
    ("type 2 diabetes", "insulin therapy"),
    ("kidney stones", "shock-wave lithotripsy"),
    ("viral meningitis", "antiviral medication and fluids"),
    ("atrial fibrillation", "electrical cardioversion"),
    ("a herniated disc", "a lumbar discectomy"),
    ("gallstones", "a gallbladder removal"),
    ("severe asthma", "nebulised bronchodilators and steroids"),
    ("iron-deficiency anaemia", "iron infusions"),
    ("Lyme disease", "a course of doxycycline"),
)
_BLOOD_TYPES = ("A positive", "A negative", "B positive", "O positive", "O negative", "AB positive")
_ALLERGENS = ("penicillin", "latex", "peanuts", "shellfish", "ibuprofen", "pollen")
_INSURERS = ("Meridian Health Mutual", "Corvane Insurance", "Halden Care Fund", "Ostmark Mutual")
_SPECIALTIES = ("cardiology", "orthopaedics", "paediatrics", "oncology", "neurology", "maternity")
_SPORTS = ("football", "handball", "basketball", "ice hockey", "volleyball", "rugby")
_CLUB_NICKS = ("Rovers", "Rangers", "United", "Athletic", "Wanderers", "Falcons", "Harriers",
               "Comets", "Mariners", "Lions", "Foxes", "Stags")
_MASCOTS = ("a grey heron", "a red fox", "a brown bear", "a golden eagle", "a black cat", "a badger")
_OCCUPATIONS = {
    "founder": ("engineer and entrepreneur", "chemist", "economist", "software developer",
                "industrial designer", "accountant"),
    "judge": ("judge",), "mayor": ("politician", "former teacher", "civil engineer"),
    "coach": ("sports coach", "former professional athlete"), "": ("architect", "journalist", "pharmacist"),
}
_CASE_EVENTS = ("site inspection", "settlement conference", "preliminary hearing", "mediation session")
_PATIENT_EVENTS = ("MRI scan", "CT scan", "transfer to the general ward", "first physiotherapy session",
                   "nutrition assessment", "consultation with a specialist")
_VOWELS = "aeiou"


def _article(word: str) -> str:
    return ("an " if word[:1].lower() in _VOWELS else "a ") + word


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


class _Names:
    """Draws unique fictional names (membership only in the set: order never matters)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()
        self.main_surnames = [h + t for h in _MAIN_SURNAME_HEADS for t in _MAIN_SURNAME_TAILS]
        rng.shuffle(self.main_surnames)
        self.town_roots = list(_TOWN_ROOTS)
        rng.shuffle(self.town_roots)
        self.used_surnames: set[str] = set()
        self.used_roots: set[str] = set()
        # A town or coined word may not be a surname (keeps name matching clean).
        self.reserved_words: set[str] = set(_SURNAMES) | set(self.main_surnames)

    def take(self, make: Callable[[], str], *, single_word: bool = False) -> str:
        """A fresh name from ``make``; single-word names (towns, coined words) may not be surnames."""
        for _ in range(2000):
            name = make()
            if name not in self.used and not (single_word and name in self.reserved_words):
                self.used.add(name)
                return name
        raise RuntimeError("name pool exhausted; lower n_entities_per_domain")

    def claim(self, name: str) -> bool:
        """Reserve a specific name (near-duplicates); False when taken or a bare surname."""
        if name in self.used or name in self.reserved_words:
            return False
        self.used.add(name)
        return True

    def person(self, gender: str | None = None, *, main: bool = False) -> tuple[str, str]:
        """A full name and gender; ``main`` people get a surname nobody else has."""
        g = gender or self.rng.choice("fm")
        firsts = _FIRST_F if g == "f" else _FIRST_M
        r = self.rng
        if main:
            surname = next((x for x in self.main_surnames if x not in self.used_surnames), None)
            if surname is not None:
                self.used_surnames.add(surname)
                return self.take(lambda: f"{r.choice(firsts)} {surname}"), g
        return self.take(lambda: f"{r.choice(firsts)} {r.choice(_SURNAMES)}"), g

    def word(self) -> str:
        r = self.rng
        return self.take(lambda: r.choice(_CO_ONSETS) + r.choice(_CO_NUCLEI) + r.choice(_CO_CODAS),
                         single_word=True)

    def town(self) -> str:
        """A town name whose root no other town has (near-duplicates reuse the root on purpose)."""
        r = self.rng
        root = next((x for x in self.town_roots if x not in self.used_roots), None)
        if root is None:
            return self.take(lambda: r.choice(_TOWN_ROOTS) + r.choice(_TOWN_ENDINGS), single_word=True)
        self.used_roots.add(root)
        return self.take(lambda: root + r.choice(_TOWN_ENDINGS), single_word=True)


def _vowel_variant(word: str, rng: random.Random) -> list[str]:
    """Near-duplicates of a word by changing one vowel after the first letter."""
    out = []
    positions = [i for i, ch in enumerate(word) if i > 0 and ch in _VOWELS]
    rng.shuffle(positions)
    for i in positions:
        for v in rng.sample(_VOWELS, len(_VOWELS)):
            if v != word[i]:
                out.append(word[:i] + v + word[i + 1:])
    return out


# --------------------------------------------------------------------------------------------
# World construction
# --------------------------------------------------------------------------------------------


class _WorldBuilder:
    def __init__(self, cfg: TestbedConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"{cfg.seed}/world")
        self.names = _Names(self.rng)
        self.entities: dict[str, Entity] = {}
        self.counters: dict[str, int] = {}
        self.by_split: dict[tuple[str, str], list[str]] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _new(self, kind: str, split: str, name: str, **kw: Any) -> Entity:
        self.counters[kind] = self.counters.get(kind, 0) + 1
        eid = f"{_ID_PREFIX[kind]}{self.counters[kind]:03d}"
        ent = Entity(id=eid, kind=kind, domain=_KINDS[kind].domain, split=split, name=name, **kw)
        self.entities[eid] = ent
        if ent.twin_of is None:
            self.by_split.setdefault((split, kind), []).append(eid)
        return ent

    def _pick(self, split: str, kind: str) -> Entity:
        return self.entities[self.rng.choice(self.by_split[(split, kind)])]

    def _link(self, ent: Entity, attr: str, target: Entity) -> None:
        ent.attrs[attr] = target.name
        ent.refs[attr] = target.id

    def _years(self, lo: int, hi: int, k: int) -> list[int]:
        return sorted(self.rng.sample(range(lo, hi + 1), k)) if hi - lo + 1 >= k else []

    def _date(self, y0: int, y1: int) -> dt.date:
        start = dt.date(y0, 1, 1)
        return start + dt.timedelta(days=self.rng.randrange((dt.date(y1, 12, 31) - start).days))

    # -- entities --------------------------------------------------------------------------
    def person(self, split: str, role: str, born: int, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        if twin_of is None:
            name, g = self.names.person(main=True)
        else:
            name, g = self._twin_name(twin_of), twin_of.gender
        p = self._new("person", split, name, gender=g, twin_of=twin_of.id if twin_of else None)
        p.attrs["occupation"] = r.choice(_OCCUPATIONS[role])
        p.attrs["birth_year"] = born
        self._link(p, "birthplace", self._pick(split, "town"))
        p.attrs["education"] = r.choice(_UNIVERSITIES)
        if role == "judge":
            p.attrs["appointed"] = min(born + r.randint(32, 50), 2020)
        return p

    def town(self, split: str, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        name = self.names.town() if twin_of is None else self._twin_name(twin_of)
        t = self._new("town", split, name, twin_of=twin_of.id if twin_of else None)
        t.attrs["region"] = r.choice(_REGIONS)
        t.attrs["founded"] = r.randint(1150, 1890)
        t.attrs["population"] = r.randint(2_000, 240_000)
        t.attrs["river"] = r.choice(_RIVERS)
        t.attrs["elevation"] = r.randint(5, 1400)
        t.attrs["area"] = r.randint(8, 320)
        t.attrs["sister_city"] = self.names.word() + r.choice(("burg", "stad", "heim"))
        t.asof, t.old_when = "2022", str(r.choice((2001, 2011)))
        first = max(t.attrs["founded"] + 5, 1850)
        names = [("railway", "opening of the railway station", []),
                 ("bridge", f"construction of the {r.choice(_SURNAMES)} Bridge", []),
                 ("library", "opening of the public library", []),
                 ("festival", f"first {r.choice(_TOWN_ROOTS)}fest music festival", []),
                 ("townhall", "restoration of the old town hall", [])]
        self._events(t, names, first, 2021, r.randint(3, 4))
        return t

    def company(self, split: str, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        if twin_of is None:
            industry, suffixes = r.choice(_INDUSTRIES)
            name = self.names.take(lambda: f"{self.names.word()} {r.choice(suffixes)}")
        else:
            industry = twin_of.attrs["industry"]
            name = self._twin_name(twin_of)
        c = self._new("company", split, name, twin_of=twin_of.id if twin_of else None)
        c.attrs["industry"] = industry
        founded = r.randint(1950, 2010)
        c.attrs["founded"] = founded
        if twin_of is None:
            founder = self.person(split, "founder", founded - r.randint(24, 45))
            self._link(c, "founder", founder)
            founder.roles.append(("founder", c.id))
        else:
            c.attrs["founder"] = self.names.person()[0]
        self._link(c, "hq", self._pick(split, "town"))
        c.attrs["ceo"] = self.names.person()[0]
        c.attrs["employees"] = r.randint(120, 24_000)
        rev22 = r.randint(15, 2400)
        c.attrs["revenue_2022"] = rev22
        c.attrs["revenue_2023"] = max(5, int(rev22 * r.uniform(0.8, 1.3)) + r.choice((-3, 2, 7)))
        c.attrs["net_profit"] = max(1, int(c.attrs["revenue_2023"] * r.uniform(0.03, 0.18)))
        c.attrs["exchange"] = r.choice(_EXCHANGES)
        c.attrs["auditor"] = r.choice(_AUDITORS)
        c.asof, c.old_when = str(_PRESENT), str(r.randint(2014, 2019))
        names = [("ipo", "initial public offering", ["IPO"]),
                 ("acquisition", f"acquisition of {self.names.word()} {r.choice(_DEFENDANT_SUFFIXES)}", []),
                 ("plant", f"opening of the {self._pick(split, 'town').name} plant", []),
                 ("launch", f"launch of the {self.names.word()} product line", []),
                 ("office", "opening of its first overseas office", [])]
        self._events(c, names, founded + 2, 2023, r.randint(3, 4))
        return c

    def case(self, split: str, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        if twin_of is None:
            plaintiff, _ = self.names.person(main=True)
            name = self.names.take(lambda: f"{plaintiff.split()[-1]} v {self.names.word()} "
                                           f"{r.choice(_DEFENDANT_SUFFIXES)}")
        else:
            plaintiff = f"{self.names.person()[0].split()[0]} {twin_of.name.split()[0]}"
            name = self._twin_name(twin_of)
        k = self._new("case", split, name, twin_of=twin_of.id if twin_of else None)
        k.attrs["court"] = f"{self._pick(split, 'town').name} District Court"
        k.attrs["plaintiff"] = plaintiff
        filed = self._date(2011, 2020)
        verdict = filed + dt.timedelta(days=r.randint(240, 900))
        if twin_of is None:
            judge = self.person(split, "judge", r.randint(1945, 1975))
            self._link(k, "judge", judge)
            judge.roles.append(("judge", k.id))
        else:
            k.attrs["judge"] = self.names.person()[0]
        k.attrs["filed"] = filed
        k.attrs["verdict_date"] = verdict
        claimed = r.randint(20, 1000) * 5_000
        k.attrs["claimed"] = claimed
        k.attrs["awarded"] = max(5_000, int(claimed * r.uniform(0.2, 0.85)) // 5_000 * 5_000)
        k.attrs["case_number"] = f"CV-{filed.year}-{r.randint(100, 9999):04d}"
        k.attrs["defense_counsel"] = self.names.person()[0]
        k.attrs["jurors"] = r.choice((6, 8, 12))
        k.attrs["witnesses"] = r.randint(3, 14)
        k.asof, k.old_when = str(verdict.year + 1), str(verdict.year)
        names = [(f"ev{i}", ph, []) for i, ph in enumerate(_CASE_EVENTS)]
        names.append(("deposition", f"deposition of {self.names.person()[0]}", []))
        names.append(("expert", f"expert testimony of Dr {self.names.person()[0]}", []))
        self._day_events(k, names, filed, verdict, r.randint(3, 4))
        return k

    def hospital(self, split: str, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        if twin_of is None:
            name = self.names.take(lambda: r.choice((
                f"St {self.names.word()} Hospital", f"{self.names.word()} Medical Centre",
                f"{self.names.word()} Infirmary")))
        else:
            name = self._twin_name(twin_of)
        h = self._new("hospital", split, name, twin_of=twin_of.id if twin_of else None)
        self._link(h, "city", self._pick(split, "town"))
        h.attrs["beds"] = r.randint(80, 1200)
        h.attrs["founded"] = r.randint(1870, 2005)
        h.attrs["director"] = "Dr " + self.names.person()[0]
        h.attrs["specialty"] = r.choice(_SPECIALTIES)
        h.asof, h.old_when = str(_PRESENT), str(r.randint(2012, 2019))
        return h

    def patient(self, split: str, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        if twin_of is None:
            name, g = self.names.person(main=True)
        else:
            name, g = self._twin_name(twin_of), twin_of.gender
        p = self._new("patient", split, name, gender=g, twin_of=twin_of.id if twin_of else None)
        self._link(p, "hospital", self._pick(split, "hospital"))
        p.attrs["age"] = r.randint(18, 92)
        admitted = self._date(2015, 2023)
        stay = r.randint(6, 21)
        discharged = admitted + dt.timedelta(days=stay)
        p.attrs["admitted"] = admitted
        p.attrs["discharged"] = discharged
        diagnosis, treatment = r.choice(_DIAGNOSES)
        p.attrs["diagnosis"] = diagnosis
        p.attrs["physician"] = "Dr " + self.names.person()[0]
        p.attrs["treatment"] = treatment
        p.attrs["blood_type"] = r.choice(_BLOOD_TYPES)
        p.attrs["allergy"] = r.choice(_ALLERGENS)
        p.attrs["insurer"] = r.choice(_INSURERS)
        p.asof, p.old_when = _date_forms(discharged)[0], _date_forms(admitted)[0]
        names = [(f"ev{i}", ph, []) for i, ph in enumerate(_PATIENT_EVENTS)]
        self._day_events(p, names, admitted, discharged, r.randint(3, 4))
        return p

    def club(self, split: str, *, twin_of: Entity | None = None) -> Entity:
        r = self.rng
        town = self._pick(split, "town")
        if twin_of is None:
            name = self.names.take(lambda: f"{self.names.word()} {r.choice(_CLUB_NICKS)}")
        else:
            name = self._twin_name(twin_of)
            town = self.entities[twin_of.refs["city"]] if r.random() < 0.5 else town
        c = self._new("club", split, name, twin_of=twin_of.id if twin_of else None)
        c.attrs["sport"] = r.choice(_SPORTS) if twin_of is None else twin_of.attrs["sport"]
        self._link(c, "city", town)
        founded = r.randint(1880, 1990)
        c.attrs["founded"] = founded
        stadium = self.names.take(lambda: r.choice((f"{r.choice(_SURNAMES)} Park",
                                                    f"{self.names.word()} Arena",
                                                    f"{r.choice(_SURNAMES)} Road Ground")))
        c.attrs["stadium"] = stadium
        c.attrs["capacity"] = r.randint(30, 600) * 100
        if twin_of is None:
            coach = self.person(split, "coach", r.randint(1960, 1988))
            self._link(c, "coach", coach)
            coach.roles.append(("coach", c.id))
        else:
            c.attrs["coach"] = self.names.person()[0]
        c.attrs["titles"] = r.randint(2, 19)
        c.attrs["mascot"] = r.choice(_MASCOTS)
        c.attrs["record_attendance"] = c.attrs["capacity"] + r.randint(1, 80) * 50
        c.attrs["sponsor"] = f"{self.names.word()} {r.choice(_DEFENDANT_SUFFIXES)}"
        c.asof, c.old_when = str(_PRESENT), str(r.randint(2008, 2018))
        names = [("title", "first league title", []), ("move", f"move to {stadium}", []),
                 ("promotion", "promotion to the top division", []),
                 ("academy", "opening of the youth academy", []),
                 ("cup", "first continental cup campaign", [])]
        self._events(c, names, founded + 2, 2023, r.randint(3, 4))
        return c

    def _events(self, ent: Entity, names: list[tuple[str, str, list[str]]], lo: int, hi: int, k: int) -> None:
        chosen = self.rng.sample(names, k)
        years = self._years(lo, hi, k)
        self.rng.shuffle(years)
        ent.events = sorted((Event(key, ph, y, al) for (key, ph, al), y in zip(chosen, years)),
                            key=lambda e: e.when)

    def _day_events(self, ent: Entity, names: list[tuple[str, str, list[str]]], start: dt.date,
                    end: dt.date, k: int) -> None:
        span = (end - start).days
        k = min(k, span - 1)
        offsets = self.rng.sample(range(1, span), k)
        chosen = self.rng.sample(names, k)
        ent.events = sorted((Event(key, ph, start + dt.timedelta(days=o), al)
                             for (key, ph, al), o in zip(chosen, offsets)), key=lambda e: e.when)

    # -- near-duplicates -------------------------------------------------------------------
    def _twin_name(self, orig: Entity) -> str:
        r = self.rng
        words = orig.name.split()
        candidates: list[str] = []
        if orig.kind == "company":
            industry = orig.attrs["industry"]
            suffixes = next(s for ind, s in _INDUSTRIES if ind == industry)
            candidates += [f"{words[0]} {s}" for s in suffixes if s != words[-1]]
            candidates += [f"{w} {words[-1]}" for w in _vowel_variant(words[0], r)]
        elif orig.kind == "case":
            head = " ".join(words[:-1])
            candidates += [f"{head} {s}" for s in r.sample(_DEFENDANT_SUFFIXES, len(_DEFENDANT_SUFFIXES))
                           if s != words[-1]]
        elif orig.kind == "club":
            candidates += [f"{' '.join(words[:-1])} {n}" for n in r.sample(_CLUB_NICKS, len(_CLUB_NICKS))
                           if n != words[-1]]
        elif orig.kind == "hospital":
            for i, w in enumerate(words):
                if len(w) > 4 and w not in ("Hospital", "Medical", "Centre", "Infirmary"):
                    candidates += [" ".join(words[:i] + [v] + words[i + 1:]) for v in _vowel_variant(w, r)]
        elif orig.kind == "town":
            root = next((t for t in _TOWN_ROOTS if orig.name.startswith(t)), orig.name[:3])
            candidates += [root + e for e in r.sample(_TOWN_ENDINGS, len(_TOWN_ENDINGS))
                           if root + e != orig.name]
        else:  # people and patients: same first name, a lookalike surname
            last = words[-1]
            candidates += [f"{words[0]} {v}" for v in _vowel_variant(last, r)]
            candidates += [f"{words[0]} {v}" for v in (last + "e", last + "er", last + "en", last[:-1] + "ie")]
        if orig.kind in ("company", "hospital", "town"):
            r.shuffle(candidates)
        for cand in candidates:
            if self.names.claim(cand):
                return cand
        raise RuntimeError(f"no near-duplicate name left for {orig.name!r}")

    def add_twins(self) -> None:
        cfg, r = self.cfg, self.rng
        makers = {"company": self.company, "case": self.case, "hospital": self.hospital,
                  "patient": self.patient, "club": self.club, "town": self.town}
        originals = [e for e in self.entities.values() if e.twin_of is None]
        for ent in originals:
            if cfg.n_distractors == 0 or r.random() >= cfg.distractor_rate:
                continue
            for _ in range(cfg.n_distractors):
                if ent.kind == "person":
                    born = ent.attrs["birth_year"] + r.choice((-7, -4, -2, 3, 5, 8))
                    role = next(iter(ent.roles), ("", ""))[0]
                    twin = self.person(ent.split, role if role != "judge" else "", born, twin_of=ent)
                else:
                    twin = makers[ent.kind](ent.split, twin_of=ent)
                self._differ(ent, twin)
                ent.twins.append(twin.id)

    def _differ(self, orig: Entity, twin: Entity) -> None:
        """A twin must not share a checkable value with its original (else it is no trap)."""
        for attr, value in list(twin.attrs.items()):
            if attr == _KINDS[twin.kind].intro_attr or orig.attrs.get(attr) != value:
                continue
            if isinstance(value, bool):
                continue
            if isinstance(value, int):
                twin.attrs[attr] = value + self.rng.choice((1, 2, 3)) * (1 if value < 1000 else 100)
            elif isinstance(value, dt.date):
                twin.attrs[attr] = value + dt.timedelta(days=self.rng.randint(3, 40))
            else:
                twin.attrs.pop(attr)
                twin.refs.pop(attr, None)

    # -- conflicts and withheld attributes -------------------------------------------------
    def add_conflicts(self) -> None:
        r = self.rng
        for ent in self.entities.values():
            if ent.twin_of is not None:
                continue
            spec = _KINDS[ent.kind]
            options = [a for a, s in spec.attrs.items() if s.conflict and a in ent.attrs]
            if not options or r.random() >= self.cfg.conflict_rate:
                continue
            attr = r.choice(options)
            cur, vtype = ent.attrs[attr], spec.attrs[attr].vtype
            if vtype == "count":
                old = int(cur * r.choice((r.uniform(0.6, 0.9), r.uniform(1.1, 1.4))))
                old = old // 100 * 100 if cur >= 10_000 else old
            elif vtype == "usd":
                old = min(ent.attrs["claimed"], int(cur * r.uniform(1.2, 1.8)) // 5_000 * 5_000)
            elif ent.kind == "patient":
                old = r.choice([d for d, _ in _DIAGNOSES if d != cur])
            elif vtype == "doctor":
                old = "Dr " + self.names.person()[0]
            else:
                old = self.names.person()[0]
            if old == cur or normalize(_canonical(vtype, old)) == normalize(_canonical(vtype, cur)):
                continue
            ent.outdated[attr] = old

    def withhold(self) -> None:
        r = self.rng
        for ent in self.entities.values():
            if ent.twin_of is not None:
                continue
            spec = _KINDS[ent.kind]
            options = [a for a, s in spec.attrs.items() if s.withhold_keywords and a in ent.attrs]
            for attr in r.sample(options, min(self.cfg.withheld_per_entity, len(options))):
                ent.attrs.pop(attr)
                ent.withheld.append(attr)
            # Attributes of this kind that may be withheld but were not are stated, so the
            # unanswerable question is about a plausible attribute that other entities have.

    def build(self) -> dict[str, Entity]:
        cfg = self.cfg
        domains = cfg.domain_list()
        for split in SPLITS:
            n = cfg.entities_in_split(split)
            for _ in range(max(n, 3)):
                self.town(split)
            if "medical" in domains:
                for _ in range(max(2, n // 3)):
                    self.hospital(split)
            # Mayors are created once all towns of the split exist (their birthplaces).
            for tid in list(self.by_split[(split, "town")]):
                town = self.entities[tid]
                mayor = self.person(split, "mayor", self.rng.randint(1950, 1985))
                self._link(town, "mayor", mayor)
                mayor.roles.append(("mayor", town.id))
            for domain, maker in (("finance", self.company), ("law", self.case),
                                  ("medical", self.patient), ("sports", self.club)):
                if domain in domains:
                    for _ in range(n):
                        maker(split)
        self.add_twins()
        self.add_conflicts()
        self.withhold()
        return self.entities


# --------------------------------------------------------------------------------------------
# Rendering: sentences, documents, chunking
# --------------------------------------------------------------------------------------------


@dataclass
class _Piece:
    text: str
    facts: list[str] = field(default_factory=list)     # fact keys, current values
    old: list[str] = field(default_factory=list)       # fact keys, outdated values
    refs: list[str] = field(default_factory=list)      # entity ids mentioned


@dataclass
class _SplitSentence:
    head: _Piece
    tail: _Piece
    key: str


def normalize(text: str) -> str:
    """Word-splitting normalization (punctuation to spaces, like :func:`ragcritic_lib.evaluation.scoring.normalize_words`)."""
    text = str(text).lower()
    text = re.sub(r"[^\w\s]|_", " ", text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


class _Renderer:
    def __init__(self, cfg: TestbedConfig, entities: dict[str, Entity]) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"{cfg.seed}/render")
        self.entities = entities

    def mention(self, ent: Entity, *, force_name: bool = False) -> str:
        if force_name or self.rng.random() < self.cfg.name_mention_rate:
            return ent.name
        if ent.kind in ("person", "patient"):
            # Surname mentions, no pronouns: every template then stays grammatical.
            surname = ent.name.split()[-1]
            if ent.kind == "patient":
                title = "Ms" if ent.gender == "f" else "Mr"
                return self.rng.choice((f"{title} {surname}", "the patient"))
            return surname
        return self.rng.choice(_KINDS[ent.kind].mentions)

    def fill(self, template: str, ent: Entity, value: str = "", *, force_name: bool = False, **extra: str) -> str:
        s = self.mention(ent, force_name=force_name)
        mapping = {"S": _cap(s), "s": s, "name": ent.name, "v": value, "v_cap": _cap(value),
                   "va": _article(value) if value else "", "asof": ent.asof, "oy": ent.old_when,
                   "pr": "she" if ent.gender == "f" else "he"}
        mapping.update(extra)
        return _cap(template.format(**mapping))

    def attr_sentence(self, ent: Entity, attr: str, sheet: bool) -> _Piece:
        spec = _KINDS[ent.kind].attrs[attr]
        value = _display(spec.vtype, ent.attrs[attr], self.rng)
        if sheet:
            label = _cap(spec.label) + (f" (as of {ent.asof})" if spec.conflict else "")
            text = f"{label}: {value}."
        else:
            text = self.fill(self.rng.choice(spec.say), ent, value)
        refs = [ent.refs[attr]] if attr in ent.refs else []
        return _Piece(text, [fact_key(ent.id, attr)], [], refs)

    def split_sentence(self, ent: Entity, attr: str) -> _SplitSentence:
        """The fact phrased so a chunk boundary falls between its cue and its value."""
        spec = _KINDS[ent.kind].attrs[attr]
        value = _display(spec.vtype, ent.attrs[attr], self.rng)
        head = self.rng.choice((
            "In the records compiled for this overview, the {label} of {name} is given as",
            "According to the documents consulted for this profile, the {label} of {name} was",
            "Among the details collected about {name}, the {label} is recorded as",
        )).format(label=spec.label, name=ent.name)
        tail = value + self.rng.choice((".", ", as later records confirm.", ", a detail rarely mentioned elsewhere."))
        key = fact_key(ent.id, attr)
        refs = [ent.refs[attr]] if attr in ent.refs else []
        return _SplitSentence(_Piece(head, [], [], []), _Piece(tail, [key], [], refs), key)

    def event_sentence(self, ent: Entity, ev: Event, sheet: bool) -> _Piece:
        if isinstance(ev.when, dt.date):
            bare = _display("date", ev.when, self.rng)
            when = f"on {bare}"
        else:
            bare = str(ev.when)
            when = f"in {bare}"
        if sheet:
            text = f"{_cap(ev.phrase)}: {bare}."
        else:
            text = self.fill(self.rng.choice(_KINDS[ent.kind].event_say), ent, ev=ev.phrase,
                             when=when, When=_cap(when))
        return _Piece(text, [fact_key(ent.id, f"event:{ev.key}")])

    def role_sentence(self, person: Entity, role: str, target: Entity) -> _Piece:
        templates = {
            "founder": ("{S} founded {t}.", "{S} is the founder of {t}."),
            "judge": ("{S} presided over {t}.", "{S} was the presiding judge in {t}."),
            "mayor": ("{S} serves as mayor of {t}.", "{S} is the mayor of {t}."),
            "coach": ("{S} is the head coach of {t}.", "{S} coaches {t}."),
        }[role]
        attr = {"founder": "founder", "judge": "judge", "mayor": "mayor", "coach": "coach"}[role]
        text = self.fill(self.rng.choice(templates), person, t=target.name)
        return _Piece(text, [fact_key(target.id, attr)], [], [target.id])

    def filler(self, ent: Entity, used: set[str]) -> _Piece | None:
        pool = [t for t in _KINDS[ent.kind].fillers if t not in used]
        if not pool:
            return None
        t = self.rng.choice(pool)
        used.add(t)
        return _Piece(self.fill(t, ent))

    # -- documents -------------------------------------------------------------------------
    def profile(self, ent: Entity, split_candidates: set[str]) -> tuple[str, list[_Piece], _SplitSentence | None]:
        r, cfg = self.rng, self.cfg
        spec = _KINDS[ent.kind]
        sheet = ent.kind != "person" and r.random() < cfg.fact_sheet_rate
        title = r.choice(spec.titles).format(name=ent.name)
        intro_value = ent.attrs[spec.intro_attr]
        intro_text = r.choice(spec.intro).format(name=ent.name, v=intro_value, va=_article(str(intro_value)))
        intro = _Piece(intro_text, [fact_key(ent.id, spec.intro_attr)], [],
                       [ent.refs[spec.intro_attr]] if spec.intro_attr in ent.refs else [])
        body: list[_Piece] = []
        attrs = [a for a in spec.attrs if a in ent.attrs and a != spec.intro_attr]
        split: _SplitSentence | None = None
        eligible = [a for a in spec.split_ok if a in attrs and a in split_candidates]
        if eligible and r.random() < cfg.split_fact_rate:
            attr = r.choice(eligible)
            split = self.split_sentence(ent, attr)
            attrs.remove(attr)
        for attr in attrs:
            body.append(self.attr_sentence(ent, attr, sheet))
        for ev in ent.events:
            body.append(self.event_sentence(ent, ev, sheet))
        for role, tid in ent.roles:
            body.append(self.role_sentence(ent, role, self.entities[tid]))
        r.shuffle(body)
        pieces = [intro]
        used: set[str] = set()
        if r.random() < cfg.filler_rate:
            pieces.append(_Piece(r.choice(_GENERIC_FILLERS)))
        for piece in body:
            pieces.append(piece)
            if r.random() < cfg.filler_rate:
                extra = self.filler(ent, used)
                if extra is not None:
                    pieces.append(extra)
        return title, pieces, split

    def report(self, ent: Entity, attr: str) -> tuple[str, list[_Piece]]:
        """An older, dated document stating a superseded value."""
        r = self.rng
        spec = _KINDS[ent.kind]
        title = spec.report_title.format(name=ent.name, oy=ent.old_when)
        aspec = spec.attrs[attr]
        old = _display(aspec.vtype, ent.outdated[attr], r)
        pieces = [_Piece(r.choice(spec.report_lead).format(name=ent.name, oy=ent.old_when))]
        pieces.append(_Piece(self.fill(r.choice(aspec.conflict), ent, old, force_name=True),
                             [], [fact_key(ent.id, attr)]))
        used: set[str] = set()
        for _ in range(r.randint(1, 2)):
            extra = self.filler(ent, used)
            if extra is not None:
                pieces.append(extra)
        return title, pieces


def _chunk(pieces: list[_Piece], split: _SplitSentence | None, n_words: int) -> tuple[list[list[_Piece]], bool]:
    """Pack sentences into chunks of at most ``n_words`` words, never cutting a sentence except
    the split fact, whose cue ends one chunk and whose value starts the next.

    Chunks aim at equal sizes (total words / number of chunks) so no tiny leftover chunk is
    produced. Returns the chunks and whether the split fact really straddles a boundary.
    """
    def words(p: _Piece) -> int:
        return len(p.text.split())

    head_w = words(split.head) if split else 0
    tail_w = words(split.tail) if split else 0
    total = sum(words(p) for p in pieces) + head_w + tail_w
    target = total / max(1, -(-total // n_words))
    chunks: list[list[_Piece]] = []
    cur: list[_Piece] = []
    count = 0
    placed = split is None
    for piece in pieces:
        w = words(piece)
        # While the split fact waits, a chunk closes as soon as its cue would no longer fit.
        if not placed and cur and count >= 0.3 * n_words and count + head_w <= n_words \
                and (count + head_w + w > n_words or count + head_w + w / 2 > target):
            assert split is not None
            cur.append(split.head)
            chunks.append(cur)
            cur, count, placed = [split.tail], tail_w, True
        if cur and (count + w > n_words or count + w / 2 > target):
            chunks.append(cur)
            cur, count = [], 0
        cur.append(piece)
        count += w
    crossed = split is not None and placed
    if not placed:
        # No chunk end with room for the cue before the last chunk: state the fact whole.
        assert split is not None
        whole = _Piece(f"{split.head.text} {split.tail.text}", split.tail.facts, [], split.tail.refs)
        if cur and count + words(whole) > n_words:
            chunks.append(cur)
            cur = []
        cur.append(whole)
    if cur:
        chunks.append(cur)
    return chunks, crossed


def _render_corpus(cfg: TestbedConfig, entities: dict[str, Entity]) -> tuple[list[dict[str, Any]], World]:
    rnd = _Renderer(cfg, entities)
    # Facts restated elsewhere (relations also told in the related person's biography, intro
    # facts repeated in reports) are not split: a split fact must have one home.
    docs_raw: list[tuple[Entity, str, str, list[list[_Piece]], _SplitSentence | None, bool]] = []
    for ent in entities.values():
        spec = _KINDS[ent.kind]
        candidates = {a for a in spec.split_ok if a not in ent.outdated}
        title, pieces, split = rnd.profile(ent, candidates)
        chunks, crossed = _chunk(pieces, split, cfg.passage_words)
        docs_raw.append((ent, "profile", title, chunks, split, crossed))
        for attr in ent.outdated:
            r_title, r_pieces = rnd.report(ent, attr)
            r_chunks, _ = _chunk(r_pieces, None, cfg.passage_words)
            docs_raw.append((ent, "report", r_title, r_chunks, None, False))
    # Shuffle document order so ids reveal neither the split nor the twin relation.
    order = list(range(len(docs_raw)))
    random.Random(f"{cfg.seed}/order").shuffle(order)

    corpus: list[dict[str, Any]] = []
    docs: list[dict[str, Any]] = []
    locations: dict[str, list[str]] = {}
    outdated: dict[str, list[str]] = {}
    split_facts: list[dict[str, Any]] = []
    for n, i in enumerate(order):
        ent, kind, title, chunks, split, crossed = docs_raw[i]
        doc_id = f"tb{n:04d}"
        pids = []
        for ci, chunk in enumerate(chunks):
            pid = f"{doc_id}-{ci}"
            pids.append(pid)
            text = " ".join(p.text for p in chunk)
            ids = {ent.id}
            for p in chunk:
                ids.update(k.split("|", 1)[0] for k in p.facts + p.old)
                ids.update(p.refs)
                for k in p.facts:
                    locations.setdefault(k, []).append(pid)
                for k in p.old:
                    outdated.setdefault(k, []).append(pid)
            corpus.append({"id": pid, "contents": f"{title}\n{text}", "metadata": {
                "doc_id": doc_id, "entity_ids": sorted(ids), "domain": ent.domain, "chunk_index": ci}})
            if split is not None and crossed and chunk and chunk[-1] is split.head:
                locations.setdefault(split.key, []).append(pid)
                split_facts.append({"key": split.key, "entity_id": ent.id,
                                    "attribute": split.key.split("|", 1)[1], "doc_id": doc_id,
                                    "head_id": pid, "tail_id": f"{doc_id}-{ci + 1}",
                                    "head_text": split.head.text, "tail_text": split.tail.text})
        docs.append({"doc_id": doc_id, "entity_id": ent.id, "kind": kind, "title": title, "passage_ids": pids})
    for k in locations:
        locations[k] = list(dict.fromkeys(locations[k]))
    conflicts = [{"key": fact_key(e.id, a), "entity_id": e.id, "attribute": a,
                  "current": _canonical(_KINDS[e.kind].attrs[a].vtype, e.attrs[a]),
                  "outdated": _canonical(_KINDS[e.kind].attrs[a].vtype, v),
                  "outdated_forms": gold_forms(_KINDS[e.kind].attrs[a].vtype, v),
                  "outdated_passages": outdated.get(fact_key(e.id, a), []),
                  "current_as_of": e.asof, "outdated_as_of": e.old_when}
                 for e in entities.values() for a, v in e.outdated.items()]
    world = World(entities=entities, docs=docs, fact_locations=locations, outdated_locations=outdated,
                  split_facts=split_facts, conflicts=conflicts)
    return corpus, world


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------


@dataclass
class _Draft:
    qtype: str
    question: str
    golds: list[str]
    facts: list[str]                      # fact keys needed
    entity_ids: list[str]
    key_points: list[str]
    hops: int = 1
    answer_facts: list[str] = field(default_factory=list)  # facts whose value is the answer
    withheld: str = ""

    @property
    def identity(self) -> str:
        """Two drafts with the same identity ask the same thing (A-or-B and B-or-A included)."""
        if self.qtype in ("comparison", "numerical"):
            return f"{self.qtype}|{'|'.join(sorted(self.facts))}"
        return self.question


class _QuestionMaker:
    def __init__(self, cfg: TestbedConfig, world: World) -> None:
        self.cfg = cfg
        self.world = world
        self.ents = world.entities
        self.split_keys = {s["key"] for s in world.split_facts}
        self.conflict_keys = {c["key"] for c in world.conflicts}

    # -- helpers ---------------------------------------------------------------------------
    def stated(self, ent: Entity, attr: str) -> bool:
        return fact_key(ent.id, attr) in self.world.fact_locations

    def vtype(self, ent: Entity, attr: str) -> str:
        return _KINDS[ent.kind].attrs[attr].vtype

    def canon(self, ent: Entity, attr: str) -> str:
        return _canonical(self.vtype(ent, attr), ent.attrs[attr])

    def golds(self, ent: Entity, attr: str) -> list[str]:
        return gold_forms(self.vtype(ent, attr), ent.attrs[attr])

    def knobbed(self, ent: Entity, attr: str) -> bool:
        key = fact_key(ent.id, attr)
        return key in self.split_keys or key in self.conflict_keys

    def askable(self, ent: Entity) -> list[str]:
        return [a for a in _KINDS[ent.kind].attrs if a in ent.attrs and self.stated(ent, a)
                and _KINDS[ent.kind].attrs[a].ask]

    @staticmethod
    def _ev_golds(ev: Event) -> list[str]:
        return [ev.phrase, f"the {ev.phrase}"] + list(ev.aliases)

    # -- builders: each returns a list of drafts for one entity (or pair) ------------------
    def factual(self, ent: Entity, rng: random.Random) -> list[_Draft]:
        attrs = self.askable(ent)
        rng.shuffle(attrs)
        focus = [a for a in attrs if self.knobbed(ent, a)]
        if focus and rng.random() < self.cfg.knob_focus:
            attrs = focus + [a for a in attrs if a not in focus]
        out = []
        for attr in attrs:
            spec = _KINDS[ent.kind].attrs[attr]
            q = rng.choice(spec.ask).format(name=ent.name)
            key = fact_key(ent.id, attr)
            out.append(_Draft("factual", q, self.golds(ent, attr), [key], [ent.id],
                              [self.canon(ent, attr)], 1, [key]))
        return out

    def multi_hop(self, ent: Entity, rng: random.Random) -> list[_Draft]:
        out = []
        for (kind, rel), phrase in _BRIDGES.items():
            if kind != ent.kind or rel not in ent.refs or not self.stated(ent, rel):
                continue
            mid = self.ents[ent.refs[rel]]
            if mid.name in ent.name:       # "the home town of Ulmstead Rovers" gives itself away
                continue
            for attr in _BRIDGE_TARGETS.get(mid.kind, ()):
                if attr not in mid.attrs or not self.stated(mid, attr):
                    continue
                spec = _KINDS[mid.kind].attrs[attr]
                if not spec.ask:
                    continue
                desc = phrase.format(name=ent.name)
                q = rng.choice(spec.ask).format(name=desc)
                q = q[0].upper() + q[1:]
                k1, k2 = fact_key(ent.id, rel), fact_key(mid.id, attr)
                out.append(_Draft("multi_hop", q, self.golds(mid, attr), [k1, k2], [ent.id, mid.id],
                                  [mid.name, self.canon(mid, attr)], 2, [k2]))
        rng.shuffle(out)
        focus = [d for d in out if any(k in self.split_keys or k in self.conflict_keys for k in d.facts)]
        if focus and rng.random() < self.cfg.knob_focus:
            out = focus + [d for d in out if d not in focus]
        return out

    def comparison(self, a: Entity, b: Entity, rng: random.Random) -> list[_Draft]:
        out = []
        for attr, spec in _KINDS[a.kind].attrs.items():
            if not spec.compare or not (self.stated(a, attr) and self.stated(b, attr)):
                continue
            va, vb = a.attrs[attr], b.attrs[attr]
            if va == vb:
                continue
            template, direction = rng.choice(spec.compare)
            first, second = (a, b) if rng.random() < 0.5 else (b, a)
            winner = a if (va > vb) == (direction == "max") else b
            q = template.format(a=first.name, b=second.name)
            out.append(_Draft("comparison", q, [winner.name], [fact_key(a.id, attr), fact_key(b.id, attr)],
                              [first.id, second.id], [self.canon(a, attr), self.canon(b, attr), winner.name], 1))
        rng.shuffle(out)
        return out

    def numerical(self, ent: Entity, other: Entity | None, rng: random.Random) -> list[_Draft]:
        """Arithmetic on stated numbers: a difference within one entity or a sum/difference of two."""
        out: list[_Draft] = []
        k = ent.kind

        def add(q: str, value: int, vtype: str, keys: list[str], ids: list[str], kps: list[str]) -> None:
            out.append(_Draft("numerical", q, gold_forms(vtype, value) if vtype != "usd_m" else
                              [f"${value} million", f"{value} million", f"{value} million dollars", str(value)],
                              keys, ids, kps + [gold_forms(vtype, value)[0]], 1))

        def have(e: Entity, *attrs: str) -> bool:
            return all(a in e.attrs and self.stated(e, a) for a in attrs)

        def event(e: Entity, key: str) -> Event | None:
            ev = next((x for x in e.events if x.key == key), None)
            return ev if ev is not None and self.stated(e, f"event:{key}") else None

        fk = fact_key
        if k == "company":
            if have(ent, "revenue_2022", "revenue_2023") and ent.attrs["revenue_2022"] != ent.attrs["revenue_2023"]:
                d = abs(ent.attrs["revenue_2023"] - ent.attrs["revenue_2022"])
                add(f"By how many million dollars did the revenue of {ent.name} change from 2022 to 2023?", d,
                    "usd_m", [fk(ent.id, "revenue_2022"), fk(ent.id, "revenue_2023")], [ent.id],
                    [self.canon(ent, "revenue_2022"), self.canon(ent, "revenue_2023")])
            ipo = event(ent, "ipo")
            if ipo is not None and have(ent, "founded"):
                add(f"How many years after its founding did {ent.name} hold its initial public offering?",
                    int(ipo.when) - ent.attrs["founded"], "years",
                    [fk(ent.id, "founded"), fk(ent.id, "event:ipo")], [ent.id],
                    [self.canon(ent, "founded"), str(ipo.when)])
            if other is not None and have(ent, "revenue_2023") and have(other, "revenue_2023"):
                add(f"What was the combined 2023 revenue of {ent.name} and {other.name}, in million dollars?",
                    ent.attrs["revenue_2023"] + other.attrs["revenue_2023"], "usd_m",
                    [fk(ent.id, "revenue_2023"), fk(other.id, "revenue_2023")], [ent.id, other.id],
                    [self.canon(ent, "revenue_2023"), self.canon(other, "revenue_2023")])
        elif k == "case":
            if have(ent, "claimed", "awarded"):
                add(f"How much less than the amount claimed was finally awarded in {ent.name}?",
                    ent.attrs["claimed"] - ent.attrs["awarded"], "usd",
                    [fk(ent.id, "claimed"), fk(ent.id, "awarded")], [ent.id],
                    [self.canon(ent, "claimed"), self.canon(ent, "awarded")])
            if have(ent, "filed", "verdict_date"):
                add(f"How many days passed between the filing of {ent.name} and its verdict?",
                    (ent.attrs["verdict_date"] - ent.attrs["filed"]).days, "days",
                    [fk(ent.id, "filed"), fk(ent.id, "verdict_date")], [ent.id],
                    [self.canon(ent, "filed"), self.canon(ent, "verdict_date")])
            if other is not None and have(ent, "claimed") and have(other, "claimed"):
                add(f"What was the total amount of damages claimed in {ent.name} and {other.name} together?",
                    ent.attrs["claimed"] + other.attrs["claimed"], "usd",
                    [fk(ent.id, "claimed"), fk(other.id, "claimed")], [ent.id, other.id],
                    [self.canon(ent, "claimed"), self.canon(other, "claimed")])
        elif k == "patient":
            if have(ent, "admitted", "discharged"):
                add(f"How many days did {ent.name} spend in hospital?",
                    (ent.attrs["discharged"] - ent.attrs["admitted"]).days, "days",
                    [fk(ent.id, "admitted"), fk(ent.id, "discharged")], [ent.id],
                    [self.canon(ent, "admitted"), self.canon(ent, "discharged")])
            if other is not None and have(ent, "age") and have(other, "age") and ent.attrs["age"] != other.attrs["age"]:
                older, younger = (ent, other) if ent.attrs["age"] > other.attrs["age"] else (other, ent)
                add(f"How many years older was {older.name} than {younger.name} at admission?",
                    older.attrs["age"] - younger.attrs["age"], "years",
                    [fk(older.id, "age"), fk(younger.id, "age")], [older.id, younger.id],
                    [self.canon(older, "age"), self.canon(younger, "age")])
        elif k == "hospital":
            if other is not None and have(ent, "beds") and have(other, "beds") and ent.attrs["beds"] != other.attrs["beds"]:
                big, small = (ent, other) if ent.attrs["beds"] > other.attrs["beds"] else (other, ent)
                add(f"How many more beds does {big.name} have than {small.name}?",
                    big.attrs["beds"] - small.attrs["beds"], "count",
                    [fk(big.id, "beds"), fk(small.id, "beds")], [big.id, small.id],
                    [self.canon(big, "beds"), self.canon(small, "beds")])
        elif k == "town":
            if other is not None and have(ent, "population") and have(other, "population"):
                add(f"What is the combined population of {ent.name} and {other.name}?",
                    ent.attrs["population"] + other.attrs["population"], "count",
                    [fk(ent.id, "population"), fk(other.id, "population")], [ent.id, other.id],
                    [self.canon(ent, "population"), self.canon(other, "population")])
            if other is not None and have(ent, "founded") and have(other, "founded") \
                    and ent.attrs["founded"] != other.attrs["founded"]:
                old, young = (ent, other) if ent.attrs["founded"] < other.attrs["founded"] else (other, ent)
                add(f"How many years before {young.name} was {old.name} founded?",
                    young.attrs["founded"] - old.attrs["founded"], "years",
                    [fk(old.id, "founded"), fk(young.id, "founded")], [old.id, young.id],
                    [self.canon(old, "founded"), self.canon(young, "founded")])
        elif k == "club":
            title = event(ent, "title")
            if title is not None and have(ent, "founded"):
                add(f"How many years after its founding did {ent.name} win its first league title?",
                    int(title.when) - ent.attrs["founded"], "years",
                    [fk(ent.id, "founded"), fk(ent.id, "event:title")], [ent.id],
                    [self.canon(ent, "founded"), str(title.when)])
            if other is not None and have(ent, "titles") and have(other, "titles") \
                    and ent.attrs["titles"] != other.attrs["titles"]:
                more, fewer = (ent, other) if ent.attrs["titles"] > other.attrs["titles"] else (other, ent)
                add(f"How many more league titles has {more.name} won than {fewer.name}?",
                    more.attrs["titles"] - fewer.attrs["titles"], "small",
                    [fk(more.id, "titles"), fk(fewer.id, "titles")], [more.id, fewer.id],
                    [self.canon(more, "titles"), self.canon(fewer, "titles")])
        rng.shuffle(out)
        return out

    def temporal(self, ent: Entity, rng: random.Random) -> list[_Draft]:
        evs = [e for e in ent.events if self.stated(ent, f"event:{e.key}")]
        if len(evs) < 2:
            return []
        prep = _KINDS[ent.kind].event_prep
        out = []
        pairs = [(evs[i], evs[j]) for i in range(len(evs)) for j in range(i + 1, len(evs))]
        rng.shuffle(pairs)
        for e1, e2 in pairs[:3]:
            first, second = (e1, e2) if rng.random() < 0.5 else (e2, e1)
            if rng.random() < 0.65:
                q = f"Which came first {prep} {ent.name}: the {first.phrase} or the {second.phrase}?"
                ans = e1
            else:
                q = f"Which happened later {prep} {ent.name}: the {first.phrase} or the {second.phrase}?"
                ans = e2
            keys = [fact_key(ent.id, f"event:{e1.key}"), fact_key(ent.id, f"event:{e2.key}")]
            out.append(_Draft("temporal", q, self._ev_golds(ans), keys, [ent.id], [ans.phrase], 1))
        i = rng.randrange(len(evs) - 1)
        e1, e2 = evs[i], evs[i + 1]
        q = f"What came next {prep} {ent.name} after the {e1.phrase}?"
        keys = [fact_key(ent.id, f"event:{e.key}") for e in evs]
        out.append(_Draft("temporal", q, self._ev_golds(e2), keys, [ent.id], [e2.phrase], 1))
        rng.shuffle(out)
        return out

    def summary(self, ent: Entity, rng: random.Random) -> list[_Draft]:
        spec = _KINDS[ent.kind]
        attrs = [a for a in spec.summary_attrs if a in ent.attrs and self.stated(ent, a)]
        if len(attrs) < 3:
            return []
        chosen = sorted(rng.sample(attrs, min(4, len(attrs))), key=attrs.index)
        labels = [spec.attrs[a].label for a in chosen]
        aspects = ", ".join(labels[:-1]) + f" and {labels[-1]}"
        q = rng.choice((f"Give a short overview of {ent.name}, covering the {aspects}.",
                        f"Summarize what is known about {ent.name}: the {aspects}."))
        parts = [spec.attrs[a].kp.format(v=self.canon(ent, a)) for a in chosen]
        reference = f"{ent.name} " + ", ".join(parts[:-1]) + f" and {parts[-1]}."
        keys = [fact_key(ent.id, a) for a in chosen]
        return [_Draft("summary", q, [reference], keys, [ent.id], [self.canon(ent, a) for a in chosen], 1)]

    def unanswerable(self, ent: Entity, rng: random.Random) -> list[_Draft]:
        out = []
        for attr in ent.withheld:
            spec = _KINDS[ent.kind].attrs[attr]
            q = rng.choice(spec.ask).format(name=ent.name)
            out.append(_Draft("unanswerable", q, [UNANSWERABLE_ANSWER], [], [ent.id], [], 1, [], attr))
        return out

    # -- assembly --------------------------------------------------------------------------
    def finalize(self, d: _Draft) -> dict[str, Any]:
        locs = self.world.fact_locations
        order = self._order
        supporting = sorted({p for k in d.facts for p in locs.get(k, [])}, key=order.__getitem__)
        involved = d.entity_ids + [x for k in d.facts for x in [k.split("|", 1)[0]] if x not in d.entity_ids]
        twins = [t for e in involved for t in self.ents[e].twins]
        distractor_answers: list[str] = []
        keys_for_twins = d.answer_facts or ([fact_key(d.entity_ids[0], d.withheld)] if d.withheld else [])
        for key in keys_for_twins:
            eid, attr = key.split("|", 1)
            for t in self.ents[eid].twins:
                tw = self.ents[t]
                if attr in tw.attrs and fact_key(t, attr) in locs:
                    forms = gold_forms(_KINDS[tw.kind].attrs[attr].vtype, tw.attrs[attr])
                    if not any(normalize(f) == normalize(g) for f in forms for g in d.golds):
                        distractor_answers.append(forms[0])
        outdated_answers = []
        for key in d.answer_facts:
            eid, attr = key.split("|", 1)
            ent = self.ents[eid]
            if attr in ent.outdated:
                outdated_answers += gold_forms(_KINDS[ent.kind].attrs[attr].vtype, ent.outdated[attr])
        facts = []
        for key in d.facts:
            eid, attr = key.split("|", 1)
            ent = self.ents[eid]
            if attr.startswith("event:"):
                ev = next(e for e in ent.events if e.key == attr[6:])
                value = _canonical("date", ev.when) if isinstance(ev.when, dt.date) else str(ev.when)
                label = f"date of the {ev.phrase}"
            else:
                value, label = self.canon(ent, attr), _KINDS[ent.kind].attrs[attr].label
            facts.append({"entity_id": eid, "attribute": attr, "label": label, "value": value})
        distractor_passages = sorted({p for t in twins for doc in self._docs_by_entity.get(t, [])
                                      for p in doc}, key=order.__getitem__)
        return {
            "question": d.question,
            "golden_answers": list(dict.fromkeys(d.golds)),
            "metadata": {
                "dataset": DATASET_NAME,
                "type": d.qtype,
                "answerable": d.qtype != "unanswerable",
                "supporting_ids": supporting,
                "key_points": d.key_points,
                "knobs": {
                    "distractor": bool(twins),
                    "conflict": any(k in self.conflict_keys for k in d.facts),
                    "split_fact": any(k in self.split_keys for k in d.facts),
                    "hops": d.hops,
                    "n_facts": len(d.facts),
                    "passage_words": self.cfg.passage_words,
                },
                "causes": [],
                "entity_ids": d.entity_ids,
                "domain": self.ents[d.entity_ids[0]].domain,
                "facts": facts,
                "withheld_attribute": d.withheld or None,
                "distractor_entity_ids": twins,
                "distractor_passage_ids": distractor_passages,
                "distractor_answers": distractor_answers,
                "outdated_answers": outdated_answers,
            },
        }

    def make_split(self, split: str, corpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        cfg = self.cfg
        self._order = {p["id"]: i for i, p in enumerate(corpus)}
        self._docs_by_entity: dict[str, list[list[str]]] = {}
        for doc in self.world.docs:
            self._docs_by_entity.setdefault(doc["entity_id"], []).append(doc["passage_ids"])
        rng = random.Random(f"{cfg.seed}/questions/{split}")
        domains = cfg.domain_list()
        by_type: dict[str, list[dict[str, Any]]] = {}
        seen: set[str] = set()
        for qtype in QUESTION_TYPES:
            want = cfg.n_questions(split, qtype)
            streams = [self._stream(qtype, domain, split, rng) for domain in domains]
            picked: list[dict[str, Any]] = []
            # Round-robin over domains; each stream already interleaves its entities.
            while len(picked) < want and streams:
                alive = []
                for stream in streams:
                    if len(picked) >= want:
                        break
                    draft = next(stream, None)
                    while draft is not None and draft.identity in seen:
                        draft = next(stream, None)
                    if draft is None:
                        continue            # this domain has no more questions of this type
                    seen.add(draft.identity)
                    picked.append(self.finalize(draft))
                    alive.append(stream)
                streams = alive
            by_type[qtype] = picked
        # Interleave types so any prefix of the file is balanced (notebooks read the head).
        out: list[dict[str, Any]] = []
        depth = max((len(v) for v in by_type.values()), default=0)
        for i in range(depth):
            for qtype in QUESTION_TYPES:
                if i < len(by_type[qtype]):
                    out.append(by_type[qtype][i])
        for n, rec in enumerate(out):
            rec_id = f"testbed-{split}-{n:04d}"
            out[n] = {"id": rec_id, **rec}
        return out

    def _stream(self, qtype: str, domain: str, split: str, rng: random.Random):
        """Drafts of one type for one domain, interleaving entities so each gets a turn."""
        kinds = _DOMAIN_KINDS[domain] if qtype in ("comparison", "numerical") else (_MAIN_KIND[domain],)
        groups: list[list[_Draft]] = []
        for kind in kinds:
            ids = [e.id for e in self.ents.values()
                   if e.kind == kind and e.split == split and e.twin_of is None]
            rng.shuffle(ids)
            ents = [self.ents[i] for i in ids]
            for i, ent in enumerate(ents):
                if qtype == "factual":
                    groups.append(self.factual(ent, rng))
                elif qtype == "multi_hop":
                    groups.append(self.multi_hop(ent, rng))
                elif qtype == "temporal":
                    groups.append(self.temporal(ent, rng))
                elif qtype == "summary":
                    groups.append(self.summary(ent, rng))
                elif qtype == "unanswerable":
                    groups.append(self.unanswerable(ent, rng))
                elif qtype == "comparison":
                    partners = [e for e in ents if e.id != ent.id]
                    rng.shuffle(partners)
                    drafts: list[_Draft] = []
                    for other in partners[:3]:
                        drafts += self.comparison(ent, other, rng)
                    groups.append(drafts)
                elif qtype == "numerical":
                    other = ents[(i + 1) % len(ents)] if len(ents) > 1 else None
                    groups.append(self.numerical(ent, other, rng))
        depth = max((len(g) for g in groups), default=0)
        for level in range(depth):
            for g in groups:
                if level < len(g):
                    yield g[level]


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def generate_testbed(cfg: TestbedConfig | None = None) -> Testbed:
    """Build the world, render the corpus and write the question splits (all in memory).

    Deterministic: the same config gives identical records, in the same order.
    """
    cfg = cfg or TestbedConfig()
    entities = _WorldBuilder(cfg).build()
    corpus, world = _render_corpus(cfg, entities)
    maker = _QuestionMaker(cfg, world)
    splits = {split: maker.make_split(split, corpus) for split in SPLITS}
    return Testbed(config=cfg, corpus=corpus, splits=splits, world=world)


def fact_forms(world: World, key: str) -> list[str]:
    """Every accepted surface form of a fact's current value (``key`` = "entity_id|attribute")."""
    eid, attr = key.split("|", 1)
    ent = world.entities[eid]
    if attr.startswith("event:"):
        ev = next(e for e in ent.events if e.key == attr[6:])
        return _date_forms(ev.when) if isinstance(ev.when, dt.date) else [str(ev.when)]
    return gold_forms(_KINDS[ent.kind].attrs[attr].vtype, ent.attrs[attr])


def withheld_keywords(kind: str, attribute: str) -> tuple[str, ...]:
    """Words that any statement of a withholdable attribute contains (matched as word prefixes)."""
    return _KINDS[kind].attrs[attribute].withhold_keywords


def attribute_label(kind: str, attribute: str) -> str:
    """The human label of an attribute ("founding year"), as used in split-fact cues."""
    return _KINDS[kind].attrs[attribute].label


def testbed_stats(testbed: Testbed) -> dict[str, Any]:
    """Counts per split, type, domain and knob, and corpus sizes (the stage's metrics JSON)."""
    words = [len(p["contents"].split("\n", 1)[1].split()) for p in testbed.corpus]
    kinds: dict[str, int] = {}
    for e in testbed.world.entities.values():
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    questions: dict[str, Any] = {}
    for split, records in testbed.splits.items():
        by_type = {t: 0 for t in QUESTION_TYPES}
        by_domain: dict[str, int] = {}
        knobs = {"distractor": 0, "conflict": 0, "split_fact": 0, "multi_hop": 0}
        support = []
        for r in records:
            m = r["metadata"]
            by_type[m["type"]] += 1
            by_domain[m["domain"]] = by_domain.get(m["domain"], 0) + 1
            for k in ("distractor", "conflict", "split_fact"):
                knobs[k] += int(bool(m["knobs"][k]))
            knobs["multi_hop"] += int(m["knobs"]["hops"] > 1)
            if m["answerable"]:
                support.append(len(m["supporting_ids"]))
        questions[split] = {
            "n": len(records), "by_type": by_type, "by_domain": dict(sorted(by_domain.items())),
            "knobs": knobs,
            "mean_supporting_passages": round(sum(support) / len(support), 3) if support else 0.0,
            "n_entities": len({e for r in records for e in r["metadata"]["entity_ids"]}),
        }
    w = testbed.world
    return {
        "seed": testbed.config.seed,
        "corpus": {
            "passages": len(testbed.corpus),
            "documents": len(w.docs),
            "reports": sum(d["kind"] == "report" for d in w.docs),
            "words_mean": round(sum(words) / max(1, len(words)), 2),
            "words_min": min(words, default=0),
            "words_max": max(words, default=0),
        },
        "entities": dict(sorted(kinds.items())),
        "twins": sum(e.twin_of is not None for e in w.entities.values()),
        "conflicts": len(w.conflicts),
        "split_facts": len(w.split_facts),
        "questions": questions,
    }


def write_testbed(testbed: Testbed, out_dir: str | Path) -> dict[str, Path]:
    """Write corpus.jsonl, train/dev/test.jsonl, entities.jsonl and stats.json (atomically)."""
    out = Path(out_dir)
    written = {"corpus": rio.write_jsonl(out / "corpus.jsonl", testbed.corpus)}
    for split in SPLITS:
        written[split] = rio.write_jsonl(out / f"{split}.jsonl", testbed.splits[split])
    written["entities"] = rio.write_jsonl(out / "entities.jsonl",
                                          [e.to_record() for e in testbed.world.entities.values()])
    written["stats"] = rio.write_json(out / "stats.json", testbed_stats(testbed))
    return written


def example_per_type(testbed: Testbed, split: str = "test") -> list[dict[str, Any]]:
    """The first question of each type with its supporting passages (for the notebook)."""
    by_id = {p["id"]: p["contents"] for p in testbed.corpus}
    rows = []
    for qtype in QUESTION_TYPES:
        rec = next((r for r in testbed.splits[split] if r["metadata"]["type"] == qtype), None)
        if rec is None:
            continue
        m = rec["metadata"]
        rows.append({"type": qtype, "id": rec["id"], "question": rec["question"],
                     "golden_answers": rec["golden_answers"], "knobs": m["knobs"],
                     "supporting": [f"[{pid}] {by_id[pid]}" for pid in m["supporting_ids"]]})
    return rows
