"""A property of the one approver rule with widening: whatever the ladder widened to, the evidence an
approval records allows only a person the rule names (listed, a member of a listed group, a widened
id, a member of a widened group), and the gate's re-check accepts exactly that evidence; the requester
is refused before the rule on every path (tests/escalation/test_ladder_runner.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.decisions._proof import approval_evidence, evidence_problem

USERS = [f"U0{i}" for i in range(6)]
GROUPS = [f"S0{i}" for i in range(3)]


class Directory:
    def __init__(self, members: dict[str, set[str]]) -> None:
        self.groups = members

    def members(self, group_id: str) -> set[str]:
        return self.groups.get(group_id, set())


ids = st.lists(st.sampled_from(USERS + GROUPS), max_size=4, unique=True)
membership = st.dictionaries(st.sampled_from(GROUPS), st.sets(st.sampled_from(USERS), max_size=4), max_size=3)


@given(approvers=ids, widened=ids, groups=membership, actor=st.sampled_from(USERS))
def test_widened_evidence_allows_only_the_named(
    approvers: list[str], widened: list[str], groups: dict[str, set[str]], actor: str
) -> None:
    directory = Directory(groups)
    evidence, _problem = approval_evidence(actor, approvers, directory, widened)
    named = (
        not approvers
        or actor in approvers
        or any(actor in groups.get(g, set()) for g in approvers if g.startswith("S"))
        or actor in widened
        or any(actor in groups.get(g, set()) for g in widened if g.startswith("S"))
    )
    assert (evidence is not None) == named
    if evidence is None:
        return
    assert evidence_problem(actor, evidence, approvers, widened) is None  # the gate accepts what was recorded
    if evidence.get("kind") == "widened":
        assert evidence_problem(actor, evidence, approvers, ()) is not None  # not without the chain's widening
        other = next(u for u in USERS if u != actor)
        assert evidence_problem(other, evidence, approvers, widened) is not None  # nor for anyone else
