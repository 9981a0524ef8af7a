"""The revision graph: a DAG of revision ids, each naming its parents (several for a merge).

Pure: built from ``{revision: parents}``, so it is tested with plain values. What is applied on an
instance is given as a set of revision ids (``applied``); the graph closes it over ancestors, so
passing the current heads works as well as passing every applied revision.

Specs ``resolve`` understands: a full id or an unambiguous prefix; ``head`` (the single head);
``base`` (before every revision: ``None``); ``+N`` / ``-N`` (N steps up or down from the single
current head of ``applied``); ``REV+N`` / ``REV-N`` (N steps from REV).
"""

from __future__ import annotations

import difflib
import heapq
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from tsmigrate.versions.errors import (
    AmbiguousRevisionError,
    MissingParentError,
    MultipleHeadsError,
    RevisionCycleError,
    UnknownRevisionError,
)

_RELATIVE = re.compile(r"^(?P<rev>[^+-]*)(?P<sign>[+-])(?P<n>\d+)$")


class RevisionGraph:
    def __init__(self, parents: Mapping[str, Sequence[str]]):
        self._parents: dict[str, tuple[str, ...]] = {rev: tuple(ps) for rev, ps in parents.items()}
        for rev, ps in sorted(self._parents.items()):
            for parent in ps:
                if parent not in self._parents:
                    close = difflib.get_close_matches(parent, list(self._parents), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise MissingParentError(
                        f"revision {rev} names parent {parent!r}, which no script defines{hint}; "
                        "restore the parent's script or correct down_revision"
                    )
        self._children: dict[str, list[str]] = {rev: [] for rev in self._parents}
        for rev, ps in self._parents.items():
            for parent in ps:
                self._children[parent].append(rev)
        for kids in self._children.values():
            kids.sort()
        self._order = self._topological()

    # -- structure --------------------------------------------------------------------------

    @property
    def revisions(self) -> tuple[str, ...]:
        return tuple(self._order)

    def __len__(self) -> int:
        return len(self._parents)

    def __contains__(self, rev: object) -> bool:
        return rev in self._parents

    def parents(self, rev: str) -> tuple[str, ...]:
        return self._parents[rev]

    def children(self, rev: str) -> tuple[str, ...]:
        return tuple(self._children[rev])

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(sorted(rev for rev, kids in self._children.items() if not kids))

    @property
    def bases(self) -> tuple[str, ...]:
        return tuple(sorted(rev for rev, ps in self._parents.items() if not ps))

    def topological(self) -> list[str]:
        """Every revision, parents before children; ties broken by id, so the order is stable."""
        return list(self._order)

    def _topological(self) -> list[str]:
        waiting = {rev: len(ps) for rev, ps in self._parents.items()}
        ready = [rev for rev, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            rev = heapq.heappop(ready)
            order.append(rev)
            for child in self._children[rev]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, child)
        if len(order) != len(self._parents):
            cycle = self._a_cycle({rev for rev, n in waiting.items() if n > 0})
            raise RevisionCycleError(
                f"the revisions form a cycle: {' -> '.join(cycle)}; a revision's down_revision "
                "must name an earlier revision"
            )
        return order

    def _a_cycle(self, stuck: set[str]) -> list[str]:
        """One cycle among ``stuck`` (revisions Kahn's algorithm could not order), as a path."""
        rev = min(stuck)
        seen: list[str] = []
        while rev not in seen:
            seen.append(rev)
            rev = min(p for p in self._parents[rev] if p in stuck)
        cycle = seen[seen.index(rev):]
        return [*reversed(cycle), cycle[-1]]

    def ancestors(self, rev: str) -> set[str]:
        """``rev`` and every revision it descends from."""
        return self._walk([rev], self._parents)

    def descendants(self, rev: str) -> set[str]:
        """``rev`` and every revision descending from it."""
        return self._walk([rev], self._children)

    def _walk(self, start: Iterable[str], edges: Mapping[str, Sequence[str]]) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            rev = todo.pop()
            if rev not in seen:
                seen.add(rev)
                todo.extend(edges[rev])
        return seen

    # -- applied sets -------------------------------------------------------------------------

    def closure(self, applied: Collection[str]) -> set[str]:
        """The applied revisions with their ancestors (an ancestor of an applied one is applied)."""
        for rev in applied:
            self._require(rev)
        return self._walk(applied, self._parents)

    def current_heads(self, applied: Collection[str]) -> tuple[str, ...]:
        """The applied revisions no other applied revision descends from."""
        done = self.closure(applied)
        return tuple(sorted(r for r in done if not any(c in done for c in self._children[r])))

    def upgrade_path(self, applied: Collection[str], target: str) -> list[str]:
        """The revisions to run, in order, to reach ``target`` (its ancestors not yet applied)."""
        self._require(target)
        pending = self.ancestors(target) - self.closure(applied)
        return [rev for rev in self._order if rev in pending]

    def downgrade_path(self, applied: Collection[str], target: str | None) -> list[str]:
        """The revisions to undo, in order (children first), to go back to ``target``; ``None``
        is the base (undo everything)."""
        keep = self.ancestors(target) if target is not None else set()
        undo = self.closure(applied) - keep
        return [rev for rev in reversed(self._order) if rev in undo]

    # -- specs --------------------------------------------------------------------------------

    def _require(self, rev: str) -> None:
        if rev not in self._parents:
            raise UnknownRevisionError(f"unknown revision {rev!r}; {self._known()}")

    def _known(self) -> str:
        if not self._parents:
            return "there are no revisions yet (tsmigrate revision -m MESSAGE writes the first)"
        heads = ", ".join(self.heads)
        return f"`tsmigrate history` lists them (head{'s' if len(self.heads) != 1 else ''}: {heads})"

    def lookup(self, spec: str) -> str:
        """The revision a full id or an unambiguous prefix names."""
        if spec in self._parents:
            return spec
        matches = sorted(rev for rev in self._parents if rev.startswith(spec)) if spec else []
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise AmbiguousRevisionError(
                f"revision prefix {spec!r} matches {len(matches)} revisions: {', '.join(matches)}; "
                "give more characters"
            )
        raise UnknownRevisionError(f"unknown revision {spec!r}; {self._known()}")

    def single_head(self, why: str = "") -> str | None:
        """The one head (None when there are no revisions); MultipleHeadsError otherwise."""
        heads = self.heads
        if len(heads) > 1:
            raise MultipleHeadsError(
                f"the revisions have {len(heads)} heads ({', '.join(heads)}){why}; run "
                f"`tsmigrate merge {' '.join(heads)}` to join them, or name one revision"
            )
        return heads[0] if heads else None

    def resolve(self, spec: str, applied: Collection[str] = ()) -> str | None:
        """The revision ``spec`` names (None: the base, before every revision)."""
        spec = spec.strip()
        if spec in ("head", "heads"):
            head = self.single_head(" and 'head' needs one")
            if head is None:
                raise UnknownRevisionError(f"'head' names no revision: {self._known()}")
            return head
        if spec == "base":
            return None
        relative = _RELATIVE.match(spec)
        if relative and spec not in self._parents:
            start = self.lookup(relative["rev"]) if relative["rev"] else self._current(applied)
            steps = int(relative["n"])
            return self._step(start, steps if relative["sign"] == "+" else -steps, spec)
        return self.lookup(spec)

    def _current(self, applied: Collection[str]) -> str | None:
        heads = self.current_heads(applied)
        if len(heads) > 1:
            raise MultipleHeadsError(
                f"the instance is at {len(heads)} heads ({', '.join(heads)}), so a relative step "
                "is ambiguous; name a revision (REV+N, REV-N) instead"
            )
        return heads[0] if heads else None

    def _step(self, start: str | None, steps: int, spec: str) -> str | None:
        rev = start
        for taken in range(abs(steps)):
            if steps > 0:
                nxt = self.bases if rev is None else self.children(rev)
            else:
                nxt = () if rev is None else self.parents(rev)
                if rev is not None and not nxt:  # one step down from a base is the base
                    if taken == abs(steps) - 1:
                        return None
                    raise UnknownRevisionError(
                        f"{spec!r} goes {abs(steps)} revisions down, but {start or 'base'} has "
                        f"only {taken + 1} below it (base included)"
                    )
            if not nxt:
                where = f"{rev} is a head" if rev else "there are no revisions"
                raise UnknownRevisionError(
                    f"{spec!r} goes {abs(steps)} revisions {'up' if steps > 0 else 'down'}, but "
                    f"{where} after {taken} step{'s' if taken != 1 else ''}"
                )
            if len(nxt) > 1:
                direction = "children" if steps > 0 else "parents"
                raise AmbiguousRevisionError(
                    f"{spec!r} is ambiguous: {rev or 'base'} has {len(nxt)} {direction} "
                    f"({', '.join(nxt)}); name a revision instead"
                )
            rev = nxt[0]
        return rev
