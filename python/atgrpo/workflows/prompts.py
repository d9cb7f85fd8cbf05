"""Prompt templates per task and role, read from `envs/<task>/prompts/<style>/`.

Templates are `str.format` strings with the fields `obs` (the env's rendering), `info` (a short,
task-specific summary such as coordinates, ending in a newline, or empty), `turn`, `turns` and, for
the plan agent, `tool_section` (the `tool_view` template filled with the tool agent's chosen answer
and its simulated outcome; empty in single-agent runs). In program mode the plan agent's view of
the tool is the optional `program_view` template instead, with the fields `tool_output` (what the
program printed, or why it printed nothing) and `tool_result`. `compact` templates are for the small
built-in model (character tokenizer, short prompts); `paper` templates are the paper-style
instructions for real chat models and are wrapped in the tokenizer's chat template
(`encode_prompt`). `compact_turn` (games) is `compact` with the turn number. Whatever one agent is
shown of another's output is cut (`clip`), so prompts stay bounded whatever the model writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROLE_FILES = ("tool", "plan", "tool_view")
OPTIONAL_FILES = ("program_view",)
"""Templates a task pack may leave out: `program_view` exists only where program mode does."""
FEEDBACK_CHARS = 1500
"""Anything one agent is shown of another's output is cut to this many characters (bounded prompts)."""
COMPACT_CHARS = 200
"""The same limit for the compact templates (the tiny model's character tokenizer, short context)."""


def clip(text: str, limit: int = FEEDBACK_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "\n...[truncated]"


def encode_prompt(tokenizer, text: str, chat: bool, thinking: bool | None = None) -> list[int]:
    """Token ids of a prompt: the tokenizer's chat template when `chat` and it has one, else plain text.
    `thinking` is the template's `enable_thinking` (Qwen3's switch; `policies.<p>.thinking`); None
    passes nothing, leaving the template's own default. Templates that do not read it ignore it."""
    if chat and getattr(tokenizer, "chat_template", None):
        # Render to text, then encode: what `apply_chat_template(tokenize=True)` returns differs between
        # transformers versions (a list, or a BatchEncoding whose list() is its keys). The template
        # writes its own special tokens, so encoding adds none.
        extra = {} if thinking is None else {"enable_thinking": thinking}
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False, **extra
        )
    ids = tokenizer.encode(text, add_special_tokens=False)
    return [int(t) for t in ids]


def envs_dir() -> Path:
    """The task-pack folder: `$ATGRPO_ENVS_DIR`, else `envs/` of the source checkout."""
    override = os.environ.get("ATGRPO_ENVS_DIR")
    path = Path(override) if override else Path(__file__).resolve().parents[3] / "envs"
    if not path.is_dir():
        raise FileNotFoundError(f"task packs not found at {path}; set ATGRPO_ENVS_DIR to the repo's envs/ folder")
    return path


@dataclass(frozen=True)
class Templates:
    style: str
    tool: str
    plan: str
    tool_view: str
    program_view: str | None = None

    def answer_text(self, solver_plan: str) -> str:
        """A solver answer (`#### [U, R]` or `####\\n<grid>`) in this style's answer format."""
        if self.style != "paper":
            return solver_plan.replace("####", "").replace(" ", "").strip()
        return solver_plan


def read_templates(task: str, style: str, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, str]:
    """`envs/<task>/prompts/<style>/<name>.txt` for each name; a missing file is an error naming it.
    Each of `optional` is read where its file exists and left out where not."""
    folder = envs_dir() / task / "prompts" / style
    texts = {}
    for name in (*names, *optional):
        file = folder / f"{name}.txt"
        if file.is_file():
            texts[name] = file.read_text()
        elif name not in optional:
            raise FileNotFoundError(f"prompt template {file} is missing")
    return texts


@lru_cache(maxsize=None)
def load_templates(task: str, style: str) -> Templates:
    return Templates(style=style, **read_templates(task, style, ROLE_FILES, OPTIONAL_FILES))


def agent_and_goal(obs: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The (row, column) cells of `A` and `G` in a Plan-Path rendering; None when either is missing.
    The prompts' `A=r,c G=r,c` line and the program demos' literal coordinates both come from here."""
    found = {}
    for r, line in enumerate(obs.splitlines()):
        for ch in "AG":
            c = line.find(ch)
            if c >= 0:
                found[ch] = (r, c)
    return (found["A"], found["G"]) if len(found) == 2 else None


def planpath_info(obs: str) -> str:
    """Coordinates of the agent and the goal (row, column), which a small model cannot easily count."""
    cells = agent_and_goal(obs)
    if cells is None:
        return ""
    (ar, ac), (gr, gc) = cells
    return f"A={ar},{ac} G={gr},{gc}\n"


INFO = {"planpath": planpath_info}


def task_info(task: str, obs: str) -> str:
    fn = INFO.get(task)
    return fn(obs) if fn else ""
