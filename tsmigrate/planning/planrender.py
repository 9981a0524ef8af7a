"""Plan and lint rendering: terminal (Terraform-like symbols and colour), Markdown for a
pull-request comment, and JSON (schema: ``Plan.to_dict`` plus ``lint``, documented in the README).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tsmigrate.lint.core import ERROR, SEVERITIES, WARNING, Finding
from tsmigrate.planning import ops
from tsmigrate.planning.plan import Plan

_SEVERITY_STYLE = {ERROR: ("✗", "red"), WARNING: ("!", "yellow")}

_COLOURS = {"+": "green", "-": "red", "~": "yellow", "-/+": "magenta"}
_RISK_COLOURS = {ops.SAFE: "green", ops.DATA_COPY: "yellow", ops.DESTRUCTIVE: "red"}


def _counts(plan: Plan) -> str:
    parts = [f"{len(plan.by_risk(r))} {r}" for r in ops.RISKS if plan.by_risk(r)]
    counts = f"{len(plan.steps)} step{'s' if len(plan.steps) != 1 else ''}"
    if parts:
        counts += f" ({', '.join(parts)})"
    if plan.rewrites:
        n = len(plan.rewrites)
        counts += f", {n} rewrite{'s' if n != 1 else ''} to start or continue"
    return counts


_REWRITES_AHEAD = "Rewrites apply runs (from the rewrite state; `tsmigrate rewrite status` shows more):"


def _tally(findings: Sequence[Finding]) -> str:
    counts = [(s, sum(f.severity == s for f in findings)) for s in SEVERITIES]
    return ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts if n)


def findings_text(findings: Sequence[Finding], *, colour: bool = True) -> str:
    def paint(text: str, style: str) -> str:
        return f"[{style}]{text}[/]" if colour else text

    if not findings:
        return paint("Lint: no findings.", "green") + "\n"
    lines = [paint(f"Lint: {_tally(findings)}", "bold")]
    for f in findings:
        mark, style = _SEVERITY_STYLE.get(f.severity, ("i", "cyan"))
        lines.append(
            f"  {paint(mark, style)} {paint(f.code, style)} {_escape(f.where(), colour)}: "
            f"{_escape(f.message, colour)}"
        )
        if f.fix:
            lines.append(f"      {paint('fix:', 'dim')} {_escape(f.fix, colour)}")
    return "\n".join(lines) + "\n"


def findings_markdown(findings: Sequence[Finding]) -> str:
    if not findings:
        return "**Lint:** no findings.\n"
    lines = [f"**Lint: {_tally(findings)}**", "", "| | code | where | finding | fix |",
             "|---|---|---|---|---|"]
    for f in findings:
        cells = [f.where(), f.message, f.fix]
        where, message, fix = (c.replace("|", "\\|") for c in cells)
        lines.append(f"| {f.severity} | `{f.code}` | {where} | {message} | {fix} |")
    return "\n".join(lines) + "\n"


def plan_text(plan: Plan, *, colour: bool = True, findings: Sequence[Finding] = ()) -> str:
    """Rich markup when ``colour``; plain text otherwise."""

    def paint(text: str, style: str) -> str:
        return f"[{style}]{text}[/]" if colour else text

    lines: list[str] = []
    if not plan.has_changes:
        lines.append(paint("No changes.", "bold green") + " The instance matches the models.")
    else:
        lines.append(paint(f"Plan: {_counts(plan)}", "bold"))
        if plan.steps:
            lines.append("")
        for number, step in enumerate(plan.steps, 1):
            symbol = paint(f"{step.symbol:>3}", _COLOURS[step.symbol])
            risk = paint(step.risk, _RISK_COLOURS[step.risk])
            lines.append(f"{symbol} {number:>2}. {_escape(step.summary(), colour)}  [{risk}]")
            if step.reason:
                lines.append(f"         {paint(_escape(step.reason, colour), 'dim')}")
            if _revert_note(step):  # a fact to decide on before the switch, not a detail
                lines.append(f"         {paint('! ' + _escape(_revert_note(step), colour), 'yellow')}")
            if isinstance(step, ops.RewriteTable) and step.capture is not None:
                lines.append(f"         {_capture_line(step.capture, colour)}")
            if isinstance(step, ops.RewriteTable) and step.key_spread is not None:
                lines.append(f"         {paint(_escape(_spread_text(step), colour), 'dim')}")
    if plan.rewrites:
        lines.append("")
        lines.append(_escape(_REWRITES_AHEAD.replace("`", ""), colour))
        for rewrite in plan.rewrites:
            lines.append(f"{paint('  ~', _COLOURS['~'])} {_escape(rewrite.summary(), colour)}  "
                         f"[{paint(ops.DATA_COPY, _RISK_COLOURS[ops.DATA_COPY])}]")
            if rewrite.note:
                lines.append(f"      {paint(_escape(rewrite.note, colour), 'dim')}")
            if rewrite.capture is not None:
                lines.append(f"      {_capture_line(rewrite.capture, colour)}")
    for table in plan.undeclared:
        lines.append("")
        lines.append(paint("  ? ", "cyan") + f"table {table.name} is not declared: {table.note}")
    if plan.by_risk(ops.DESTRUCTIVE):
        lines.append("")
        lines.append(
            paint("! ", "bold red")
            + f"{len(plan.by_risk(ops.DESTRUCTIVE))} destructive step(s): apply needs --allow-destructive"
        )
    lines.append("")
    return "\n".join(lines) + "\n" + findings_text(findings, colour=colour)


def _revert_note(step: ops.Step) -> str:
    return step.revert_note if isinstance(step, ops.RewriteTable) else ""


def _capture_line(check: Any, colour: bool) -> str:
    """Whether change capture keeps up with the source's writes (a ``rewrite.capacity.Check``):
    a warning (yellow, "!") when the workers cannot keep up."""
    text = _escape(f"capture: {check.text}", colour)
    if not colour:
        return f"! {text}" if check.warning else text
    return f"[yellow]! {text}[/]" if check.warning else f"[dim]{text}[/]"


def _capture_markdown(check: Any) -> str:
    if check is None:
        return ""
    text = f"capture: {check.text}".replace("|", "\\|")
    return f" **{text}**" if check.warning else f" {text}"


def _spread_text(step: ops.RewriteTable) -> str:
    """The source key's spread against the new key's (``lint.spread.KeySpread``), as sampled."""
    return f"key spread: {step.key_spread.text()}"


def _escape(text: str, colour: bool) -> str:
    return text.replace("[", r"\[") if colour else text


def plan_markdown(
    plan: Plan, *, title: str = "tsmigrate plan", findings: Sequence[Finding] = ()
) -> str:
    lines = [f"### {title}", ""]
    if not plan.has_changes:
        lines.append("**No changes.** The instance matches the models.")
    else:
        lines.append(f"**{_counts(plan)}**")
    if plan.steps:
        lines.append("")
        lines.append("| # | | step | risk | why |")
        lines.append("|---|---|---|---|---|")
        for number, step in enumerate(plan.steps, 1):
            risk = f"**{step.risk}**" if step.risk != ops.SAFE else step.risk
            summary = step.summary().replace("|", "\\|")
            reason = step.reason.replace("|", "\\|")
            if _revert_note(step):
                reason += " **" + _revert_note(step).replace("|", "\\|") + "**"
            if isinstance(step, ops.RewriteTable):
                reason += _capture_markdown(step.capture)
                if step.key_spread is not None:
                    reason += " " + _spread_text(step).replace("|", "\\|")
            lines.append(f"| {number} | `{step.symbol}` | {summary} | {risk} | {reason} |")
    if plan.rewrites:
        lines.append("")
        lines.append(_REWRITES_AHEAD)
        lines.append("")
        lines.append("| rewrite | action | phase | note |")
        lines.append("|---|---|---|---|")
        for rewrite in plan.rewrites:
            cells = [rewrite.summary(), rewrite.action, rewrite.phase or "prepare", rewrite.note]
            summary, action, phase, note = (c.replace("|", "\\|") for c in cells)
            note = (note + _capture_markdown(rewrite.capture)).strip()
            lines.append(f"| {summary} | {action} | {phase} | {note} |")
    if plan.undeclared:
        lines.append("")
        lines.append("Tables no model declares (never dropped without `--prune`):")
        lines += [f"- `{t.name}`: {t.note}" for t in plan.undeclared]
    if plan.by_risk(ops.DESTRUCTIVE):
        lines.append("")
        lines.append(
            f"> [!WARNING]\n> {len(plan.by_risk(ops.DESTRUCTIVE))} destructive step(s): "
            "`tsmigrate apply` refuses them without `--allow-destructive`."
        )
    lines.append("")
    lines.append(findings_markdown(findings))
    lines.append(
        f"<sub>live state `{plan.source_fingerprint[:19]}` → target `{plan.target_fingerprint[:19]}`</sub>"
    )
    return "\n".join(lines) + "\n"


def plan_json(plan: Plan, findings: Sequence[Finding] = ()) -> str:
    data = {**plan.to_dict(), "lint": [f.to_dict() for f in findings]}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
