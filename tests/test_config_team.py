"""`task.team` and the agents of a team (atgrpo.config.task): names, turn order, validation, a policy per
agent, the round trip, and the shipped example envs/math/team.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from atgrpo.config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
MATH = ["task.task=math"]


def names(cfg: RunConfig) -> list[str]:
    return [a.name for a in cfg.task.agents()]


def test_a_team_of_one_per_role_is_its_roles():
    for sets in ([], ['task.roles=["reasoner"]'], ['task.roles=["reasoner", "tool"]']):
        cfg = load_config(None, MATH + sets)
        assert names(cfg) == cfg.task.roles and cfg.task.team is None
        assert cfg.agent_policy() == {r: "shared" for r in cfg.task.roles}
    assert names(load_config(None, ["task.task=code"])) == ["coder", "tester"]


def test_team_agents_in_turn_order_with_the_judge_last():
    cfg = load_config(None, MATH + ["task.team={judge=1, reasoner=3, tool=2}"])
    assert cfg.task.roles == ["tool", "reasoner", "judge"]
    assert names(cfg) == ["tool_1", "tool_2", "reasoner_1", "reasoner_2", "reasoner_3", "judge"]
    assert [(a.role, a.index) for a in cfg.task.agents()][1:3] == [("tool", 1), ("reasoner", 0)]
    assert cfg.role_policy == {"tool": "shared", "reasoner": "shared", "judge": "shared"}
    given = load_config(
        None, MATH + ["task.team={judge=1, reasoner=2, tool=1}", 'task.roles=["reasoner", "tool", "judge"]']
    )
    assert names(given) == ["reasoner_1", "reasoner_2", "tool", "judge"]
    assert names(load_config(None, MATH + ['task.roles=["tool", "reasoner", "judge"]'])) == [
        "tool",
        "reasoner",
        "judge",
    ]


@pytest.mark.parametrize(
    "sets",
    [
        ["task.team={reasoner=3, judge=2}"],  # one judge at most
        ["task.team={reasoner=0, tool=1}"],
        ["task.team={reasoner=17}"],
        ["task.team={judge=1}"],  # nobody answers
        ["task.team={reasoner=2, planner=1}"],
        ['task.roles=["judge", "reasoner"]'],  # the judge acts last
        ["task.team={reasoner=2, tool=1}", 'task.roles=["reasoner"]'],  # team and roles name other roles
        ["task.team={reasoner=2}", 'role_policy={reasoner_9="shared"}'],  # no such agent
    ],
)
def test_bad_teams_are_refused(sets):
    with pytest.raises(ValueError):
        load_config(None, MATH + sets)


def test_teams_only_where_the_workflow_takes_them():
    with pytest.raises(ValueError, match="one agent per role"):
        load_config(None, ["task.task=code", "task.team={coder=2, tester=1}"])
    with pytest.raises(ValueError):
        load_config(None, ['task.roles=["tool", "plan", "judge"]'])


def test_a_policy_per_agent_and_unused_policies():
    sets = MATH + ["task.team={reasoner=2, tool=1}", "policies={a={}, b={}}"]
    cfg = load_config(None, sets + ['role_policy={tool="a", reasoner="a", reasoner_2="b"}'])
    assert cfg.agent_policy() == {"tool": "a", "reasoner_1": "a", "reasoner_2": "b"}
    assert cfg.roles_of("b") == ["reasoner"] and cfg.roles_of("a") == ["tool", "reasoner"]
    with pytest.raises(ValueError, match="serve no role"):  # every agent overridden: b serves nobody
        load_config(None, sets + ['role_policy={tool="a", reasoner="b", reasoner_1="a", reasoner_2="a"}'])
    with pytest.raises(ValueError, match="without a policy"):
        load_config(None, sets + ['role_policy={tool="a", reasoner_2="b"}'])


def test_team_round_trips_and_the_example_config(tmp_path: Path):
    cfg = load_config(ROOT / "envs/math/team.toml")
    assert cfg.task.team == {"tool": 1, "reasoner": 3, "judge": 1} and len(cfg.task.agents()) == 5
    (tmp_path / "c.toml").write_text(cfg.to_toml())
    assert load_config(tmp_path / "c.toml") == cfg
