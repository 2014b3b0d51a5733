"""Skills: SKILL.md files in a skills folder, injected into an agent's system prompt only
when its spec allows them.

    <skills dir>/<name>/SKILL.md        (default dir: $CLAWTOWER_HOME/skills)
    ---
    name: release-notes
    description: How we write release notes.
    tools: [text.count]                 # optional: tools the skill relies on
    ---
    Body: the instructions the model gets.

A skill that relies on a tool the spec does not allow is not injected either (never
"listed but unusable"); `SkillSet.for_policy` says which were left out and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import home
from ..errors import ValidationError
from ..safe_yaml import loads
from ..tools.registry import allowed

MAX_SKILL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    tools: tuple[str, ...] = ()
    path: str = ""


@dataclass
class SkillChoice:
    injected: list[Skill] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # name -> why

    def prompt(self) -> str:
        if not self.injected:
            return ""
        parts = ["# Skills"]
        for s in self.injected:
            parts.append(f"## {s.name}\n{s.description}\n\n{s.body.strip()}")
        return "\n\n".join(parts)


@dataclass
class SkillSet:
    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # files that could not be read

    def for_policy(self, allow: Sequence[str] | None, tools: Sequence[str] | None
                   ) -> SkillChoice:
        """The skills a spec's `policy.skills` allows (None: all), minus those needing a
        tool its `policy.tools` does not allow."""
        choice = SkillChoice()
        for name in sorted(self.skills):
            skill = self.skills[name]
            if allow is not None and name not in allow:
                continue
            missing = [t for t in skill.tools if not allowed(t, tools)]
            if missing:
                choice.left_out[name] = f"needs tool(s) not allowed: {', '.join(missing)}"
                continue
            choice.injected.append(skill)
        return choice


def _parse(path: Path) -> Skill:
    raw = path.read_bytes()
    if len(raw) > MAX_SKILL_BYTES:
        raise ValueError(f"larger than {MAX_SKILL_BYTES} bytes")
    text = raw.decode("utf-8")
    meta: dict[str, object] = {}
    body = text
    if text.startswith("---"):
        head, sep, rest = text[3:].partition("\n---")
        if not sep:
            raise ValueError("front matter not closed by '---'")
        loaded = loads(head, str(path)) or {}
        if not isinstance(loaded, dict):
            raise ValueError("front matter must be a mapping")
        meta = loaded
        body = rest.partition("\n")[2]
    name = str(meta.get("name") or path.parent.name)
    tools = meta.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ValueError("field 'tools': must be a list of tool names")
    return Skill(name=name, description=str(meta.get("description") or ""), body=body,
                 tools=tuple(tools), path=str(path))


def load_skills(folder: str | Path | None = None) -> SkillSet:
    """Every `<folder>/*/SKILL.md` (a missing folder is an empty set; a bad file is reported
    in `problems` and skipped)."""
    root = Path(folder) if folder is not None else home() / "skills"
    out = SkillSet()
    if not root.is_dir():
        return out
    for path in sorted(root.glob("*/SKILL.md")):
        try:
            skill = _parse(path)
        except (OSError, ValueError, ValidationError) as exc:
            out.problems.append(f"{path}: {exc}")
            continue
        out.skills[skill.name] = skill
    return out


__all__ = ["Skill", "SkillChoice", "SkillSet", "load_skills"]
