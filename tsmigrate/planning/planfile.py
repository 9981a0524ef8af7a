"""Plan files (``plan --out``, ``apply --plan``): writing them, and reading them back safely.

A plan file is the JSON plan plus what pins it: the options it was planned with, its lint
findings, the target and a checksum. Reading one checks its whole shape first, so a file that is
not JSON, holds the wrong types, misses a key or names an unknown step gets one clear error
listing every problem, never a traceback; then its checksum, target and models.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tsmigrate.errors import ApplyRefused
from tsmigrate.planning import ops
from tsmigrate.planning.plan import PLAN_FORMAT, Plan
from tsmigrate.schema import Catalog


class PlanFileError(ApplyRefused):
    """A plan file that cannot be applied: unreadable, malformed, edited, or made elsewhere."""


_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
# Each step kind and the arguments it carries (the attrs fields of its class).
STEP_ARGS = {cls.kind: {a.name for a in attrs.fields(cls)} for cls in ops.Step.__subclasses__()}


def _checksum(document: Mapping[str, Any]) -> str:
    body = {k: v for k, v in document.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def plan_document(
    plan: Plan, target_identity: str, findings: Sequence[Any] = (), *, prune: bool = False
) -> dict[str, Any]:
    """The plan as written by ``plan --out``: the JSON plan, the options it was planned with,
    its lint findings, the target, and a checksum."""
    document = {
        **plan.to_dict(),
        "options": {"prune": prune},
        "lint": [f.to_dict() for f in findings],
        "target": target_identity,
    }
    document["checksum"] = _checksum(document)
    return document


# --- shape ---------------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


class _Shape:
    """Collects every problem of a document's shape, each naming the key it is about."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def need(self, parent: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...],
             label: str) -> Any:
        """``parent[key]`` when it exists with the right type, else None (problem noted)."""
        path = f"{where}.{key}" if where else key
        if key not in parent:
            self.problems.append(f"{path} is missing")
            return None
        value = parent[key]
        wrong_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
        if not isinstance(value, kind) or wrong_bool:
            self.problems.append(f"{path} must be {label}, not {_json_type(value)}")
            return None
        return value

    def fingerprint(self, parent: Mapping[str, Any], key: str, where: str = "") -> None:
        value = self.need(parent, key, where, str, "a fingerprint (sha256:...)")
        if value is not None and not _FINGERPRINT.fullmatch(value):
            self.problems.append(f"{where + '.' if where else ''}{key} is not a fingerprint: {value[:40]!r}")

    def step(self, step: Any, where: str) -> None:
        if not isinstance(step, dict):
            self.problems.append(f"{where} must be an object, not {_json_type(step)}")
            return
        kind = self.need(step, "kind", where, str, "a string")
        risk = self.need(step, "risk", where, str, "a string")
        self.need(step, "summary", where, str, "a string")
        if "reason" in step:
            self.need(step, "reason", where, str, "a string")
        self.fingerprint(step, "fingerprint_after", where)
        args = self.need(step, "args", where, dict, "an object")
        if risk is not None and risk not in ops.RISKS:
            self.problems.append(f"{where}.risk {risk!r} is not one of {', '.join(ops.RISKS)}")
        if kind is None:
            return
        if kind not in STEP_ARGS:
            self.problems.append(
                f"{where}.kind {kind!r} is not a step kind (known: {', '.join(sorted(STEP_ARGS))})"
            )
            return
        if args is None:
            return
        expected = STEP_ARGS[kind]
        if set(args) != expected:
            missing, extra = sorted(expected - set(args)), sorted(set(args) - expected)
            detail = "; ".join(filter(None, [
                f"missing {', '.join(missing)}" if missing else "",
                f"unknown {', '.join(extra)}" if extra else "",
            ]))
            self.problems.append(f"{where}.args do not fit a {kind} step ({detail})")
        elif not isinstance(args["table"], str):
            self.problems.append(f"{where}.args.table must be a string, not {_json_type(args['table'])}")


def shape_problems(document: Any) -> list[str]:
    """Every way ``document`` differs from the shape ``plan_document`` writes."""
    if not isinstance(document, dict):
        return [f"the file holds {_json_type(document)}, not a plan (a JSON object)"]
    shape = _Shape()
    version = shape.need(document, "format", "", int, "a whole number")
    if version is not None and version != PLAN_FORMAT:
        shape.problems.append(f"format {version} is not one this version reads ({PLAN_FORMAT})")
    shape.need(document, "checksum", "", str, "a string")
    shape.need(document, "target", "", str, "a string")
    for key in ("source_fingerprint", "target_fingerprint", "models_fingerprint"):
        shape.fingerprint(document, key)
    shape.need(document, "has_changes", "", bool, "true or false")
    options = shape.need(document, "options", "", dict, "an object")
    if options is not None:
        shape.need(options, "prune", "options", bool, "true or false")
    summary = shape.need(document, "summary", "", dict, "an object")
    for risk, count in (summary or {}).items():
        if risk not in ops.RISKS or not isinstance(count, int) or isinstance(count, bool):
            shape.problems.append(f"summary.{risk} must be a risk ({', '.join(ops.RISKS)}) with a count")
    steps = shape.need(document, "steps", "", list, "an array")
    for number, step in enumerate(steps or ()):
        shape.step(step, f"steps[{number}]")
    for number, table in enumerate(shape.need(document, "undeclared_tables", "", list, "an array") or ()):
        where = f"undeclared_tables[{number}]"
        if not isinstance(table, dict):
            shape.problems.append(f"{where} must be an object, not {_json_type(table)}")
            continue
        shape.need(table, "name", where, str, "a string")
        shape.need(table, "note", where, str, "a string")
    for number, finding in enumerate(shape.need(document, "lint", "", list, "an array") or ()):
        if not isinstance(finding, dict):
            shape.problems.append(f"lint[{number}] must be an object, not {_json_type(finding)}")
    return shape.problems


# --- reading and checking -----------------------------------------------------------------------


def check_plan_document(
    document: Any, target_identity: str, models: Catalog, source: str = "the plan file"
) -> None:
    """Refuse a document that is not a plan as ``plan --out`` wrote it (every problem listed),
    was edited since, or was made for another instance or other models. ``source`` names it."""
    problems = shape_problems(document)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise PlanFileError(
            f"{source} is not a tsmigrate plan (write one with tsmigrate plan --out); "
            f"{len(problems)} problem(s):\n{listed}"
        )
    if document["checksum"] != _checksum(document):
        raise PlanFileError(f"{source} was edited after tsmigrate wrote it (checksum mismatch)")
    if document["target"] != target_identity:
        raise PlanFileError(f"{source} was made for {document['target']}, not for {target_identity}")
    if document["models_fingerprint"] != models.fingerprint():
        raise PlanFileError(f"{source} was made for other models than the ones found now; plan again")


def read_plan_file(path: Path, target_identity: str, models: Catalog) -> dict[str, Any]:
    """The plan document in ``path``, checked as ``check_plan_document`` does; PlanFileError
    naming the file and what is wrong with it otherwise."""
    source = f"plan file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanFileError(f"cannot read {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PlanFileError(f"{source} is not text (UTF-8); write it with tsmigrate plan --out") from None
    if (depth := _nesting(text)) > MAX_NESTING:
        raise PlanFileError(
            f"{source} nests arrays/objects {depth} deep (a plan nests at most {MAX_NESTING}); "
            "write it with tsmigrate plan --out"
        )
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PlanFileError(f"{source} is not JSON ({exc}); write it with tsmigrate plan --out") from None
    except RecursionError:  # belt and braces: the depth check above should have caught it
        raise PlanFileError(
            f"{source} nests too deep to be a plan; write it with tsmigrate plan --out"
        ) from None
    check_plan_document(document, target_identity, models, source)
    return document


# A plan nests a handful of levels (document, steps, step, args, columns, ...); anything far deeper
# is not a plan, and json.loads of ~1000+ levels raises RecursionError instead of an answer.
MAX_NESTING = 64


def _nesting(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings do
    not count), without parsing it: linear, no recursion. Only as exact as a depth bound needs
    (malformed text is json.loads's to report)."""
    depth = deepest = 0
    # Strings are matched whole, so brackets in them are skipped (escaped quotes included).
    for match in _STRUCTURE.finditer(text):
        token = match.group()  # a whole string, or one bracket
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def resume_point(document: Mapping[str, Any], live_fingerprint: str) -> int:
    """How many of the file's steps the live schema already reflects."""
    if live_fingerprint == document["source_fingerprint"]:
        return 0
    for number, step in enumerate(document["steps"], 1):
        if step["fingerprint_after"] == live_fingerprint:
            return number
    raise PlanFileError(
        "the live schema changed since the plan was made (fingerprint "
        f"{live_fingerprint[:19]} is not the plan's {document['source_fingerprint'][:19]}); "
        "plan again"
    )


def _without_cost(step: dict[str, Any]) -> dict[str, Any]:
    """A step without a rewrite's cost, capture check and key spread (estimates plan shows, not
    part of the step; the reason quotes the cost, and the rest of the reason follows from the
    args)."""
    args = step.get("args")
    if not isinstance(args, dict) or "cost" not in args:
        return step
    return {**{k: v for k, v in step.items() if k not in ("reason", "key_spread")},
            "args": {**args, "cost": None, "capture": None, "key_spread": None}}


def planned_steps(document: Mapping[str, Any], start: int) -> list[dict[str, Any]]:
    """The file's steps from ``start`` on, as comparable to ``step_json`` of a step."""
    return [_without_cost({k: v for k, v in step.items() if k != "fingerprint_after"})
            for step in document["steps"][start:]]


def step_json(step: ops.Step) -> dict[str, Any]:
    """A step as a plan file holds it (JSON types: lists, not tuples), without a rewrite's cost
    (compared with ``planned_steps``)."""
    return _without_cost(json.loads(json.dumps(step.to_dict())))
