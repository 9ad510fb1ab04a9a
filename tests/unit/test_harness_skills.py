"""The system prompt's skills block: each skill's name, description and the
path of its SKILL.md, after the agent's own prompt, with the cache breakpoint
on the last block; no skills, no block."""

from __future__ import annotations

from typing import Any

from stead.harness import SkillPrompt, build_request

AGENT: dict[str, Any] = {"model": {"id": "claude-test"}, "system": "Be brief.", "tools": []}
LOG = [{"id": "sevt_1", "type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
SKILLS = (SkillPrompt("pdf-tools", "Fills PDFs & forms."), SkillPrompt("xlsx", "Spreadsheets."))


def test_skills_follow_the_agent_prompt_with_the_cache_breakpoint_last() -> None:
    request = build_request(AGENT, LOG, {}, max_tokens=10, skills=SKILLS)
    assert request.system is not None
    first, second = request.system
    assert first == {"type": "text", "text": "Be brief."}
    assert second["cache_control"] == {"type": "ephemeral"}
    text = second["text"]
    assert "<name>pdf-tools</name>" in text
    assert "<description>Fills PDFs &amp; forms.</description>" in text
    assert "<location>/workspace/skills/pdf-tools/SKILL.md</location>" in text
    assert text.index("pdf-tools") < text.index("<name>xlsx</name>")
    assert build_request(AGENT, LOG, {}, max_tokens=10, skills=SKILLS) == request


def test_without_skills_the_system_prompt_is_the_agents_alone() -> None:
    request = build_request(AGENT, LOG, {}, max_tokens=10)
    assert request.system == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert build_request({**AGENT, "system": None}, LOG, {}, max_tokens=10).system is None
    only = build_request({**AGENT, "system": None}, LOG, {}, max_tokens=10, skills=SKILLS[:1])
    assert only.system is not None and len(only.system) == 1
    assert "<available_skills>" in only.system[0]["text"]
