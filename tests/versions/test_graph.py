"""The revision graph: hypothesis over random DAGs, and each typed error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scriptdir import dags

from tsmigrate.versions.errors import (
    AmbiguousRevisionError,
    MissingParentError,
    MultipleHeadsError,
    RevisionCycleError,
    UnknownRevisionError,
)
from tsmigrate.versions.graph import RevisionGraph


def _is_topological(graph: RevisionGraph, order: list[str]) -> bool:
    position = {rev: i for i, rev in enumerate(order)}
    return all(position[p] < position[r] for r in order for p in graph.parents(r))


@given(dags())
@pytest.mark.slow
def test_topological_order_puts_parents_first_and_is_stable(parents):
    graph = RevisionGraph(parents)
    order = graph.topological()
    assert sorted(order) == sorted(parents)
    assert _is_topological(graph, order)
    # Building the graph from the same edges in another order gives the same order.
    assert RevisionGraph(dict(reversed(list(parents.items())))).topological() == order


@given(dags())
def test_heads_and_bases(parents):
    graph = RevisionGraph(parents)
    referenced = {p for ps in parents.values() for p in ps}
    assert set(graph.heads) == set(parents) - referenced
    assert set(graph.bases) == {r for r, ps in parents.items() if not ps}
    # Every revision is an ancestor of some head.
    covered = set().union(*(graph.ancestors(h) for h in graph.heads)) if parents else set()
    assert covered == set(parents)


@given(dags(), st.data())
@pytest.mark.slow
def test_upgrade_then_downgrade_paths(parents, data):
    graph = RevisionGraph(parents)
    if not parents:
        return
    revs = sorted(parents)
    applied = set(data.draw(st.lists(st.sampled_from(revs), max_size=3)))
    target = data.draw(st.sampled_from(revs))
    done = graph.closure(applied)
    up = graph.upgrade_path(applied, target)
    # Runs exactly the target's ancestors not applied yet, each after its parents.
    assert set(up) == graph.ancestors(target) - done
    assert len(up) == len(set(up))
    after = done | set(up)
    assert all(set(graph.parents(r)) <= after for r in up)
    for i, rev in enumerate(up):
        assert set(graph.parents(rev)) <= done | set(up[:i])
    # Downgrading back to the target undoes everything applied that is not its ancestor,
    # children before parents, and leaves a set closed under ancestors.
    down = graph.downgrade_path(after, target)
    remaining = after - set(down)
    assert remaining == graph.ancestors(target)
    for i, rev in enumerate(down):
        later = set(down[i + 1:])
        assert not (set(graph.children(rev)) & later), "a child undone after its parent"
    assert graph.downgrade_path(after, None) == [r for r in reversed(graph.topological()) if r in after]


@given(dags())
@pytest.mark.slow
def test_current_heads_of_a_closure(parents):
    graph = RevisionGraph(parents)
    for head in graph.heads:
        assert graph.current_heads([head]) == (head,)
        assert graph.current_heads(graph.ancestors(head)) == (head,)
    assert graph.current_heads(set(parents)) == graph.heads


@given(dags())
@pytest.mark.slow
def test_every_revision_resolves_from_a_unique_prefix(parents):
    graph = RevisionGraph(parents)
    for rev in parents:
        assert graph.resolve(rev) == rev
        unique = [rev[:n] for n in range(1, len(rev) + 1)
                  if sum(r.startswith(rev[:n]) for r in parents) == 1]
        # An id that begins another one ("0000", "00000") has no unique prefix: its full id,
        # an exact match, names it (resolve above).
        if unique:
            assert graph.lookup(unique[0]) == rev
        else:
            assert any(r != rev and r.startswith(rev) for r in parents)


def chain(n: int) -> RevisionGraph:
    return RevisionGraph({f"r{i}": (f"r{i - 1}",) if i else () for i in range(n)})


def test_relative_specs_on_a_chain():
    graph = chain(5)
    assert graph.resolve("head") == "r4"
    assert graph.resolve("base") is None
    assert graph.resolve("+1") == "r0"  # nothing applied: one up from the base
    assert graph.resolve("+2", applied=["r1"]) == "r3"
    assert graph.resolve("-1", applied=["r3"]) == "r2"
    assert graph.resolve("-1", applied=["r0"]) is None  # back to the base
    assert graph.resolve("r1+2") == "r3"
    assert graph.resolve("r4-4") == "r0"
    with pytest.raises(UnknownRevisionError, match=r"r4 is a head after 0 steps"):
        graph.resolve("+1", applied=["r4"])
    with pytest.raises(UnknownRevisionError, match=r"only 2 below it"):
        graph.resolve("-3", applied=["r1"])


def test_branches_merges_and_their_errors():
    graph = RevisionGraph({"a1": (), "b1": ("a1",), "b2": ("a1",), "m": ("b1", "b2")})
    assert graph.heads == ("m",)
    assert graph.upgrade_path(["b1"], "m") == ["b2", "m"]
    assert graph.downgrade_path(["m"], "b1") == ["m", "b2"]
    with pytest.raises(AmbiguousRevisionError, match=r"a1 has 2 children"):
        graph.resolve("+2")
    with pytest.raises(AmbiguousRevisionError, match=r"m has 2 parents"):
        graph.resolve("-2", applied=["m"])
    with pytest.raises(MultipleHeadsError, match=r"relative step is ambiguous"):
        graph.resolve("+1", applied=["b1", "b2"])
    split = RevisionGraph({"a1": (), "b1": ("a1",), "b2": ("a1",)})
    with pytest.raises(MultipleHeadsError, match=r"2 heads \(b1, b2\).*tsmigrate merge b1 b2"):
        split.resolve("head")


def test_lookup_errors():
    graph = RevisionGraph({"abc1": (), "abc2": ("abc1",)})
    with pytest.raises(AmbiguousRevisionError, match=r"'abc' matches 2 revisions: abc1, abc2"):
        graph.lookup("abc")
    with pytest.raises(UnknownRevisionError, match=r"unknown revision 'zz'.*head: abc2"):
        graph.resolve("zz")
    with pytest.raises(UnknownRevisionError, match=r"no revisions yet"):
        RevisionGraph({}).resolve("head")


def test_missing_parent_and_cycle():
    with pytest.raises(MissingParentError, match=r"revision b names parent 'a0'.*did you mean 'a'"):
        RevisionGraph({"a": (), "b": ("a0",)})
    with pytest.raises(RevisionCycleError, match=r"cycle: (x -> y -> x|y -> x -> y)"):
        RevisionGraph({"base": (), "x": ("y",), "y": ("x",)})
    with pytest.raises(RevisionCycleError):
        RevisionGraph({"s": ("s",)})


@given(st.integers(1, 12), st.data())
def test_relative_steps_walk_a_chain(length, data):
    graph = chain(length)
    start = data.draw(st.integers(-1, length - 1))  # -1: nothing applied
    applied = [f"r{start}"] if start >= 0 else []
    up = data.draw(st.integers(1, length))
    if start + up < length:
        assert graph.resolve(f"+{up}", applied) == f"r{start + up}"
        assert len(graph.upgrade_path(applied, f"r{start + up}")) == up
    else:
        with pytest.raises(UnknownRevisionError):
            graph.resolve(f"+{up}", applied)
    if start >= 0:
        down = data.draw(st.integers(1, length))
        if down <= start + 1:
            expected = f"r{start - down}" if down <= start else None
            assert graph.resolve(f"-{down}", applied) == expected
            assert len(graph.downgrade_path(applied, expected)) == down
        else:
            with pytest.raises(UnknownRevisionError):
                graph.resolve(f"-{down}", applied)
