"""Per-role response budgets (`rollout.max_new_tokens_per_role`, `atgrpo.config.budgets`): keys are
checked against the task's roles and agents, each agent resolves to one budget, and the engines leave
room for the longest."""

from __future__ import annotations

import pytest

from atgrpo.config import dump_config, load_config
from atgrpo.engines.factory import sequence_budget
from atgrpo.models.folder import ModelFacts


def test_a_role_gets_its_own_budget_and_the_others_the_default() -> None:
    cfg = load_config(None, ["rollout.max_new_tokens_per_role={tool=256}"])
    assert cfg.agent_max_new_tokens() == {"tool": 256, "plan": 32}
    assert load_config(None, []).agent_max_new_tokens() == {"tool": 32, "plan": 32}


def test_an_agents_own_entry_wins_over_its_roles() -> None:
    cfg = load_config(
        None,
        [
            'task.task="math"',
            "task.team={tool=1,reasoner=2}",
            "rollout.max_new_tokens_per_role={reasoner=64,reasoner_2=96}",
        ],
    )
    assert cfg.agent_max_new_tokens() == {"tool": 32, "reasoner_1": 64, "reasoner_2": 96}


def test_an_unknown_role_is_refused_with_the_names_it_could_be() -> None:
    with pytest.raises(ValueError, match=r"\['planner'\] name no role of task planpath \(roles \['plan', 'tool'\]\)"):
        load_config(None, ["rollout.max_new_tokens_per_role={planner=64}"])
    with pytest.raises(ValueError, match="must be >= 1"):
        load_config(None, ["rollout.max_new_tokens_per_role={tool=0}"])


def test_a_role_this_line_up_does_not_field_is_let_be() -> None:
    # One file serves the team and the single-agent arm (as role_policy does).
    cfg = load_config(None, ['task.roles=["plan"]', "rollout.max_new_tokens_per_role={tool=256}"])
    assert cfg.agent_max_new_tokens() == {"plan": 32}


def test_engines_hold_the_longest_budget_within_the_context() -> None:
    cfg = load_config(None, ["rollout.max_new_tokens_per_role={tool=256}", "rollout.max_prompt_tokens=200"])
    assert cfg.rollout.longest_response == 256
    facts = ModelFacts(stop_token_ids=(1,), pad_token_id=0, context_length=None)
    assert sequence_budget(facts, cfg.rollout) == 456
    assert sequence_budget(ModelFacts((1,), 0, 384), cfg.rollout) == 384


def test_budgets_survive_the_resolved_config(tmp_path) -> None:
    cfg = load_config(None, ["rollout.max_new_tokens_per_role={tool=256}"])
    (tmp_path / "config.toml").write_text(dump_config(cfg))
    assert load_config(tmp_path / "config.toml") == cfg
