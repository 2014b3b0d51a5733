"""Load an openexperts package (markdown and YAML only) and validate it as spec 1.0 says.

`load_package` never raises on bad input: every problem becomes a `Problem` naming the file
and field (`file:field: message`), an error or a warning as the spec's section 14 grades it.
Files are read bounded (size, count, UTF-8, the safe YAML loader) and only from inside the
package directory: an absolute or `..` component path, or a symlink leading out, is an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ValidationError
from ..limits import NAME_RULE, is_name, printable
from ..safe_yaml import MAX_BYTES, loads
from . import checks as ck

MANIFEST = "expert.yaml"
MAX_COMPONENTS = 500
MAX_TOTAL_BYTES = 16 * MAX_BYTES
LIST_KINDS = ("persona", "functions", "processes", "tools", "knowledge", "state")
STEP_RE = re.compile(r"^\s*[-*]\s+\[( |x|X)\]\s+(.+?)\s*$")
CODE_RE = re.compile(r"`([^`]+)`")
OP_RE = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)$")

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        tag = "" if self.severity == "error" else "warning: "
        return f"{self.file}:{self.field}: {tag}{self.message}"


@dataclass
class Doc:
    """A markdown file: its path in the package, frontmatter (or {}) and body."""

    path: str
    meta: dict[str, Any]
    body: str

    @property
    def name(self) -> str:
        n = self.meta.get("name")
        return n if isinstance(n, str) and n else Path(self.path).stem

    @property
    def description(self) -> str:
        d = self.meta.get("description")
        return d if isinstance(d, str) else ""


@dataclass
class Step:
    index: int
    text: str
    done: bool


@dataclass
class Tool:
    path: str
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.data.get("name") or Path(self.path).stem)

    def operations(self) -> dict[str, dict[str, Any]]:
        ops = self.data.get("operations")
        out: dict[str, dict[str, Any]] = {}
        if isinstance(ops, list):
            for op in ops:
                if isinstance(op, dict) and isinstance(op.get("name"), str):
                    out[op["name"]] = op
        return out


@dataclass
class Package:
    root: Path
    manifest: dict[str, Any]
    orchestrator: str = ""
    readme: bool = False
    persona: list[Doc] = field(default_factory=list)
    functions: dict[str, Doc] = field(default_factory=dict)
    processes: dict[str, Doc] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    knowledge: dict[str, Doc] = field(default_factory=dict)
    state: dict[str, Doc] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", ""))

    @property
    def version(self) -> str:
        return str(self.manifest.get("version", ""))

    @property
    def description(self) -> str:
        return str(self.manifest.get("description", ""))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    def required_tools(self) -> list[str]:
        req = self.manifest.get("requires")
        tools = req.get("tools") if isinstance(req, dict) else None
        return [t for t in tools if isinstance(t, str)] if isinstance(tools, list) else []

    def triggers(self) -> list[dict[str, Any]]:
        t = self.manifest.get("triggers")
        return [x for x in t if isinstance(x, dict)] if isinstance(t, list) else []

    def section(self, key: str) -> dict[str, Any]:
        v = self.manifest.get(key)
        return v if isinstance(v, dict) else {}


def steps_of(body: str) -> list[Step]:
    """The checklist (`- [ ] Step ...`) of a process body, in order."""
    out: list[Step] = []
    fence = False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        m = None if fence else STEP_RE.match(line)
        if m:
            out.append(Step(len(out), m.group(2), m.group(1) != " "))
    return out


def operations_named(text: str) -> list[tuple[str, str]]:
    """`tool.operation` names written in backticks in a step."""
    out = []
    for code in CODE_RE.findall(text):
        m = OP_RE.match(code.strip())
        if m:
            out.append((m.group(1), m.group(2)))
    return out


class _Loader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.real = root.resolve()
        self.problems: list[Problem] = []
        self.total = 0

    def err(self, file: str, fld: str, msg: str) -> None:
        self.problems.append(Problem(file, fld, msg, "error"))

    def warn(self, file: str, fld: str, msg: str) -> None:
        self.problems.append(Problem(file, fld, msg, "warning"))

    # ------------------------------------------------------------ reading

    def safe_path(self, rel: Any, file: str, fld: str) -> Path | None:
        """`rel` inside the package (lexically and after symlinks), or None (reported)."""
        if not isinstance(rel, str) or not rel.strip():
            self.err(file, fld, f"must be a file path string (got {ck.type_name(rel)})")
            return None
        if "\x00" in rel or "\\" in rel:
            self.err(file, fld, f"{rel!r} is not a package-relative path")
            return None
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts:
            self.err(file, fld, f"{rel!r} points outside the package")
            return None
        full = self.root / p
        try:
            real = full.resolve()
        except (OSError, RuntimeError):
            self.err(file, fld, f"{rel!r} cannot be resolved (symlink loop?)")
            return None
        if real != self.real and self.real not in real.parents:
            self.err(file, fld, f"{rel!r} is a symlink leading outside the package")
            return None
        return full

    def read(self, rel: str, file: str, fld: str) -> str | None:
        full = self.safe_path(rel, file, fld)
        if full is None:
            return None
        if not full.exists():
            self.err(file, fld, f"{rel}: file does not exist")
            return None
        if not full.is_file():
            self.err(file, fld, f"{rel}: not a regular file")
            return None
        try:
            size = full.stat().st_size
            if size > MAX_BYTES:
                self.err(rel, "file", f"larger than {MAX_BYTES} bytes")
                return None
            self.total += size
            if self.total > MAX_TOTAL_BYTES:
                self.err(rel, "file", f"package larger than {MAX_TOTAL_BYTES} bytes in all")
                return None
            raw = full.read_bytes()
        except OSError as exc:
            self.err(rel, "file", f"cannot read ({exc.strerror})")
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.err(rel, "encoding", f"not UTF-8 text (byte {exc.start})")
            return None
        if "\x00" in text:
            self.err(rel, "encoding", "contains a NUL character")
            return None
        return text.removeprefix("\ufeff")

    def yaml(self, text: str, rel: str, fld: str) -> Any:
        try:
            return loads(text, rel)
        except ValidationError as exc:
            msg = str(exc).removeprefix(f"{rel}: ")
            self.err(rel, fld, msg)
            return None

    def doc(self, rel: str, file: str, fld: str, need_meta: bool) -> Doc | None:
        text = self.read(rel, file, fld)
        if text is None:
            return None
        meta: Any = {}
        body = text
        lines = text.split("\n")
        if lines and lines[0].rstrip() == "---":
            end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")),
                       None)
            if end is None:
                self.err(rel, "frontmatter", "opening --- has no closing ---")
                return None
            meta = self.yaml("\n".join(lines[1:end]), rel, "frontmatter")
            if meta is None and "\n".join(lines[1:end]).strip():
                return None
            meta = meta if meta is not None else {}
            if not isinstance(meta, dict):
                self.err(rel, "frontmatter", f"must be a mapping (got {ck.type_name(meta)})")
                return None
            body = "\n".join(lines[end + 1:])
        elif need_meta:
            self.err(rel, "frontmatter", "missing (a --- YAML block must open the file)")
            return None
        return Doc(rel, meta, body)

    # ------------------------------------------------------------ field helpers

    def string(self, d: dict[str, Any], key: str, file: str, prefix: str = "",
               required: bool = False) -> str | None:
        fld = f"{prefix}{key}"
        if key not in d or d[key] is None:
            if required:
                self.err(file, fld, "required field is missing")
            return None
        v = d[key]
        if not isinstance(v, str) or (required and not v.strip()):
            self.err(file, fld, f"must be a non-empty string (got {ck.type_name(v)})")
            return None
        return v

    def strings(self, d: dict[str, Any], key: str, file: str, prefix: str = "") -> list[str]:
        fld = f"{prefix}{key}"
        if key not in d or d[key] is None:
            return []
        v = d[key]
        if not isinstance(v, list):
            self.err(file, fld, f"must be a list of strings (got {ck.type_name(v)})")
            return []
        out = []
        for i, x in enumerate(v):
            if isinstance(x, str) and x.strip():
                out.append(x)
            else:
                self.err(file, f"{fld}[{i}]", f"must be a non-empty string (got {ck.type_name(x)})")
        return out

    def boolean(self, d: dict[str, Any], key: str, file: str, prefix: str) -> None:
        if key in d and not isinstance(d[key], bool):
            self.err(file, f"{prefix}{key}", f"must be true or false (got {ck.type_name(d[key])})")

    def enum(self, d: dict[str, Any], key: str, allowed: tuple[str, ...], file: str,
             prefix: str, required: bool = False) -> None:
        if key not in d and required:
            self.err(file, f"{prefix}{key}", "required field is missing")
        elif key in d:
            why = ck.enum_problem(d[key], allowed)
            if why:
                self.err(file, f"{prefix}{key}", why)

    def unique(self, name: str | None, seen: set[str], file: str, fld: str, why: str) -> None:
        """Report `name` when an earlier entry of the same list already used it."""
        if name is not None:
            if name in seen:
                self.err(file, fld, f"{name!r} {why}")
            seen.add(name)

    def duration(self, d: dict[str, Any], key: str, file: str, prefix: str) -> None:
        if key in d:
            why = ck.duration_problem(d[key])
            if why:
                self.err(file, f"{prefix}{key}", why)

    def mapping(self, d: dict[str, Any], key: str, file: str, prefix: str = ""
                ) -> dict[str, Any] | None:
        if key not in d or d[key] is None:
            return None
        v = d[key]
        if not isinstance(v, dict):
            self.err(file, f"{prefix}{key}", f"must be a mapping (got {ck.type_name(v)})")
            return None
        return v

    def positive_int(self, d: dict[str, Any], key: str, file: str, prefix: str) -> None:
        if key in d:
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                self.err(file, f"{prefix}{key}", f"must be a positive integer (got {v!r})"
                         if isinstance(v, (int, float, str)) else
                         f"must be a positive integer (got {ck.type_name(v)})")


def load_package(root: str | os.PathLike[str]) -> Package:
    """Read and validate the package at `root`; `Package.problems` holds every finding."""
    r = Path(root)
    ld = _Loader(r)
    pkg = Package(root=r, manifest={})
    pkg.problems = ld.problems
    if not r.is_dir():
        ld.err(str(r), "path", "not a directory")
        return pkg
    text = ld.read(MANIFEST, MANIFEST, "file")
    if text is None:
        if not any(p.file == MANIFEST for p in ld.problems):
            ld.err(MANIFEST, "file", "missing")
        return pkg
    data = ld.yaml(text, MANIFEST, "yaml")
    if data is None:
        if not ld.problems:
            ld.err(MANIFEST, "yaml", "empty document")
        return pkg
    if not isinstance(data, dict):
        ld.err(MANIFEST, "yaml", f"must be a mapping (got {ck.type_name(data)})")
        return pkg
    pkg.manifest = data
    _manifest_fields(ld, data)
    readme = r / "README.md"
    if not readme.is_file():
        ld.warn("README.md", "file", "missing: spec section 2 lists it as required, but"
                " section 14's load-time checks do not, so the package still loads")
    else:
        pkg.readme = ld.read("README.md", "README.md", "file") is not None
    _components(ld, pkg, data)
    _cross_refs(ld, pkg)
    return pkg


def _manifest_fields(ld: _Loader, m: dict[str, Any]) -> None:
    f = MANIFEST
    spec = ld.string(m, "spec", f, required=True)
    if spec is not None and not re.match(r"^1(\.\d+)?$", spec.strip()):
        ld.err(f, "spec", f"{spec!r}: this loader reads spec 1.x")
    name = ld.string(m, "name", f, required=True)
    if name is not None and not ck.NAME_RE.match(name):
        ld.err(f, "name", f"{name!r} must be lower-case letters, digits, '-', '.' or '_'")
    version = ld.string(m, "version", f, required=True)
    if version is not None and ck.semver(version) is None:
        ld.warn(f, "version", f"{version!r} is not SemVer (MAJOR.MINOR.PATCH); updates cannot"
                " tell a breaking change")
    ld.string(m, "description", f, required=True)
    if "components" not in m:
        ld.err(f, "components", "required field is missing")
    elif not isinstance(m["components"], dict):
        ld.err(f, "components", f"must be a mapping (got {ck.type_name(m['components'])})")
    ld.string(m, "author", f)
    ld.string(m, "license", f)
    req = ld.mapping(m, "requires", f)
    if req is not None:
        tools = ld.strings(req, "tools", f, "requires.")
        seen: set[str] = set()
        for t in tools:
            if t in seen:
                ld.warn(f, "requires.tools", f"{t!r} listed twice")
            seen.add(t)
    ld.strings(m, "outputs", f)
    conc = ld.mapping(m, "concurrency", f)
    if conc is not None:
        ld.enum(conc, "default", ("parallel", "serial", "serial_per_key"), f, "concurrency.")
        ld.string(conc, "key", f, "concurrency.")
    ex = ld.mapping(m, "execution", f)
    if ex is not None:
        _execution(ld, ex, f, "execution.")
    dl = ld.mapping(m, "delivery", f)
    if dl is not None:
        _delivery(ld, dl, f, "delivery.")
    lr = ld.mapping(m, "learning", f)
    if lr is not None:
        ld.boolean(lr, "enabled", f, "learning.")
        ld.enum(lr, "approval", ck.TIERS, f, "learning.")
        ld.positive_int(lr, "max_entries_per_file", f, "learning.")
    pol = ld.mapping(m, "policy", f)
    if pol is not None:
        ap = ld.mapping(pol, "approval", f, "policy.")
        if ap is not None:
            ld.enum(ap, "default", ck.TIERS, f, "policy.approval.")
            ld.duration(ap, "timeout", f, "policy.approval.")
            ld.enum(ap, "on_timeout", ("reject", "escalate"), f, "policy.approval.")
            ov = ld.mapping(ap, "overrides", f, "policy.approval.")
            for k, v in (ov or {}).items():
                why = ck.enum_problem(v, ck.TIERS)
                if why:
                    ld.err(f, f"policy.approval.overrides.{k}", why)
        es = ld.mapping(pol, "escalation", f, "policy.")
        if es is not None:
            ld.string(es, "channel", f, "policy.escalation.")
            if "channel" in es and es["channel"] != "main":
                ld.err(f, "policy.escalation.channel", f"{es['channel']!r}: only 'main' is"
                       " supported")
            ld.boolean(es, "on_low_confidence", f, "policy.escalation.")
            ld.boolean(es, "on_manual_ready", f, "policy.escalation.")
    if "triggers" in m and m["triggers"] is not None:
        if not isinstance(m["triggers"], list):
            ld.err(f, "triggers", f"must be a list (got {ck.type_name(m['triggers'])})")
        else:
            _triggers(ld, m, m["triggers"])


def _execution(ld: _Loader, ex: dict[str, Any], f: str, pre: str) -> None:
    ld.duration(ex, "timeout", f, pre)
    ld.boolean(ex, "idempotent", f, pre)
    ld.boolean(ex, "resume_from_execution_log", f, pre)
    ld.enum(ex, "on_failure", ("escalate", "abandon", "dead_letter"), f, pre)
    rt = ld.mapping(ex, "retry", f, pre)
    if rt is not None:
        ld.positive_int(rt, "max_attempts", f, f"{pre}retry.")
        ld.enum(rt, "backoff", ("fixed", "exponential"), f, f"{pre}retry.")
        ld.duration(rt, "delay", f, f"{pre}retry.")
    if ex.get("resume_from_execution_log") is True and ex.get("idempotent") is True:
        ld.err(f, f"{pre}resume_from_execution_log", "requires idempotent: false")


def _delivery(ld: _Loader, dl: dict[str, Any], f: str, pre: str, sla: bool = False) -> None:
    ld.enum(dl, "format", ("narrative", "structured", "both"), f, pre)
    ld.enum(dl, "channel", ("main",), f, pre)
    ld.enum(dl, "sla_breach", ("warn", "escalate"), f, pre)
    if sla:
        ld.duration(dl, "sla", f, pre)
    elif "sla" in dl:
        ld.warn(f, f"{pre}sla", "an SLA belongs on a process, not the package defaults")


def _triggers(ld: _Loader, m: dict[str, Any], triggers: list[Any]) -> None:
    f = MANIFEST
    names: set[str] = set()
    conc = m.get("concurrency") if isinstance(m.get("concurrency"), dict) else {}
    assert isinstance(conc, dict)
    for i, t in enumerate(triggers):
        pre = f"triggers[{i}]."
        if not isinstance(t, dict):
            ld.err(f, f"triggers[{i}]", f"must be a mapping (got {ck.type_name(t)})")
            continue
        tname = ld.string(t, "name", f, pre, required=True)
        if tname is not None and not is_name(tname):  # a URL segment, a hooks.yaml key
            ld.err(f, f"{pre}name", f"{printable(tname, 80)!r} is not a name ({NAME_RULE})")
        ld.unique(tname, names, f, f"{pre}name", "is used by another trigger")
        ld.enum(t, "type", ("webhook", "cron", "channel"), f, pre, required=True)
        ld.string(t, "process", f, pre, required=True)
        for key in ("preset", "requires_tool", "dedupe_key", "description"):
            ld.string(t, key, f, pre)
        ld.enum(t, "session", ("isolated", "main"), f, pre)
        ld.enum(t, "concurrency", ("parallel", "serial", "serial_per_key"), f, pre)
        ld.string(t, "concurrency_key", f, pre)
        if t.get("type") == "cron":
            if "expr" not in t:
                ld.err(f, f"{pre}expr", "required for a cron trigger")
            else:
                why = ck.cron_problem(t["expr"])
                if why:
                    ld.err(f, f"{pre}expr", why)
        elif "expr" in t:
            ld.warn(f, f"{pre}expr", "only cron triggers use expr")
        if "tz" in t:
            why = ck.tz_problem(t["tz"])
            if why:
                ld.err(f, f"{pre}tz", why)
        mode = t.get("concurrency", conc.get("default", "parallel"))
        if mode == "serial_per_key" and not t.get("concurrency_key") and not conc.get("key"):
            ld.err(f, f"{pre}concurrency_key", "required: the effective concurrency is"
                   " serial_per_key and concurrency.key is not set")
        pm = ld.mapping(t, "payload_mapping", f, pre)
        for k, v in (pm or {}).items():
            if not isinstance(v, str) or not v:
                ld.err(f, f"{pre}payload_mapping.{k}", f"must be a payload path string (got"
                       f" {ck.type_name(v)})")


def _components(ld: _Loader, pkg: Package, m: dict[str, Any]) -> None:
    comps = m.get("components")
    if not isinstance(comps, dict):
        return
    f = MANIFEST
    for key in comps:
        if key != "orchestrator" and key not in LIST_KINDS:
            ld.warn(f, f"components.{key}", "not a component kind this spec defines; ignored")
    if "orchestrator" not in comps:
        ld.err(f, "components.orchestrator", "required field is missing")
    else:
        text = ld.read(comps["orchestrator"], f, "components.orchestrator")
        if text is not None:
            pkg.orchestrator = text
            if not text.strip():
                ld.err(str(comps["orchestrator"]), "file", "is empty")
    lists: dict[str, list[str]] = {}
    count = 0
    for kind in LIST_KINDS:
        items = ld.strings(comps, kind, f, "components.")
        seen: set[str] = set()
        kept = []
        for i, rel in enumerate(items):
            if rel in seen:
                ld.warn(f, f"components.{kind}[{i}]", f"{rel} is listed twice")
                continue
            seen.add(rel)
            kept.append(rel)
        count += len(kept)
        lists[kind] = kept
    if count > MAX_COMPONENTS:
        ld.err(f, "components", f"more than {MAX_COMPONENTS} files listed")
        return
    for kind, need in (("persona", "persona"), ("functions", "function")):
        if not lists[kind]:
            ld.err(f, f"components.{kind}", f"at least one {need} file is required")
    for i, rel in enumerate(lists["persona"]):
        d = ld.doc(rel, f, f"components.persona[{i}]", need_meta=False)
        if d is not None:
            pkg.persona.append(d)
    for kind, check, into in (("functions", _function, pkg.functions),
                              ("processes", _process, pkg.processes)):
        for i, rel in enumerate(lists[kind]):
            d = ld.doc(rel, f, f"components.{kind}[{i}]", need_meta=True)
            if d is not None and check(ld, d):
                if d.name in into:
                    ld.err(rel, "name", f"{d.name!r} is also the name of {into[d.name].path}")
                into[d.name] = d
    for i, rel in enumerate(lists["tools"]):
        text = ld.read(rel, f, f"components.tools[{i}]")
        if text is None:
            continue
        data = ld.yaml(text, rel, "yaml")
        if data is None:
            if not any(p.file == rel for p in ld.problems):
                ld.err(rel, "yaml", "empty document")
            continue
        if not isinstance(data, dict):
            ld.err(rel, "yaml", f"must be a mapping (got {ck.type_name(data)})")
            continue
        tool = Tool(rel, data)
        if _tool(ld, tool):
            if tool.name in pkg.tools:
                ld.err(rel, "name", f"{tool.name!r} is also declared by"
                       f" {pkg.tools[tool.name].path}")
            pkg.tools[tool.name] = tool
    for i, rel in enumerate(lists["knowledge"]):
        d = ld.doc(rel, f, f"components.knowledge[{i}]", need_meta=False)
        if d is not None:
            ld.enum(d.meta, "type", ("static", "dynamic", "private"), rel, "")
            ld.string(d.meta, "name", rel)
            ld.string(d.meta, "description", rel)
            pkg.knowledge[rel] = d
    for i, rel in enumerate(lists["state"]):
        d = ld.doc(rel, f, f"components.state[{i}]", need_meta=False)
        if d is not None:
            ld.enum(d.meta, "scope", ("session", "persistent"), rel, "")
            ld.string(d.meta, "name", rel)
            ld.string(d.meta, "description", rel)
            pkg.state[rel] = d


def _io(ld: _Loader, meta: dict[str, Any], key: str, file: str) -> None:
    if key not in meta or meta[key] is None:
        return
    v = meta[key]
    if not isinstance(v, list):
        ld.err(file, key, f"must be a list of {{name, type}} entries (got {ck.type_name(v)})")
        return
    names: set[str] = set()
    for i, item in enumerate(v):
        pre = f"{key}[{i}]."
        if not isinstance(item, dict):
            ld.err(file, f"{key}[{i}]", f"must be a mapping with name and type (got"
                   f" {ck.type_name(item)})")
            continue
        ld.unique(ld.string(item, "name", file, pre, required=True), names, file,
                  f"{pre}name", "is declared twice")
        ld.enum(item, "type", ck.SIMPLE_TYPES, file, pre, required=True)
        ld.string(item, "description", file, pre)
        if "enum" in item and not (isinstance(item["enum"], list) and item["enum"]):
            ld.err(file, f"{pre}enum", "must be a non-empty list")


def _function(ld: _Loader, d: Doc) -> bool:
    f, m = d.path, d.meta
    ok = ld.string(m, "name", f, required=True) is not None
    ok = ld.string(m, "description", f, required=True) is not None and ok
    if ok and m["name"] != Path(f).stem:
        ld.warn(f, "name", f"{m['name']!r} differs from the file name {Path(f).stem!r}")
    _io(ld, m, "inputs", f)
    _io(ld, m, "outputs", f)
    ld.strings(m, "tools", f)
    ld.strings(m, "knowledge", f)
    ld.strings(m, "tags", f)
    ld.enum(m, "session", ("inline", "isolated"), f, "")
    if not d.body.strip():
        ld.warn(f, "body", "no instructions after the frontmatter")
    return ok


def _process(ld: _Loader, d: Doc) -> bool:
    f, m = d.path, d.meta
    ok = ld.string(m, "name", f, required=True) is not None
    ok = ld.string(m, "description", f, required=True) is not None and ok
    ld.string(m, "trigger", f)
    _io(ld, m, "inputs", f)
    _io(ld, m, "outputs", f)
    ld.strings(m, "functions", f)
    ld.strings(m, "tools", f)
    ld.strings(m, "tags", f)
    for i, rel in enumerate(ld.strings(m, "context", f)):
        ld.safe_path(rel.removeprefix("./"), f, f"context[{i}]")
    sp = ld.string(m, "scratchpad", f)
    if sp is not None:
        p = sp.removeprefix("./")
        if ld.safe_path(p, f, "scratchpad") is not None and not p.startswith("scratch/"):
            ld.err(f, "scratchpad", f"{sp!r} is not under scratch/ (the spec's location, and"
                   " the only place runs may write scratch files)")
    ex = ld.mapping(m, "execution", f)
    if ex is not None:
        _execution(ld, ex, f, "execution.")
    dl = ld.mapping(m, "delivery", f)
    if dl is not None:
        _delivery(ld, dl, f, "delivery.", sla=True)
    if not steps_of(d.body):
        ld.warn(f, "body", "no checklist steps (- [ ] ...): it cannot be compiled to a"
                " workflow, only followed as a playbook")
    return ok


def _shape(ld: _Loader, shape: Any, file: str, fld: str, depth: int = 0) -> None:
    if depth > 16:
        ld.err(file, fld, "nested deeper than 16 levels")
        return
    if not isinstance(shape, dict):
        ld.err(file, fld, f"must be a type declaration mapping (got {ck.type_name(shape)})")
        return
    ld.enum(shape, "type", ck.SIMPLE_TYPES, file, f"{fld}.", required=True)
    props = shape.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            ld.err(file, f"{fld}.properties", f"must be a mapping (got {ck.type_name(props)})")
        else:
            for k, v in props.items():
                _shape(ld, v, file, f"{fld}.properties.{k}", depth + 1)
    if "items" in shape:
        _shape(ld, shape["items"], file, f"{fld}.items", depth + 1)


def _tool(ld: _Loader, tool: Tool) -> bool:
    f, d = tool.path, tool.data
    ok = ld.string(d, "name", f, required=True) is not None
    ld.string(d, "description", f)
    ops = d.get("operations")
    if not isinstance(ops, list) or not ops:
        ld.err(f, "operations", "must be a non-empty list of operations (got"
               f" {ck.type_name(ops)})")
        return ok
    names: set[str] = set()
    for i, op in enumerate(ops):
        pre = f"operations[{i}]"
        if not isinstance(op, dict):
            ld.err(f, pre, f"must be a mapping (got {ck.type_name(op)})")
            continue
        n = ld.string(op, "name", f, f"{pre}.", required=True)
        if n is not None and not re.match(r"^[A-Za-z0-9_]+$", n):
            ld.err(f, f"{pre}.name", f"{n!r}: use letters, digits and _")
        ld.unique(n, names, f, f"{pre}.name", "is declared twice")
        ld.string(op, "description", f, f"{pre}.")
        ld.enum(op, "approval", ck.TIERS, f, f"{pre}.")
        for key in ("input", "output"):
            if key in op:
                _shape(ld, op[key], f, f"{pre}.{key}")
    return ok


def _cross_refs(ld: _Loader, pkg: Package) -> None:
    f = MANIFEST
    required = set(pkg.required_tools())
    for tname, tdecl in pkg.tools.items():
        if tname not in required:
            ld.warn(tdecl.path, "name", f"tool {tname!r} is not in requires.tools")
        if Path(tdecl.path).stem != tname:
            ld.warn(tdecl.path, "name", f"{tname!r} differs from the file name")
    for rname in sorted(required):
        if rname not in pkg.tools:
            ld.warn(f, "requires.tools", f"{rname!r} has no tools/*.yaml declaration: its"
                    " operations cannot be checked or compiled")
    knowledge = set(pkg.knowledge) | {p for p in _listed(pkg, "knowledge")}
    trig_names = {t.get("name"): t for t in pkg.triggers() if isinstance(t.get("name"), str)}
    for i, t in enumerate(pkg.triggers()):
        proc = t.get("process")
        if isinstance(proc, str) and proc not in pkg.processes:
            ld.err(f, f"triggers[{i}].process", f"{proc!r} is not the name of a process in"
                   " components.processes")
        elif isinstance(proc, str) and pkg.processes[proc].meta.get("trigger") != t.get("name"):
            ld.warn(f, f"triggers[{i}].name", f"process {proc!r} does not declare"
                    f" trigger: {t.get('name')}")
        rt = t.get("requires_tool")
        if isinstance(rt, str) and rt not in required:
            ld.err(f, f"triggers[{i}].requires_tool", f"{rt!r} is not in requires.tools")
    for fn in pkg.functions.values():
        for j, tool in enumerate(_strs(fn.meta.get("tools"))):
            if tool not in required:
                ld.err(fn.path, f"tools[{j}]", f"{tool!r} is not in requires.tools")
        for j, k in enumerate(_strs(fn.meta.get("knowledge"))):
            if k.removeprefix("./") not in knowledge and f"knowledge/{k}.md" not in knowledge:
                ld.warn(fn.path, f"knowledge[{j}]", f"{k!r} is not listed in"
                        " components.knowledge")
    for pr in pkg.processes.values():
        trig = pr.meta.get("trigger")
        if isinstance(trig, str) and trig not in trig_names:
            ld.warn(pr.path, "trigger", f"{trig!r} is not the name of a manifest trigger")
        for j, fname in enumerate(_strs(pr.meta.get("functions"))):
            if fname not in pkg.functions:
                ld.warn(pr.path, f"functions[{j}]", f"{fname!r} is not the name of a function"
                        " in components.functions")
        ptools = _strs(pr.meta.get("tools"))
        for j, tool in enumerate(ptools):
            if tool not in required:
                ld.err(pr.path, f"tools[{j}]", f"{tool!r} is not in requires.tools")
        listed = set(_listed(pkg, "knowledge")) | set(_listed(pkg, "state"))
        for j, c in enumerate(_strs(pr.meta.get("context"))):
            if c.removeprefix("./") not in listed:
                ld.warn(pr.path, f"context[{j}]", f"{c!r} is not a listed knowledge or state"
                        " file")
        declared_fns = set(_strs(pr.meta.get("functions")))
        for step in steps_of(pr.body):
            where = f"steps[{step.index}]"
            for tool, op in operations_named(step.text):
                if tool in pkg.tools and op not in pkg.tools[tool].operations():
                    ld.warn(pr.path, where, f"`{tool}.{op}`: tools/{tool} declares no"
                            f" operation {op!r}")
                elif tool in pkg.tools and tool not in ptools:
                    ld.warn(pr.path, where, f"`{tool}.{op}`: tool {tool!r} is not in the"
                            " process's tools")
            for code in CODE_RE.findall(step.text):
                fname = code.strip().removeprefix("functions/").removesuffix(".md")
                if fname in pkg.functions and fname not in declared_fns:
                    ld.warn(pr.path, where, f"uses function {fname!r}, which the process's"
                            " functions list does not name")
    polap = pkg.section("policy").get("approval")
    overrides = polap.get("overrides") if isinstance(polap, dict) else None
    for key in overrides if isinstance(overrides, dict) else {}:
        fld = f"policy.approval.overrides.{key}"
        m = OP_RE.match(str(key))
        if not m:
            ld.warn(f, fld, "key must be tool_name.operation_name")
        elif m.group(1) not in required:
            ld.warn(f, fld, f"tool {m.group(1)!r} is not in requires.tools")
        elif m.group(1) in pkg.tools and m.group(2) not in pkg.tools[m.group(1)].operations():
            ld.warn(f, fld, f"tools/{m.group(1)} declares no operation {m.group(2)!r}")


def _listed(pkg: Package, kind: str) -> list[str]:
    comps = pkg.manifest.get("components")
    v = comps.get(kind) if isinstance(comps, dict) else None
    return [x.removeprefix("./") for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _strs(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []

