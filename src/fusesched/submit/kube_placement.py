"""A pod's node selection as the request's ``placement`` (docs/SUBMIT.md, "Kubernetes Pod /
Job YAML"): ``nodeSelector``, ``nodeName`` (→ ``kubernetes.io/hostname``) and
``affinity.nodeAffinity`` — one required term of ``matchExpressions`` (``In``, ``NotIn``,
``Exists``, ``DoesNotExist``) and preferred terms with their weights. Pod (anti-)affinity is a
warning; several required terms (an "or"), ``matchFields`` and other operators are errors.
Of the pods of one job, what they all select alike is the job's placement, the rest each
one's task group's own (:func:`split_selection`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from fusesched.model.node import LABEL_HOSTNAME
from fusesched.submit.label_terms import split_label_filters
from fusesched.submit.problems import Loc, format_loc

if TYPE_CHECKING:
    from fusesched.submit.kube_pod import PodPart, PodReader

_OPS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def node_selection(
    reader: PodReader, spec: Mapping[str, object], loc: Loc
) -> tuple[dict[str, object], dict[str, Loc]]:
    """The pod's node selection as the request's ``placement``, and where each part of it
    is written."""
    renames: dict[str, Loc] = {}
    selector = dict(
        reader.mapping(spec.get("nodeSelector"), (*loc, "nodeSelector"), "nodeSelector")
    )
    renames["placement.node_selector"] = (*loc, "nodeSelector")
    if "nodeName" in spec:
        selector[LABEL_HOSTNAME] = spec["nodeName"]
    out: dict[str, object] = {"node_selector": selector}
    affinity = reader.mapping(spec.get("affinity"), (*loc, "affinity"), "affinity")
    for key in affinity:
        if key in ("podAffinity", "podAntiAffinity"):
            reader.ignored((*loc, "affinity", key))
        elif key != "nodeAffinity":
            raise reader.error(f"unknown field {key!r}", (*loc, "affinity", key))
    node_loc: Loc = (*loc, "affinity", "nodeAffinity")
    node = reader.mapping(affinity.get("nodeAffinity"), node_loc, "nodeAffinity")
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
    for key in node:
        if key not in (required_key, preferred_key):
            raise reader.error(f"unknown field {key!r}", (*node_loc, key))
    if required_key in node:
        req_loc: Loc = (*node_loc, required_key)
        required = reader.mapping(node[required_key], req_loc, required_key)
        terms_loc: Loc = (*req_loc, "nodeSelectorTerms")
        terms = reader.sequence(required.get("nodeSelectorTerms"), terms_loc, "nodeSelectorTerms")
        if len(terms) > 1:
            raise reader.error(
                f"{len(terms)} nodeSelectorTerms (any of them may match) are not supported; "
                "give one term (all its expressions must match)",
                terms_loc,
            )
        if terms:
            found = _expressions(reader, terms[0], (*terms_loc, 0))
            out["required"] = [expr for expr, _ in found]
            for i, (_, expr_loc) in enumerate(found):
                renames[f"placement.required[{i}]"] = expr_loc
            renames["placement.required"] = terms_loc
    preferred: list[dict[str, object]] = []
    pref_loc: Loc = (*node_loc, preferred_key)
    for i, item in enumerate(reader.sequence(node.get(preferred_key), pref_loc, preferred_key)):
        term = reader.mapping(item, (*pref_loc, i), "a preferred term")
        weight = term.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise reader.error("weight must be a whole number from 1 to 100", (*pref_loc, i))
        found = _expressions(reader, term.get("preference"), (*pref_loc, i, "preference"))
        for expr, expr_loc in found:
            renames[f"placement.preferred[{len(preferred)}]"] = expr_loc
            preferred.append({**expr, "weight": weight})
    if preferred:
        out["preferred"] = preferred
        renames["placement.preferred"] = pref_loc
    return out, renames


def _expressions(reader: PodReader, value: object, loc: Loc) -> list[tuple[dict[str, object], Loc]]:
    """A term's match expressions, each with where it is written."""
    term = reader.mapping(value, loc, "a node selector term")
    if "matchFields" in term:
        raise reader.error(
            "matchFields is not supported; use matchExpressions on node labels",
            (*loc, "matchFields"),
        )
    out: list[tuple[dict[str, object], Loc]] = []
    exprs_loc: Loc = (*loc, "matchExpressions")
    for i, item in enumerate(reader.sequence(term.get("matchExpressions"), exprs_loc, "list")):
        expr = reader.mapping(item, (*exprs_loc, i), "an expression")
        op = expr.get("operator")
        if not isinstance(op, str) or op not in _OPS:
            raise reader.error(
                f"operator {op!r} is not supported (In, NotIn, Exists, DoesNotExist)",
                (*exprs_loc, i),
            )
        values = reader.sequence(expr.get("values"), (*exprs_loc, i, "values"), "values")
        entry = {"key": expr.get("key"), "op": op, "values": [str(v) for v in values]}
        out.append((entry, (*exprs_loc, i)))
    if not out:
        raise reader.error("a node selector term needs matchExpressions", loc)
    return out


def split_selection(
    reader: PodReader, parts: Sequence[PodPart]
) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The job's placement and each part's own: the label filters (``nodeSelector``,
    ``nodeName``, required node affinity) that every pod gives alike are the job's, the rest
    its task group's own, which its nodes meet besides the job's (a replica type's own
    pool or GPU model). Preferred terms are the job's: the pods that give them must agree,
    and a pod without them takes the others' (with a warning)."""
    shared, owns = split_label_filters([part.placement for part in parts])
    preferring = [part for part in parts if part.placement.get("preferred")]
    if preferring:
        chosen = preferring[0]
        for part in preferring[1:]:
            if part.placement["preferred"] != chosen.placement["preferred"]:
                raise reader.error(
                    "its preferred node affinity differs from that of "
                    f"{format_loc(chosen.loc)}: fusesched scores the nodes of all the pods of "
                    "one job by one set of preferred terms; give the same",
                    part.loc,
                )
        for part in parts:
            if not part.placement.get("preferred"):
                reader.warn(
                    f"{format_loc(part.loc)} prefers no nodes: the preferred node affinity of "
                    f"{format_loc(chosen.loc)} applies to it too (a job has one)",
                    part.loc,
                )
        shared["preferred"] = chosen.placement["preferred"]
    return shared, owns
