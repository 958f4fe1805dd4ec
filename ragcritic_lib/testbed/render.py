"""Rendering the world into a corpus: each entity's profile in varied wording and order with
filler sentences, chunked into passages (a split fact's cue may end one passage and its value
start the next)."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Any

from ragcritic_lib.testbed.vocabulary import (
    _GENERIC_FILLERS,
    _KINDS,
)
from ragcritic_lib.testbed.world import (
    Entity,
    Event,
    TestbedConfig,
    World,
    _article,
    _canonical,
    _cap,
    _display,
    fact_key,
    gold_forms,
)

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


