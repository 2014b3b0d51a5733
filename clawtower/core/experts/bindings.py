"""Tool bindings: abstract package tools -> concrete MCP servers (or skills), per user.

They live outside the package (`$CLAWTOWER_HOME/expert-config/<name>/bindings.yaml`) so an
update never touches them. A binding may map an abstract operation to a differently named
MCP tool (`operations: {get_contact: find_person}`), rename its arguments
(`{tool: find_person, args: {email: address}}`) and say where the compiled workflow takes an
input from when no earlier value has the same name (`inputs: {email: from}`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticError

from .. import config, files
from ..errors import ValidationError
from ..safe_yaml import load_file, loads
from ..tools.config import McpServerConfig


@dataclass
class OpBinding:
    tool: str
    args: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)


@dataclass
class ToolBinding:
    name: str
    type: str
    server: McpServerConfig | None = None
    skill: str = ""
    operations: dict[str, OpBinding] = field(default_factory=dict)

    def op(self, name: str) -> OpBinding:
        return self.operations.get(name) or OpBinding(tool=name)


def bindings_path(expert: str) -> Path:
    return config.home() / "expert-config" / expert / "bindings.yaml"


def load_bindings(path: str | os.PathLike[str]) -> dict[str, ToolBinding]:
    """Parse a bindings file; a problem raises ValidationError naming file and field."""
    p = Path(path)
    if not p.exists():
        return {}
    return _parsed(p, load_file(p))


def parse(text: str, p: Path) -> dict[str, ToolBinding]:
    """The bindings in `text` (a bindings file's new content), checked as `load_bindings`
    checks the file: what a write validates before it touches the file."""
    return _parsed(p, loads(text, str(p)))


def _parsed(p: Path, data: Any) -> dict[str, ToolBinding]:
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("tools", {}), dict):
        raise ValidationError(f"{p}:tools: must be a mapping of tool name to binding")
    out: dict[str, ToolBinding] = {}
    for name, raw in (data.get("tools") or {}).items():
        out[str(name)] = _binding(p, str(name), raw)
    return out


def _binding(p: Path, name: str, raw: Any) -> ToolBinding:
    where = f"{p}:tools.{name}"
    if not isinstance(raw, dict):
        raise ValidationError(f"{where}: must be a mapping")
    kind = raw.get("type")
    ops: dict[str, OpBinding] = {}
    rops = raw.get("operations") or {}
    if not isinstance(rops, dict):
        raise ValidationError(f"{where}.operations: must be a mapping")
    for op, val in rops.items():
        if isinstance(val, str):
            ops[str(op)] = OpBinding(tool=val)
        elif isinstance(val, dict):
            t = val.get("tool", op)
            a, i = val.get("args") or {}, val.get("inputs") or {}
            if not isinstance(t, str) or not isinstance(a, dict) or not isinstance(i, dict):
                raise ValidationError(f"{where}.operations.{op}: tool must be a string, args"
                                      " and inputs mappings")
            ops[str(op)] = OpBinding(tool=t, args={str(k): str(v) for k, v in a.items()},
                                     inputs={str(k): str(v) for k, v in i.items()})
        else:
            raise ValidationError(f"{where}.operations.{op}: must be a tool name or mapping")
    if kind == "mcp":
        fields = {k: raw[k] for k in ("command", "args", "env", "cwd", "connect_timeout_s",
                                      "call_timeout_s", "list_timeout_s", "pin") if k in raw}
        try:
            server = McpServerConfig(name=str(raw.get("server") or name), **fields)
        except PydanticError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ValidationError(f"{where}.{loc}: {err['msg']}") from None
        return ToolBinding(name, "mcp", server=server, operations=ops)
    if kind == "skill":
        skill = raw.get("skill")
        if not isinstance(skill, str) or not skill:
            raise ValidationError(f"{where}.skill: required for type: skill")
        return ToolBinding(name, "skill", skill=skill, operations=ops)
    raise ValidationError(f"{where}.type: must be mcp or skill (got {kind!r})")


def absolute_paths(raw: dict[str, Any], base: str | os.PathLike[str] | None = None
                   ) -> dict[str, Any]:
    """An MCP binding with its relative paths made absolute against `base` (the current
    directory), so it works wherever it is used later (`serve`, a console, another shell):
    the command when it is a path (`.venv/bin/python`; a bare name such as `python3` is looked
    up on PATH when the server starts), each argument that names an existing file or folder,
    and `cwd`. Symlinks are kept (a venv's python is one)."""
    if raw.get("type") != "mcp":
        return raw
    root = Path(base) if base is not None else Path.cwd()
    out = dict(raw)

    def absolute(value: str) -> str:
        return os.path.normpath(root / value)

    cmd = out.get("command")
    if isinstance(cmd, str) and "/" in cmd and not cmd.startswith(("/", "~")):
        out["command"] = absolute(cmd)
    args = out.get("args")
    if isinstance(args, list):
        out["args"] = [absolute(a) if isinstance(a, str) and a and not a.startswith(("/", "~", "-"))
                       and (root / a).exists() else a for a in args]
    cwd = out.get("cwd")
    if isinstance(cwd, str) and cwd and not cwd.startswith(("/", "~")):
        out["cwd"] = absolute(cwd)
    return out


def write_binding(expert: str, tool: str, raw: dict[str, Any]) -> Path:
    """Set one tool's binding (checked first) in the expert's bindings file; relative paths
    are recorded absolute (`absolute_paths`)."""
    import yaml

    raw = absolute_paths(raw)
    p = bindings_path(expert)
    data: dict[str, Any] = {"tools": {}}
    if p.exists():
        loaded = load_file(p)
        if isinstance(loaded, dict) and isinstance(loaded.get("tools"), dict):
            data = loaded
    _binding(p, tool, raw)
    data["tools"][tool] = raw
    files.write_text(p, yaml.safe_dump(data, sort_keys=False), check=lambda t: parse(t, p))
    return p


async def check_bindings(required: list[str], ops: dict[str, list[str]],
                         bindings: dict[str, ToolBinding]) -> list[str]:
    """Problems with the bindings of `required` tools: unbound, unreachable MCP servers (they
    are started and asked for their tools), operations the server does not offer."""
    return [line for _, line in await binding_problems(required, ops, bindings)]


async def binding_problems(required: list[str], ops: dict[str, list[str]],
                           bindings: dict[str, ToolBinding]) -> list[tuple[str, str]]:
    """`check_bindings`, each problem with the tool whose binding it is."""
    from ..tools.mcp import McpServer, McpServerError

    out: list[tuple[str, str]] = []
    for tool in required:
        b = bindings.get(tool)
        if b is None:
            out.append((tool, f"bindings.yaml:tools.{tool}: not bound (clawtower expert bind)"))
            continue
        if b.type != "mcp" or b.server is None:
            out.append((tool, f"bindings.yaml:tools.{tool}: skill bindings cannot be executed by"
                              " compiled workflows here (no skill runtime); bind an MCP server"))
            continue
        server = McpServer(b.server)
        try:
            offered = {t.name for t in await server.list_tools()}
        except (McpServerError, ValidationError) as exc:
            out.append((tool, f"bindings.yaml:tools.{tool}: binding {tool}: its MCP server"
                              f" ({b.server.command}) cannot start or answer ({exc})"))
            continue
        finally:
            await server.aclose()
        for op in ops.get(tool, []):
            concrete = b.op(op).tool
            if concrete not in offered:
                out.append((tool, f"bindings.yaml:tools.{tool}.operations.{op}: the server has"
                                  f" no tool {concrete!r} (binding {tool})"))
    return out
