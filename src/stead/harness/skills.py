"""How an agent's skills are described to the model: a system prompt block that
lists each skill's name, description and the path of its ``SKILL.md``, as the
reference toolset does, so the model reads a skill's instructions only when
the work calls for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

SKILLS_ROOT = "/workspace/skills"
"""Where a session's sandbox has each skill's files, read-only, under its name."""


@dataclass(frozen=True, slots=True)
class SkillPrompt:
    name: str
    description: str

    @property
    def location(self) -> str:
        return f"{SKILLS_ROOT}/{self.name}/SKILL.md"


def skills_prompt(skills: Sequence[SkillPrompt]) -> str | None:
    """The system prompt text for ``skills`` (None when there are none)."""
    if not skills:
        return None
    listed = "\n".join(
        "<skill>\n"
        f"<name>{escape(s.name, quote=False)}</name>\n"
        f"<description>{escape(s.description, quote=False)}</description>\n"
        f"<location>{escape(s.location, quote=False)}</location>\n"
        "</skill>"
        for s in skills
    )
    return (
        "You have skills: folders of instructions, scripts and resources for "
        "particular kinds of work. When a task matches a skill's description, "
        "read its SKILL.md at the location given (with the read tool, or cat) "
        "before you start, and follow it; the skill's other files are beside it.\n"
        f"<available_skills>\n{listed}\n</available_skills>"
    )
