"""Building the testbed's world from the seed: unique fictional names (:class:`_Names`) and the
entities with their attributes, relations, events, near-duplicate twins and outdated reports
(:class:`_WorldBuilder`)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from ragcritic_lib.testbed.vocabulary import (
    _ALLERGENS,
    _AUDITORS,
    _BLOOD_TYPES,
    _CASE_EVENTS,
    _CLUB_NICKS,
    _CO_CODAS,
    _CO_NUCLEI,
    _CO_ONSETS,
    _DEFENDANT_SUFFIXES,
    _DIAGNOSES,
    _EXCHANGES,
    _FIRST_F,
    _FIRST_M,
    _ID_PREFIX,
    _INDUSTRIES,
    _INSURERS,
    _KINDS,
    _MAIN_SURNAME_HEADS,
    _MAIN_SURNAME_TAILS,
    _MASCOTS,
    _OCCUPATIONS,
    _PATIENT_EVENTS,
    _REGIONS,
    _RIVERS,
    _SPECIALTIES,
    _SPORTS,
    _SURNAMES,
    _TOWN_ENDINGS,
    _TOWN_ROOTS,
    _UNIVERSITIES,
)

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
from ragcritic_lib.testbed.world import (
    _VOWELS,
    Entity,
    Event,
    TestbedConfig,
    _canonical,
    _date_forms,
    normalize,
)


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


