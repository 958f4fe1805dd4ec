"""The testbed's vocabulary, read from ``vocabulary.yaml`` beside this file: the entity kinds
(:class:`_Kind`, each attribute an :class:`_Attr`: how it is stated, asked, compared, summarized
and contradicted) and the pools of fictional names. Data, not code: lists become tuples so the
values are immutable and hashable, and the file's order is kept (the generator's draws depend
on it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragcritic_lib.io import read_yaml

# Read at import; listed so that the stages that use the testbed depend on it (pipeline.deps).
DATA_FILES = ("vocabulary.yaml",)
VOCABULARY_FILE = Path(__file__).with_name(DATA_FILES[0])


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


def _frozen(value: Any) -> Any:
    """Lists as tuples, at any depth (mappings keep their order)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def _kind(name: str, spec: dict[str, Any]) -> _Kind:
    spec = _frozen(spec)
    try:
        attrs = {a: _Attr(**fields) for a, fields in spec.pop("attrs").items()}
        return _Kind(attrs=attrs, **spec)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{VOCABULARY_FILE}: kinds.{name}: {exc}") from None


_DATA = read_yaml(VOCABULARY_FILE)
_KINDS: dict[str, _Kind] = {name: _kind(name, spec) for name, spec in _DATA["kinds"].items()}
# Main (question-bearing) kinds per domain; people and hospitals are support entities.
_MAIN_KIND: dict[str, str] = dict(_DATA["main_kind"])
# Kinds asked about as main entities per domain (comparisons and numerics also use hospitals).
_DOMAIN_KINDS: dict[str, tuple[str, ...]] = _frozen(_DATA["domain_kinds"])
_ID_PREFIX: dict[str, str] = dict(_DATA["id_prefix"])
_GENERIC_FILLERS: tuple[str, ...] = _frozen(_DATA["generic_fillers"])
# Relation attribute -> the noun phrase used to describe the bridge entity in multi-hop questions.
_BRIDGES: dict[tuple[str, str], str] = {(kind, attr): phrase for kind, attr, phrase in _DATA["bridges"]}
_BRIDGE_TARGETS: dict[str, tuple[str, ...]] = _frozen(_DATA["bridge_targets"])
_NAMES: dict[str, Any] = _frozen(_DATA["names"])
_FIRST_F = _NAMES["first_f"]
_FIRST_M = _NAMES["first_m"]
_SURNAMES = _NAMES["surnames"]
_MAIN_SURNAME_HEADS = _NAMES["main_surname_heads"]
_MAIN_SURNAME_TAILS = _NAMES["main_surname_tails"]
_CO_ONSETS = _NAMES["co_onsets"]
_CO_NUCLEI = _NAMES["co_nuclei"]
_CO_CODAS = _NAMES["co_codas"]
_INDUSTRIES = _NAMES["industries"]
_TOWN_ROOTS = _NAMES["town_roots"]
_TOWN_ENDINGS = _NAMES["town_endings"]
_REGIONS = _NAMES["regions"]
_RIVERS = _NAMES["rivers"]
_UNIVERSITIES = _NAMES["universities"]
_EXCHANGES = _NAMES["exchanges"]
_AUDITORS = _NAMES["auditors"]
_DEFENDANT_SUFFIXES = _NAMES["defendant_suffixes"]
_DIAGNOSES = _NAMES["diagnoses"]
_BLOOD_TYPES = _NAMES["blood_types"]
_ALLERGENS = _NAMES["allergens"]
_INSURERS = _NAMES["insurers"]
_SPECIALTIES = _NAMES["specialties"]
_SPORTS = _NAMES["sports"]
_CLUB_NICKS = _NAMES["club_nicks"]
_MASCOTS = _NAMES["mascots"]
_OCCUPATIONS = _NAMES["occupations"]
_CASE_EVENTS = _NAMES["case_events"]
_PATIENT_EVENTS = _NAMES["patient_events"]
