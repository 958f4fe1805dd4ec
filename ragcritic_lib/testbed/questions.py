"""Questions of DragonBall's types (factual, multi_hop, comparison, numerical, temporal, summary,
unanswerable) drawn from the world, each with its gold answers and difficulty knobs."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from ragcritic_lib.testbed.vocabulary import (
    _BRIDGE_TARGETS,
    _BRIDGES,
    _DOMAIN_KINDS,
    _KINDS,
    _MAIN_KIND,
)
from ragcritic_lib.testbed.world import (
    DATASET_NAME,
    QUESTION_TYPES,
    UNANSWERABLE_ANSWER,
    Entity,
    Event,
    TestbedConfig,
    World,
    _canonical,
    fact_key,
    gold_forms,
    normalize,
)

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
    other_options: list[str] = field(default_factory=list)  # the losing option of an A-or-B question

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
        # A stream of its own: at 0 the older questions come back, and at any value the question
        # stream (and with it every other type's questions) draws what it drew before.
        if self.cfg.withheld_focus > 0:
            plain = [a for a in attrs if _KINDS[ent.kind].attrs[a].withhold_keywords]
            own = random.Random(f"{self.cfg.seed}/withheld_focus/{ent.id}")
            if plain and own.random() < self.cfg.withheld_focus:
                attrs = plain + [a for a in attrs if a not in plain]
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
            loser = b if winner is a else a
            out.append(_Draft("comparison", q, [winner.name], [fact_key(a.id, attr), fact_key(b.id, attr)],
                              [first.id, second.id], [self.canon(a, attr), self.canon(b, attr), winner.name], 1,
                              other_options=[loser.name]))
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
            loser = e2 if ans is e1 else e1
            out.append(_Draft("temporal", q, self._ev_golds(ans), keys, [ent.id], [ans.phrase], 1,
                              other_options=[loser.phrase, *loser.aliases]))
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
                "other_options": list(d.other_options),
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


