"""Differential harness: run one workflow case on a CLI (the real Lobster, or `clawtower workflow`)
and return every envelope, exit code and stderr, normalised so two CLIs can be compared.

A case is a sidecar `corpus/**/NAME.case.yaml` beside its workflow file:

    description: what the case proves
    file: NAME.lobster             # default: the one NAME.{lobster,yaml,yml,json} beside it;
                                   # "openclaw:FILE" names an OpenClaw example (see OPENCLAW_DIR)
    args: {who: team}              # --args-json (JSON-encoded); or args_json: '<raw text>'
    env: {K: V}                    # added to every invocation's environment
    dry_run: true                  # run with --dry-run
    compare_stderr: true           # stderr is part of the comparison (dry-run plans, retries)
    resumes:                       # after the run, in order:
      - approve: yes               # --approve yes|no     (yes/no/true/false)
      - response: {title: x}       # --response-json JSON (or response_json: '<raw text>')
      - cancel: true               # --cancel
        by: id                     # resume with --id APPROVALID instead of --token
        ref: 1                     # which token/id (1-based, by appearance); default latest
        token_raw: garbage         # a literal token (or id_raw: a literal approval id)
        env: {LOBSTER_APPROVAL_APPROVED_BY: bob}
      - replace: {file: a.lobster, with: a.lobster.v2}   # edit the workflow between resumes

Each case runs in fresh temporary folders: the corpus is copied to WF (so sub-workflow paths
resolve relative to the parent file and edits touch only the copy), the process runs in an
empty CWD, Lobster gets its own LOBSTER_STATE_DIR / LOBSTER_CACHE_DIR, clawtower its own --db.

Normalisation: each distinct resumeToken becomes TOKEN1, TOKEN2, ... and each approvalId ID1,
ID2, ... in order of appearance (so a reused token stays visible); ISO timestamps become
<TIMESTAMP>; the temporary folders become <WF>, <CWD>, <STATE>.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CORPUS = HERE / "corpus"
EXPECTED = HERE / "expected"
EXPECTED_CLAWTOWER = HERE / "expected-clawtower"
DEVIATIONS = HERE / "deviations.yaml"
PEERS = Path(os.environ.get("CLAWTOWER_PEERS", Path.home() / ".cache" / "clawtower-peers"))
LOBSTER = Path(os.environ.get("LOBSTER_BIN",
                              PEERS / "lobster" / "node_modules" / ".bin" / "lobster"))
OPENCLAW_DIR = PEERS / "lobster" / "openclaw-examples"
WORKFLOW_EXTS = (".lobster", ".yaml", ".yml", ".json")
CALL_TIMEOUT_S = 60.0

_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_NODE_PID = re.compile(r"\(node:\d+\)")


# ----------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    sidecar: Path
    spec: dict[str, Any]
    workflow: Path  # the file to run (inside CORPUS, or an OpenClaw example)
    external: bool = False  # an OpenClaw example, not a file of this repository

    @property
    def compare_stderr(self) -> bool:
        return bool(self.spec.get("compare_stderr"))


def case_name(sidecar: Path) -> str:
    rel = sidecar.relative_to(CORPUS).as_posix()
    return rel[: -len(".case.yaml")].replace("/", "__")


def _workflow_for(sidecar: Path, spec: dict[str, Any]) -> tuple[Path, bool]:
    stem = sidecar.name[: -len(".case.yaml")]
    named = spec.get("file")
    if isinstance(named, str) and named.startswith("openclaw:"):
        return OPENCLAW_DIR / named[len("openclaw:"):], True
    if named:
        return sidecar.parent / named, False
    found = [sidecar.parent / (stem + ext) for ext in WORKFLOW_EXTS
             if (sidecar.parent / (stem + ext)).exists()]
    if len(found) != 1:
        raise ValueError(f"{sidecar}: expected one workflow file named {stem}.*, found {found}")
    return found[0], False


def load_cases() -> list[Case]:
    cases = []
    for sidecar in sorted(CORPUS.rglob("*.case.yaml")):
        spec = yaml.safe_load(sidecar.read_text(encoding="utf-8")) or {}
        wf, external = _workflow_for(sidecar, spec)
        cases.append(Case(case_name(sidecar), sidecar, spec, wf, external))
    return cases


def get_case(name: str) -> Case:
    for c in load_cases():
        if c.name == name:
            return c
    raise KeyError(name)


def lobster_fingerprint() -> str:
    """What a Lobster run's output depends on besides the case: the installed Lobster and
    everything it pulled in (the peer's package-lock and the binary's target), the node that
    runs it, this harness (how runs are made and normalised) and the whole corpus (cases
    share files). A run recorded under the same fingerprint and case is that Lobster's
    output for it: tests/test_workflows_differential.py replays it instead of running it."""
    import hashlib

    h = hashlib.sha256()
    lock = PEERS / "lobster" / "package-lock.json"
    binary = LOBSTER.resolve()
    node = shutil.which("node") or ""
    for part in (lock.read_bytes() if lock.exists() else b"", str(binary).encode(),
                 binary.read_bytes() if binary.is_file() else b"", node.encode(),
                 str(Path(node).stat().st_size if node else 0).encode(),
                 Path(__file__).read_bytes()):
        h.update(hashlib.sha256(part).digest())
    for f in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(CORPUS)).encode() + b"\0" + f.read_bytes())
    for f in sorted(OPENCLAW_DIR.rglob("*")) if OPENCLAW_DIR.exists() else []:
        if f.is_file():
            h.update(str(f.relative_to(OPENCLAW_DIR)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def case_unavailable(case: Case) -> str | None:
    """Why this case cannot run here (None when it can)."""
    if case.external and not case.workflow.exists():
        return (f"OpenClaw example {case.workflow.name} not installed in {OPENCLAW_DIR}"
                " (run scripts/install-peers.sh lobster)")
    return None


def lobster_missing() -> str | None:
    if not LOBSTER.exists():
        return (f"the real Lobster CLI is not installed at {LOBSTER}"
                " (run scripts/install-peers.sh lobster)")
    if shutil.which("node") is None:
        return "node is not on PATH"
    return None


# ----------------------------------------------------------------------------- CLIs


class Cli(ABC):
    """How to invoke one workflow CLI. `argv(kind, rest)` builds a command line."""

    name = "?"

    @abstractmethod
    def prepare(self, tmp: Path, env: dict[str, str]) -> None:  # per case
        """Set up what the CLI needs for one case (state dirs, a store)."""

    @abstractmethod
    def argv(self, tmp: Path, rest: list[str]) -> list[str]:
        """The command line for `rest` (run/resume arguments)."""


class LobsterCli(Cli):
    name = "lobster"

    def __init__(self, binary: Path = LOBSTER) -> None:
        self.binary = binary

    def prepare(self, tmp: Path, env: dict[str, str]) -> None:
        (tmp / "state").mkdir()
        (tmp / "cache").mkdir()
        env["LOBSTER_STATE_DIR"] = str(tmp / "state")
        env["LOBSTER_CACHE_DIR"] = str(tmp / "cache")

    def argv(self, tmp: Path, rest: list[str]) -> list[str]:
        if rest[0] == "run":
            return [str(self.binary), "run", "--mode", "tool", *rest[1:]]
        return [str(self.binary), *rest]


class ClawtowerCli(Cli):
    name = "clawtower"

    def prepare(self, tmp: Path, env: dict[str, str]) -> None:
        (tmp / "state").mkdir()
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")

    def argv(self, tmp: Path, rest: list[str]) -> list[str]:
        return [sys.executable, "-m", "clawtower.cli.main", "--db", str(tmp / "state" / "db"),
                "workflow", *rest]


# ----------------------------------------------------------------------------- normalising


@dataclass
class Normaliser:
    paths: dict[str, str]  # literal folder -> placeholder
    tokens: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def see(self, value: Any) -> None:
        """Record every resumeToken / approvalId in an envelope, in order of appearance."""
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "requiresInput" and isinstance(v, dict):  # deviation 12: clawtower's
                    v = {x: y for x, y in v.items() if x != "approvalId"}  # own, not Lobster's
                if k == "resumeToken" and isinstance(v, str) and v not in self.tokens:
                    self.tokens.append(v)
                elif k == "approvalId" and isinstance(v, str) and v not in self.ids:
                    self.ids.append(v)
                else:
                    self.see(v)
        elif isinstance(value, list):
            for v in value:
                self.see(v)

    def text(self, s: str) -> str:
        for literal, placeholder in sorted(self.paths.items(), key=lambda kv: -len(kv[0])):
            s = s.replace(literal, placeholder)
        for i, tok in enumerate(self.tokens, 1):
            s = s.replace(tok, f"TOKEN{i}")
        for i, aid in enumerate(self.ids, 1):
            s = s.replace(aid, f"ID{i}")
        s = _TIMESTAMP.sub("<TIMESTAMP>", s)
        return _NODE_PID.sub("(node:PID)", s)

    def value(self, v: Any, key: str | None = None) -> Any:
        if isinstance(v, dict):
            return {k: self.value(x, k) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, str):
            if key == "resumeToken" and v in self.tokens:
                return f"TOKEN{self.tokens.index(v) + 1}"
            if key == "approvalId" and v in self.ids:
                return f"ID{self.ids.index(v) + 1}"
            return self.text(v)
        return v


# ----------------------------------------------------------------------------- running


def _snapshot_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOBSTER_", "CLAWTOWER_", "PYTEST_", "COV_"))}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


# Taken once, at import, in the main thread: cases run in a thread pool while pytest sets and
# deletes PYTEST_CURRENT_TEST in the main thread, and iterating os.environ in a thread then
# fails now and then (KeyError: a key listed, then gone before it is read).
_BASE_ENV = _snapshot_env()


def _base_env() -> dict[str, str]:
    return dict(_BASE_ENV)


def _yes_no(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _resume_args(step: dict[str, Any], norm: Normaliser) -> tuple[list[str], str]:
    """The resume command line (raw) and its description (normalised)."""
    rest: list[str] = ["resume"]
    desc: list[str] = ["resume"]
    if "token_raw" in step:
        rest += ["--token", str(step["token_raw"])]
        desc += ["--token", str(step["token_raw"])]
    elif "id_raw" in step:
        rest += ["--id", str(step["id_raw"])]
        desc += ["--id", str(step["id_raw"])]
    elif step.get("by") == "id":
        if not norm.ids:
            raise RuntimeError("no approvalId seen yet")
        i = int(step.get("ref", len(norm.ids)))
        rest += ["--id", norm.ids[i - 1]]
        desc += ["--id", f"ID{i}"]
    else:
        if not norm.tokens:
            raise RuntimeError("no resumeToken seen yet")
        i = int(step.get("ref", len(norm.tokens)))
        rest += ["--token", norm.tokens[i - 1]]
        desc += ["--token", f"TOKEN{i}"]
    if "approve" in step:
        a = ["--approve", _yes_no(step["approve"])]
    elif "response" in step:
        a = ["--response-json", json.dumps(step["response"], separators=(",", ":"))]
    elif "response_json" in step:
        a = ["--response-json", str(step["response_json"])]
    elif step.get("cancel"):
        a = ["--cancel"]
    else:
        raise ValueError(f"resume step without a decision: {step}")
    return rest + a, " ".join(desc + a)


def _call(cli: Cli, tmp: Path, cwd: Path, rest: list[str], env: dict[str, str]) -> dict[str, Any]:
    argv = cli.argv(tmp, rest)
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=CALL_TIMEOUT_S, check=False)
        out, err, rc = proc.stdout.decode(errors="replace"), proc.stderr.decode(
            errors="replace"), proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace")
        err = (exc.stderr or b"").decode(errors="replace")
        err += f"\n<timed out after {CALL_TIMEOUT_S} s>"
        rc = -9
    return {"stdout": out, "stderr": err, "exit": rc}


def run_case(case: Case, cli: Cli) -> dict[str, Any]:
    """Run the case on `cli`; the normalised record of every invocation."""
    spec = case.spec
    tmp = Path(tempfile.mkdtemp(prefix=f"wfdiff-{cli.name}-"))
    try:
        wf_dir = tmp / "wf"
        shutil.copytree(CORPUS, wf_dir)
        if case.external:
            target = wf_dir / "openclaw" / case.workflow.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(case.workflow, target)
        else:
            target = wf_dir / case.workflow.relative_to(CORPUS)
        cwd = tmp / "cwd"
        cwd.mkdir()
        env = _base_env()
        cli.prepare(tmp, env)
        env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
        norm = Normaliser({str(wf_dir): "<WF>", str(cwd): "<CWD>", str(tmp / "state"): "<STATE>",
                           str(tmp): "<TMP>"})
        calls: list[dict[str, Any]] = []

        def record(desc: str, raw: dict[str, Any]) -> None:
            try:
                envelope: Any = json.loads(raw["stdout"])
            except ValueError:
                envelope = None
            if envelope is not None:
                norm.see(envelope)
            entry: dict[str, Any] = {"call": desc, "exit": raw["exit"]}
            if envelope is not None:
                entry["envelope"] = norm.value(envelope)
            else:
                entry["stdout"] = norm.text(raw["stdout"])
            entry["stderr"] = norm.text(raw["stderr"])
            calls.append(entry)

        rest = ["run", "--file", str(target)]
        desc = "run"
        if "args_json" in spec:
            rest += ["--args-json", str(spec["args_json"])]
            desc += f" --args-json {spec['args_json']}"
        elif "args" in spec:
            aj = json.dumps(spec["args"], separators=(",", ":"))
            rest += ["--args-json", aj]
            desc += f" --args-json {aj}"
        if spec.get("dry_run"):
            rest.append("--dry-run")
            desc += " --dry-run"
        record(desc, _call(cli, tmp, cwd, rest, env))

        for step in spec.get("resumes") or []:
            if "replace" in step:
                r = step["replace"]
                shutil.copyfile(wf_dir / r["with"], wf_dir / r["file"])
                calls.append({"call": f"replace {r['file']} with {r['with']}"})
                continue
            step_env = dict(env)
            step_env.update({str(k): str(v) for k, v in (step.get("env") or {}).items()})
            try:
                rest, desc = _resume_args(step, norm)
            except RuntimeError as exc:  # this CLI never offered the token / id to use
                calls.append({"call": f"resume: not attempted, {exc}"})
                continue
            if step.get("env"):
                desc += " with " + " ".join(f"{k}={v}" for k, v in step["env"].items())
            record(desc, _call(cli, tmp, cwd, rest, step_env))
        return {"case": case.name, "workflow": target.relative_to(wf_dir).as_posix(),
                "calls": calls}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def comparable(result: dict[str, Any], with_stderr: bool) -> list[dict[str, Any]]:
    """The part of a result two CLIs must agree on."""
    out = []
    for c in result["calls"]:
        c = dict(c)
        if not with_stderr:
            c.pop("stderr", None)
        env = c.get("envelope")
        if isinstance(env, dict) and isinstance(env.get("requiresInput"), dict):
            # deviation 12: an input gate's approvalId is clawtower's (Lobster has none);
            # tests/test_workflows_gates.py checks it, the corpus compares the rest
            c["envelope"] = {**env, "requiresInput": {
                k: v for k, v in env["requiresInput"].items() if k != "approvalId"}}
        out.append(c)
    return out


def load_expected(name: str, clawtower: bool = False) -> dict[str, Any] | None:
    path = (EXPECTED_CLAWTOWER if clawtower else EXPECTED) / f"{name}.json"
    with contextlib.suppress(FileNotFoundError):
        return json.loads(path.read_text(encoding="utf-8"))
    return None


def load_deviations() -> dict[str, str]:
    if not DEVIATIONS.exists():
        return {}
    data = yaml.safe_load(DEVIATIONS.read_text(encoding="utf-8")) or {}
    return {str(k): str(v) for k, v in data.items()}


def dump(result: dict[str, Any]) -> str:
    text = json.dumps(result, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JavaScript cut a pair): escape everything
        text = json.dumps(result, indent=2, ensure_ascii=True)
    return text + "\n"


def main(argv: list[str]) -> int:
    """`python tests/workflows/harness.py [--cli lobster|clawtower] CASE...`: print results."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--cli", choices=["lobster", "clawtower"], default="lobster")
    p.add_argument("cases", nargs="*")
    a = p.parse_args(argv)
    cli: Cli = LobsterCli() if a.cli == "lobster" else ClawtowerCli()
    names = a.cases or [c.name for c in load_cases()]
    for n in names:
        sys.stdout.write(dump(run_case(get_case(n), cli)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
