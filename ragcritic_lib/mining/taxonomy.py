"""The hierarchical RAG error taxonomy (RAG-Critic section 3.1.3) and its construction.

Three tiers: tier-1 and tier-2 are fixed in ``data/taxonomy/taxonomy.yaml`` (the paper's manual
summarization layer, one consistent spelling, aliases for every variant the paper uses); tier-3
is the open set of normalized atomic tags from notebook 03. The data-driven part follows the
paper: embed the atomic tags, standardize, Ward-cluster into K groups, let a teacher name each
group from up to 50 sampled member tags, then map each cluster onto a tier-2 label by embedding
similarity (a reviewed override file wins). Reverse-mapping the tiers onto every error record
gives D_Error^QA with critic JSON targets.

The sentence encoder is passed in as a function ``encode(list[str]) -> array[n, d]`` so tests can
use a deterministic fake; :func:`load_sentence_encoder` builds the real one lazily.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, read_yaml

if TYPE_CHECKING:  # numpy is light, but keep module import free of it for symmetry
    import numpy as np

Encode = Callable[[list[str]], "np.ndarray"]

DEFAULT_TAXONOMY_FILE = paths.TAXONOMY_DIR / "taxonomy.yaml"
DEFAULT_OVERRIDES_FILE = paths.TAXONOMY_DIR / "cluster_overrides.yaml"
DEFAULT_KNOWN_CAUSES_FILE = paths.TAXONOMY_DIR / "known_causes.yaml"


def label_key(label: str) -> str:
    """Case-, whitespace- and punctuation-insensitive key of a label name."""
    text = unicodedata.normalize("NFKC", str(label)).lower()
    text = re.sub(r"[^0-9a-z]+", " ", text)
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------
# The fixed tiers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taxonomy:
    """Tier-1 and tier-2 labels with definitions, parents and alias resolution."""

    tier1: list[str]
    tier2: list[str]
    parents: dict[str, str]
    definitions: dict[str, str]
    stages: dict[str, str]
    aliases: dict[str, str]
    _lookup: dict[str, str] = field(repr=False)

    def canonical(self, label: str) -> str | None:
        """Canonical name of a label, alias or case/spacing/punctuation variant; None if unknown."""
        if not isinstance(label, str):
            return None
        return self._lookup.get(label_key(label))

    def parent(self, tier2: str) -> str:
        """Tier-1 parent of a tier-2 label (aliases accepted)."""
        name = self.canonical(tier2)
        if name is None or name not in self.parents:
            raise KeyError(f"not a tier-2 label: {tier2!r}")
        return self.parents[name]

    def children(self, tier1: str) -> list[str]:
        """Tier-2 labels under a tier-1 label, in file order."""
        name = self.canonical(tier1)
        if name is None or name not in self.tier1:
            raise KeyError(f"not a tier-1 label: {tier1!r}")
        return [t2 for t2 in self.tier2 if self.parents[t2] == name]

    def definition(self, label: str) -> str:
        name = self.canonical(label)
        if name is None:
            raise KeyError(f"unknown label: {label!r}")
        return self.definitions[name]

    def tier_of(self, label: str) -> int | None:
        """1 or 2 for a known label, None otherwise."""
        name = self.canonical(label)
        if name is None:
            return None
        return 1 if name in self.tier1 else 2

    def canonical_list(self, labels: Iterable[Any], tier: int | None = None) -> list[str]:
        """Canonicalize labels, dropping unknown ones (and those of another tier), keeping order."""
        out: list[str] = []
        for label in labels:
            name = self.canonical(label) if isinstance(label, str) else None
            if name is None or (tier is not None and self.tier_of(name) != tier):
                continue
            if name not in out:
                out.append(name)
        return out


def validate_taxonomy(raw: Any) -> list[str]:
    """Problems in a parsed taxonomy file (empty list when consistent)."""
    problems: list[str] = []
    if not isinstance(raw, Mapping) or not isinstance(raw.get("tier1"), list):
        return ["top level must be a mapping with a 'tier1' list"]
    seen: dict[str, str] = {}

    def claim(name: Any, where: str) -> None:
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{where}: missing or empty name")
            return
        key = label_key(name)
        if key in seen:
            problems.append(f"{where}: duplicate label {name!r} (also {seen[key]})")
        else:
            seen[key] = where

    for i, t1 in enumerate(raw["tier1"]):
        where = f"tier1[{i}]"
        if not isinstance(t1, Mapping):
            problems.append(f"{where}: must be a mapping")
            continue
        claim(t1.get("name"), where)
        if not str(t1.get("definition") or "").strip():
            problems.append(f"{where} ({t1.get('name')}): missing definition")
        children = t1.get("tier2")
        if not isinstance(children, list) or not children:
            problems.append(f"{where} ({t1.get('name')}): needs a non-empty 'tier2' list")
            continue
        for j, t2 in enumerate(children):
            w2 = f"{where}.tier2[{j}]"
            if not isinstance(t2, Mapping):
                problems.append(f"{w2}: must be a mapping")
                continue
            claim(t2.get("name"), w2)
            if not str(t2.get("definition") or "").strip():
                problems.append(f"{w2} ({t2.get('name')}): missing definition")
    aliases = raw.get("aliases") or {}
    if not isinstance(aliases, Mapping):
        problems.append("aliases: must be a mapping")
        aliases = {}
    for alias, target in aliases.items():
        if not isinstance(target, str) or label_key(target) not in seen:
            problems.append(f"aliases: {alias!r} points to unknown label {target!r}")
        if label_key(str(alias)) in seen:
            problems.append(f"aliases: {alias!r} collides with a canonical label")
    return problems


def taxonomy_from_dict(raw: Mapping[str, Any], source: str = "<dict>") -> Taxonomy:
    """Build a :class:`Taxonomy` from parsed YAML, raising DataFormatError on any problem."""
    problems = validate_taxonomy(raw)
    if problems:
        raise DataFormatError(f"{source}: invalid taxonomy: " + "; ".join(problems))
    tier1: list[str] = []
    tier2: list[str] = []
    parents: dict[str, str] = {}
    definitions: dict[str, str] = {}
    stages: dict[str, str] = {}
    lookup: dict[str, str] = {}
    for t1 in raw["tier1"]:
        name1 = t1["name"].strip()
        tier1.append(name1)
        definitions[name1] = " ".join(str(t1["definition"]).split())
        stages[name1] = str(t1.get("stage", ""))
        lookup[label_key(name1)] = name1
        for t2 in t1["tier2"]:
            name2 = t2["name"].strip()
            tier2.append(name2)
            parents[name2] = name1
            definitions[name2] = " ".join(str(t2["definition"]).split())
            lookup[label_key(name2)] = name2
    aliases: dict[str, str] = {}
    for alias, target in (raw.get("aliases") or {}).items():
        canonical = lookup[label_key(target)]
        aliases[str(alias)] = canonical
        lookup[label_key(str(alias))] = canonical
    return Taxonomy(tier1, tier2, parents, definitions, stages, aliases, lookup)


def load_taxonomy(path: str | Path = DEFAULT_TAXONOMY_FILE) -> Taxonomy:
    """Load and validate the taxonomy file (default ``data/taxonomy/taxonomy.yaml``)."""
    path = paths.resolve(path)
    raw = read_yaml(path)
    return taxonomy_from_dict(raw or {}, source=str(path))


# --------------------------------------------------------------------------------------------
# Known causes (testbed) -> expected labels
# --------------------------------------------------------------------------------------------


def load_known_causes(
    path: str | Path = DEFAULT_KNOWN_CAUSES_FILE, taxonomy: Taxonomy | None = None
) -> dict[str, dict[str, Any]]:
    """Map each construction-known cause to its expected tier-1 / tier-2 labels.

    Returns ``{cause: {"tier1": [...], "tier2": [...], "description": str}}``; every label must
    resolve in the taxonomy.
    """
    path = paths.resolve(path)
    taxonomy = taxonomy or load_taxonomy()
    raw = read_yaml(path) or {}
    causes = raw.get("causes") if isinstance(raw, Mapping) else None
    if not isinstance(causes, Mapping):
        raise DataFormatError(f"{path}: expected a 'causes' mapping")
    out: dict[str, dict[str, Any]] = {}
    for cause, spec in causes.items():
        if not isinstance(spec, Mapping):
            raise DataFormatError(f"{path}: cause {cause!r} must be a mapping")
        entry: dict[str, Any] = {"description": str(spec.get("description", ""))}
        for tier in (1, 2):
            labels = spec.get(f"tier{tier}") or []
            if isinstance(labels, str):
                labels = [labels]
            resolved = []
            for label in labels:
                name = taxonomy.canonical(label)
                if name is None or taxonomy.tier_of(name) != tier:
                    raise DataFormatError(f"{path}: cause {cause!r}: {label!r} is not a tier-{tier} label")
                resolved.append(name)
            entry[f"tier{tier}"] = resolved
        if not entry["tier1"]:
            raise DataFormatError(f"{path}: cause {cause!r} needs at least one tier1 label")
        for t2 in entry["tier2"]:
            if taxonomy.parent(t2) not in entry["tier1"]:
                raise DataFormatError(
                    f"{path}: cause {cause!r}: tier2 {t2!r} has parent outside its tier1 list"
                )
        out[str(cause)] = entry
    return out


def known_cause_agreement(
    records: Sequence[Mapping[str, Any]],
    known_causes: Mapping[str, Mapping[str, Any]],
    *,
    label_key_name: str = "critic_target",
) -> dict[str, Any]:
    """Agreement of assigned labels with the causes known from construction (testbed).

    For every (record, known cause) pair, a tier-1 hit means the record's tag1 contains one of
    the cause's expected tier-1 labels; a tier-2 hit likewise (only for causes listing tier-2).

    Args:
        records: error records with ``evidence.known_causes`` and ``record[label_key_name]``
            holding ``tag1``/``tag2`` lists.
        known_causes: output of :func:`load_known_causes`.

    Returns:
        ``{"pairs", "tier1_hit_rate", "tier2_hit_rate", "records", "records_all_tier1_hit",
        "per_cause": {cause: {"n", "tier1_hits", "tier1_hit_rate", "tier2_n", "tier2_hits",
        "tier2_hit_rate"}}, "unknown_causes": {cause: n}}``.
    """
    per: dict[str, dict[str, Any]] = {}
    unknown: Counter[str] = Counter()
    n_records = all_hit = 0
    for rec in records:
        causes = list((rec.get("evidence") or {}).get("known_causes") or [])
        target = rec.get(label_key_name) or {}
        tag1, tag2 = set(target.get("tag1") or []), set(target.get("tag2") or [])
        if not causes:
            continue
        n_records += 1
        record_ok = True
        for cause in causes:
            spec = known_causes.get(cause)
            if spec is None:
                unknown[cause] += 1
                continue
            row = per.setdefault(cause, {"n": 0, "tier1_hits": 0, "tier2_n": 0, "tier2_hits": 0})
            row["n"] += 1
            hit1 = bool(tag1 & set(spec["tier1"]))
            row["tier1_hits"] += int(hit1)
            record_ok &= hit1
            if spec.get("tier2"):
                row["tier2_n"] += 1
                row["tier2_hits"] += int(bool(tag2 & set(spec["tier2"])))
        all_hit += int(record_ok)
    for row in per.values():
        row["tier1_hit_rate"] = round(row["tier1_hits"] / row["n"], 4) if row["n"] else None
        row["tier2_hit_rate"] = round(row["tier2_hits"] / row["tier2_n"], 4) if row["tier2_n"] else None
    pairs = sum(r["n"] for r in per.values())
    t2n = sum(r["tier2_n"] for r in per.values())
    return {
        "pairs": pairs,
        "tier1_hit_rate": round(sum(r["tier1_hits"] for r in per.values()) / pairs, 4) if pairs else None,
        "tier2_hit_rate": round(sum(r["tier2_hits"] for r in per.values()) / t2n, 4) if t2n else None,
        "records": n_records,
        "records_all_tier1_hit": round(all_hit / n_records, 4) if n_records else None,
        "per_cause": dict(sorted(per.items())),
        "unknown_causes": dict(sorted(unknown.items())),
    }


# --------------------------------------------------------------------------------------------
# Clustering the atomic tags
# --------------------------------------------------------------------------------------------


def load_sentence_encoder(model_dir: str | Path, *, batch_size: int = 64) -> Encode:
    """A sentence-transformers encoder as ``encode(texts) -> unit-norm float32 array``."""
    from sentence_transformers import SentenceTransformer  # heavy: import on use

    model = SentenceTransformer(str(paths.resolve(model_dir)), device="cpu")

    def encode(texts: list[str]) -> "np.ndarray":
        return model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )

    return encode


@dataclass
class TagClusters:
    """Result of :func:`cluster_tags`.

    Attributes:
        tags: the unique tags clustered, sorted.
        labels: cluster id per tag; ids are 0..K-1 ordered by cluster size (largest first,
            ties by first member) so they are stable for the same input.
        embeddings: raw (unscaled) embeddings per tag, as returned by ``encode``.
        linkage: scipy Ward linkage matrix over the standardized embeddings (for dendrograms),
            None with fewer than two tags.
    """

    tags: list[str]
    labels: list[int]
    embeddings: Any
    linkage: Any
    n_clusters: int

    def members(self, cluster: int) -> list[str]:
        return [t for t, c in zip(self.tags, self.labels) if c == cluster]

    def cluster_of(self) -> dict[str, int]:
        return dict(zip(self.tags, self.labels))

    def centroid(self, cluster: int) -> Any:
        import numpy as np

        idx = [i for i, c in enumerate(self.labels) if c == cluster]
        vec = np.asarray(self.embeddings)[idx].mean(axis=0)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def sizes(self, counts: Mapping[str, int] | None = None) -> list[int]:
        """Tags per cluster, or occurrences per cluster when ``counts`` (tag -> count) is given."""
        out = [0] * self.n_clusters
        for tag, c in zip(self.tags, self.labels):
            out[c] += int(counts.get(tag, 0)) if counts is not None else 1
        return out


def cluster_tags(tags: Iterable[str], encode: Encode, n_clusters: int) -> TagClusters:
    """Embed unique tags, standardize, and Ward-cluster them into ``n_clusters`` groups.

    K is capped at the number of unique tags. Uses sklearn's AgglomerativeClustering for the
    assignment and scipy's linkage (same Ward criterion) for the dendrogram figure.
    """
    import numpy as np
    from scipy.cluster.hierarchy import linkage as scipy_linkage
    from sklearn.cluster import AgglomerativeClustering
    from sklearn.preprocessing import StandardScaler

    unique = sorted(set(t for t in tags if t))
    if not unique:
        raise ValueError("cluster_tags: no tags to cluster")
    if n_clusters < 1:
        raise ValueError(f"cluster_tags: n_clusters must be >= 1, got {n_clusters}")
    emb = np.asarray(encode(unique), dtype=np.float64)
    if emb.shape[0] != len(unique):
        raise ValueError(f"encode returned {emb.shape[0]} rows for {len(unique)} tags")
    k = min(n_clusters, len(unique))
    if len(unique) == 1:
        return TagClusters(unique, [0], emb, None, 1)
    scaled = StandardScaler().fit_transform(emb)
    raw_labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(scaled)
    link = scipy_linkage(scaled, method="ward")
    # Renumber: largest cluster first, ties by the alphabetically first member tag.
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(raw_labels):
        groups.setdefault(int(c), []).append(i)
    order = sorted(groups, key=lambda c: (-len(groups[c]), unique[groups[c][0]]))
    remap = {old: new for new, old in enumerate(order)}
    labels = [remap[int(c)] for c in raw_labels]
    return TagClusters(unique, labels, emb, link, k)


def dendrogram_leaf_labels(clusters: TagClusters, names: Sequence[str], max_chars: int = 32) -> Callable[[int], str]:
    """A ``leaf_label_func`` for scipy's truncated dendrogram: "id: name (n tags)" per leaf.

    With ``truncate_mode="lastp", p=K`` the K leaves are the K Ward clusters; each leaf node is
    matched to our cluster id by the majority label of the tags under it.
    """
    from scipy.cluster.hierarchy import to_tree

    _, nodes = to_tree(clusters.linkage, rd=True)

    def label(node_id: int) -> str:
        leaves = nodes[node_id].pre_order()
        cid = Counter(clusters.labels[i] for i in leaves).most_common(1)[0][0]
        return f"{cid}: {names[cid][:max_chars]} ({len(leaves)})"

    return label


def sample_cluster_tags(
    clusters: TagClusters, *, max_tags: int = 50, seed: int = 0
) -> list[list[str]]:
    """Up to ``max_tags`` member tags per cluster, sampled with a fixed seed (paper: 50)."""
    out = []
    for c in range(clusters.n_clusters):
        members = clusters.members(c)
        rng = random.Random(f"{seed}|cluster|{c}")
        out.append(sorted(rng.sample(members, min(max_tags, len(members)))))
    return out


# --------------------------------------------------------------------------------------------
# Clusters -> tier-2
# --------------------------------------------------------------------------------------------


@dataclass
class Overrides:
    """Reviewed corrections to the automatic cluster -> tier-2 mapping.

    ``clusters`` is keyed by cluster name (as produced by the namer, matched by
    :func:`label_key`); ``tags`` by normalized atomic tag and wins over the cluster's mapping.
    """

    clusters: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def for_cluster(self, name: str) -> str | None:
        return self.clusters.get(label_key(name))

    def for_tag(self, tag: str) -> str | None:
        return self.tags.get(label_key(tag))


def load_overrides(path: str | Path = DEFAULT_OVERRIDES_FILE, taxonomy: Taxonomy | None = None) -> Overrides:
    """Load the reviewed override file; every target must be a tier-2 label (aliases allowed)."""
    path = paths.resolve(path)
    taxonomy = taxonomy or load_taxonomy()
    if not path.exists():
        return Overrides()
    raw = read_yaml(path) or {}
    if not isinstance(raw, Mapping):
        raise DataFormatError(f"{path}: expected a mapping")
    out = Overrides()
    for section in ("clusters", "tags"):
        entries = raw.get(section) or {}
        if not isinstance(entries, Mapping):
            raise DataFormatError(f"{path}: '{section}' must be a mapping")
        for key, target in entries.items():
            name = taxonomy.canonical(str(target))
            if name is None or taxonomy.tier_of(name) != 2:
                raise DataFormatError(f"{path}: {section}.{key!r}: {target!r} is not a tier-2 label")
            getattr(out, section)[label_key(str(key))] = name
    return out


@dataclass
class ClusterMapping:
    cluster: int
    name: str
    tier2: str
    tier1: str
    similarity: float
    source: str  # "similarity" | "override"
    runner_up: str
    size: int


def map_clusters_to_tier2(
    clusters: TagClusters,
    names: Sequence[str],
    taxonomy: Taxonomy,
    encode: Encode,
    *,
    overrides: Overrides | None = None,
    name_weight: float = 0.5,
) -> list[ClusterMapping]:
    """Map each cluster to the most similar tier-2 label.

    The cluster vector is ``(1 - name_weight) * centroid(member tags) + name_weight * emb(name)``;
    each tier-2 label is embedded as ``"name: definition"``; cosine similarity picks the label.
    A cluster-name override from the reviewed file takes precedence.
    """
    import numpy as np

    if len(names) != clusters.n_clusters:
        raise ValueError(f"{len(names)} names for {clusters.n_clusters} clusters")
    overrides = overrides or Overrides()
    label_emb = np.asarray(encode([f"{t}: {taxonomy.definitions[t]}" for t in taxonomy.tier2]), dtype=np.float64)
    label_emb /= np.maximum(np.linalg.norm(label_emb, axis=1, keepdims=True), 1e-12)
    name_emb = np.asarray(encode(list(names)), dtype=np.float64)
    sizes = clusters.sizes()
    out: list[ClusterMapping] = []
    for c in range(clusters.n_clusters):
        vec = (1.0 - name_weight) * clusters.centroid(c) + name_weight * name_emb[c]
        vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
        sims = label_emb @ vec
        order = np.argsort(-sims, kind="stable")
        best, second = taxonomy.tier2[int(order[0])], taxonomy.tier2[int(order[min(1, len(order) - 1)])]
        forced = overrides.for_cluster(names[c])
        tier2 = forced or best
        out.append(ClusterMapping(
            cluster=c, name=names[c], tier2=tier2, tier1=taxonomy.parent(tier2),
            similarity=round(float(sims[taxonomy.tier2.index(tier2)]), 4),
            source="override" if forced else "similarity", runner_up=second, size=sizes[c],
        ))
    return out


def tag_to_tier2(
    clusters: TagClusters, mappings: Sequence[ClusterMapping], overrides: Overrides | None = None
) -> dict[str, str]:
    """Tier-2 label of every clustered atomic tag (tag overrides win over the cluster's label)."""
    overrides = overrides or Overrides()
    by_cluster = {m.cluster: m.tier2 for m in mappings}
    return {
        tag: overrides.for_tag(tag) or by_cluster[c]
        for tag, c in zip(clusters.tags, clusters.labels)
    }


# --------------------------------------------------------------------------------------------
# Reverse mapping -> D_Error^QA
# --------------------------------------------------------------------------------------------


def assign_tiers(
    tags: Sequence[str], tag_map: Mapping[str, str], taxonomy: Taxonomy
) -> tuple[list[str], list[str], list[str]]:
    """(tag1, tag2, tag3) of one record from its normalized atomic tags.

    tag3 keeps the record's tags that the taxonomy knows; tag2 are their tier-2 labels and tag1
    the parents, each de-duplicated in first-occurrence order.
    """
    tag3 = [t for t in dict.fromkeys(tags) if t in tag_map]
    tag2 = list(dict.fromkeys(tag_map[t] for t in tag3))
    tag1 = list(dict.fromkeys(taxonomy.parent(t) for t in tag2))
    return tag1, tag2, tag3


def critic_error_target(analysis: str, tag1: list[str], tag2: list[str], tag3: list[str]) -> dict[str, Any]:
    """The critic JSON target of an error record (exact key spelling of the contract)."""
    return {"Judgement": "Error", "Error_analysis": analysis, "tag1": tag1, "tag2": tag2, "tag3": tag3}


_QA_KEEP = (
    "id", "dataset", "question", "golden_answers", "metadata", "passages", "prediction",
    "raw_output", "pool_member", "em", "f1", "acc", "evidence", "rationale", "rationale_source",
)


def build_error_qa(
    error_records: Sequence[Mapping[str, Any]],
    record_tags: Sequence[Sequence[str]],
    tag_map: Mapping[str, str],
    taxonomy: Taxonomy,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Reverse-map the three tiers onto every error record (D_Error^QA).

    Args:
        error_records: judged error records (stage 02) in the same order as ``record_tags``.
        record_tags: normalized atomic tags per record (stage 03).
        tag_map: atomic tag -> tier-2 (:func:`tag_to_tier2`).

    Returns:
        (records with a ``critic_target`` dict, report with counts). Records none of whose tags
        survived normalization have no labels and are dropped (counted as ``dropped_no_tags``).
    """
    if len(error_records) != len(record_tags):
        raise ValueError(f"{len(error_records)} records but {len(record_tags)} tag lists")
    out: list[dict[str, Any]] = []
    dropped = 0
    for rec, tags in zip(error_records, record_tags):
        tag1, tag2, tag3 = assign_tiers(tags, tag_map, taxonomy)
        if not tag3:
            dropped += 1
            continue
        row = {k: rec[k] for k in _QA_KEEP if k in rec}
        row["critic_target"] = critic_error_target(str(rec.get("rationale", "")), tag1, tag2, tag3)
        out.append(row)
    return out, {"input": len(error_records), "kept": len(out), "dropped_no_tags": dropped}


def label_distribution(records: Sequence[Mapping[str, Any]], tier: int, by: str | None = None) -> dict[str, dict[str, int]]:
    """Counts of tier-``tier`` labels in D_Error^QA records, overall or grouped by a field.

    ``by`` names a record key (``pool_member``, ``dataset``) or a metadata key (``type``).
    """
    out: dict[str, Counter[str]] = {}
    for rec in records:
        group = "all" if by is None else str(rec.get(by, (rec.get("metadata") or {}).get(by)))
        counter = out.setdefault(group, Counter())
        counter.update(rec["critic_target"][f"tag{tier}"])
    return {g: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for g, c in sorted(out.items())}


def taxonomy_metrics(
    clusters: Any,
    mappings: Sequence[Any],
    taxonomy: Any,
    error_qa: Sequence[Mapping[str, Any]],
    *,
    qa_report: Mapping[str, Any],
    known_cause_agreement: Mapping[str, Any],
    cluster_namer: str,
    cluster_name_parse: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Notebook 04's metrics: the clustering, how its clusters were mapped onto the taxonomy, the
    labelled D_Error^QA with its tier-1/tier-2 distributions, and the agreement with known causes.

    Args:
        clusters: the Ward clustering (``n_clusters``, ``tags``).
        mappings: one mapping per cluster (``source``, ``tier2``).
        taxonomy: the 3-tier taxonomy (``tier1``, ``tier2``, ``aliases``).
        error_qa: the labelled error records; ``qa_report`` is the report of their labelling.
        known_cause_agreement: :func:`known_cause_agreement` on them.
        cluster_namer: who named the clusters; ``cluster_name_parse`` the LLM namer's parse
            report (None when no LLM named them).
    """
    return {
        "clusters": clusters.n_clusters,
        "tags_clustered": len(clusters.tags),
        "cluster_namer": cluster_namer,
        "mapping_sources": dict(sorted(Counter(m.source for m in mappings).items())),
        "tier2_labels_used": sorted({m.tier2 for m in mappings}),
        "error_qa": qa_report,
        "tier1_distribution": label_distribution(error_qa, 1)["all"] if error_qa else {},
        "tier2_distribution": label_distribution(error_qa, 2)["all"] if error_qa else {},
        "tier1_by_dataset": label_distribution(error_qa, 1, by="dataset"),
        "known_cause_agreement": known_cause_agreement,
        "cluster_name_parse": cluster_name_parse,
        "taxonomy": {"tier1": len(taxonomy.tier1), "tier2": len(taxonomy.tier2), "aliases": len(taxonomy.aliases)},
    }
