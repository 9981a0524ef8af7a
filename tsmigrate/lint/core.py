"""Lint machinery: findings with stable codes, rules that produce them, configuration and
suppression. Rules are pure functions of IR values (and of a plan, when there is one).

A rule is registered with ``@rule(code, severity, title)`` and yields ``Finding`` values::

    @rule("TS-PK303", WARNING, "monotonic partition key")
    def monotonic_partition_key(context: Context) -> Iterator[Finding]:
        for table in context.target.tables:
            ...
            yield context.finding(table, "primary_key.ts", "writes all land on ...", fix="...")

``Context`` carries the target catalog (the models), the live catalog and the plan when linting
a plan, and helpers to build findings. The code's family is its middle letters: DS destructive
change, VT versions and TTL, PK primary key, IX indexes, AP access patterns, CL columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from tsmigrate.errors import ConfigError, did_you_mean, unknown_keys
from tsmigrate.schema import Catalog, Table

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)


@attrs.frozen
class Finding:
    code: str
    severity: str
    table: str
    field: str
    message: str
    fix: str = ""
    model: str = ""
    step: int | None = None  # 1-based number of the plan step it is about

    def where(self) -> str:
        owner = f"{self.model} (table {self.table!r})" if self.model else f"table {self.table!r}"
        text = f"{owner}, {self.field}" if self.field else owner
        return f"step {self.step}: {text}" if self.step is not None else text

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Context:
    target: Catalog
    live: Catalog | None = None
    plan: Any = None  # tsmigrate.planning.plan.Plan, when linting a plan
    # Set by run_lint for each rule: the code and default severity its findings carry.
    code: str = ""
    severity: str = WARNING

    def finding(
        self, table: Table | str, field: str, message: str, fix: str = "", step: int | None = None
    ) -> Finding:
        name = table if isinstance(table, str) else table.name
        source = "" if isinstance(table, str) else table.source
        if not source and self.target.table(name) is not None:
            source = self.target.table(name).source
        return Finding(self.code, self.severity, name, field, message, fix, source, step)


Check = Callable[[Context], Iterable[Finding]]


@attrs.frozen
class Rule:
    code: str
    severity: str
    title: str
    check: Check


RULES: dict[str, Rule] = {}


def rule(code: str, severity: str, title: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        if code in RULES:
            raise ValueError(f"lint code {code} is registered twice")
        RULES[code] = Rule(code, severity, title, check)
        return check

    return register


def settings_problems(key: str, settings: Any) -> list[str]:
    """What is wrong with a ``[tool.tsmigrate.lint]`` table (``key`` names it in messages)."""
    if not isinstance(settings, Mapping):
        return [f"[{key}] must be a table, got {settings!r}; example:\n"
                f'    [{key}]\n    severity = {{"TS-PK303" = "error"}}\n    disable = ["TS-PK305"]']
    problems = unknown_keys(key, settings, ("severity", "disable"))
    codes = sorted(RULES)
    severity = settings.get("severity", {})
    if not isinstance(severity, Mapping):
        problems.append(
            f"{key}.severity must be a table of lint code to severity, got {severity!r}; "
            'example: severity = {"TS-PK303" = "error"}'
        )
        severity = {}
    for code, level in severity.items():
        if code not in RULES:
            problems.append(f"{key}.severity: unknown lint code {code!r}; {did_you_mean(code, codes)}")
        elif level not in SEVERITIES:
            problems.append(
                f"{key}.severity: {code} = {level!r} is not one of {', '.join(SEVERITIES)}; "
                f'example: severity = {{"{code}" = "error"}}'
            )
    disable = settings.get("disable", [])
    if not isinstance(disable, list) or not all(isinstance(c, str) for c in disable):
        shown = f'["{disable}"]' if isinstance(disable, str) else '["TS-PK305"]'
        problems.append(
            f"{key}.disable must be a list of lint codes, got {disable!r}; example: disable = {shown}"
        )
    else:
        problems += [f"{key}.disable: unknown lint code {code!r}; {did_you_mean(code, codes)}"
                     for code in disable if code not in RULES]
    return problems


@attrs.frozen
class LintConfig:
    """``[tool.tsmigrate.lint]``: ``severity = {"TS-PK303" = "error"}``, ``disable = [...]``."""

    severity: Mapping[str, str] = attrs.field(factory=dict)
    disable: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> LintConfig:
        problems = settings_problems("tool.tsmigrate.lint", settings)
        if problems:
            raise ConfigError("[tool.tsmigrate.lint]: " + "; ".join(problems))
        return cls(severity=dict(settings.get("severity", {})),
                   disable=frozenset(settings.get("disable", [])))


def _suppressed(finding: Finding, target: Catalog) -> bool:
    table = target.table(finding.table)
    return table is not None and finding.code in dict(table.lint_ignore)


def run_lint(
    target: Catalog,
    *,
    live: Catalog | None = None,
    plan: Any = None,
    config: LintConfig | None = None,
) -> list[Finding]:
    """Every finding of every enabled rule, with configured severities, minus suppressed ones,
    errors first."""
    config = config or LintConfig()
    findings: list[Finding] = []
    for code, registered in sorted(RULES.items()):
        if code in config.disable:
            continue
        severity = config.severity.get(code, registered.severity)
        context = Context(target, live, plan, code, severity)
        findings.extend(f for f in registered.check(context) if not _suppressed(f, target))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order[f.severity], f.step or 0, f.table, f.code, f.field))
