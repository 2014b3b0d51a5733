"""The agent registry inside a write transaction: a spec by id or name (parsed once per
stored version, read once per batch), its name, one made from clawtower.yaml on first use,
the built-in "default". Sessions, flows and experts look specs up through it."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..config import config_path
from ..errors import NotFound
from ..events import NewEvent
from ..ids import new_id
from ..store.interface import WriteTx
from . import events as sev
from .specs import AgentSpec, AgentSpecConfig, check_name, close_matches, from_agent_config

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

DEFAULT_SPEC = "default"


@functools.lru_cache(maxsize=256)
def _parsed(agent_id: str, name: str, config_json: str, source: str, updated_at: float
            ) -> AgentSpec:
    return AgentSpec.from_row({"agent_id": agent_id, "name": name, "config_json": config_json,
                               "source": source, "updated_at": updated_at})


def _spec_of(r: dict[str, Any]) -> AgentSpec:
    """Parsed once per stored version (turns and spawns look specs up constantly)."""
    return _parsed(r["agent_id"], r["name"], r["config_json"], r["source"], r["updated_at"])


def spec_by_ref(tx_or_rows: WriteTx | list[dict[str, Any]], ref: str) -> AgentSpec:
    """Exact match on agent id or name; unknown -> NotFound naming close matches."""
    if isinstance(tx_or_rows, list):
        rows = tx_or_rows
    else:
        tx = tx_or_rows
        spec = tx.cached(sev.AgentSpecSet.ENTITY, ("spec", ref), lambda: _spec_row(tx, ref))
        if spec is not None:
            return spec
        rows = tx.all("SELECT * FROM agent_specs ORDER BY name")
    for r in rows:
        if r["agent_id"] == ref or r["name"] == ref:
            return _spec_of(r)
    names = [r["name"] for r in rows]
    raise NotFound(f"agent {ref!r}: no such agent spec ({close_matches(ref, names)})")


def _spec_row(tx: WriteTx, ref: str) -> AgentSpec | None:
    row = tx.one("SELECT * FROM agent_specs WHERE agent_id=? OR name=? ORDER BY agent_id=?"
                 " DESC LIMIT 1", (ref, ref, ref))
    return None if row is None else _spec_of(row)


def spec_name(tx: WriteTx, agent_id: str) -> str:
    """The name of the spec `agent_id` (the id itself when it has none), once per batch."""
    def load() -> str:
        row = tx.one("SELECT name FROM agent_specs WHERE agent_id=?", (agent_id,))
        return str(row["name"]) if row else agent_id
    return tx.cached(sev.AgentSpecSet.ENTITY, ("name", agent_id), load)


def spec_for(tx: WriteTx, ref: str, cfg: ClawtowerConfig | None, by: str) -> AgentSpec:
    """One agent registry: a spec by id or name, or an agent of clawtower.yaml that has no
    spec yet, made one on first use (an `agentspec.set` event, source `config:<file>`, shown
    by `agents spec show`; `agents spec set` overrides it). So every command takes the
    names `agents list` shows."""
    try:
        return spec_by_ref(tx, ref)
    except NotFound as exc:
        if cfg is None or ref not in cfg.agents:
            hint = _known_agents_hint(cfg)
            raise NotFound(f"{exc}{hint}") from None
    config = from_agent_config(cfg, check_name(ref, f"{cfg.source}: agent"))
    source = f"config:{cfg.source}"
    agent_id = _set_spec(tx, ref, config, source, by)
    return AgentSpec(agent_id=agent_id, name=ref, config=config, source=source,
                     updated_at=tx.now)


def _known_agents_hint(cfg: ClawtowerConfig | None) -> str:
    """Where the names an unknown agent could have been come from: the config file, or the
    built-in simulator cast when there is none (and where that file would be)."""
    if cfg is None or not cfg.agents:
        return ""
    names = ", ".join(sorted(cfg.agents))
    if cfg.path is not None:
        return f"; {cfg.path.name} has {names}"
    return f"; the built-in simulator cast has {names}; no clawtower.yaml at {config_path()[0]}"


def _set_spec(tx: WriteTx, name: str, config: AgentSpecConfig, source: str, by: str) -> str:
    row = tx.one("SELECT agent_id FROM agent_specs WHERE name=?", (name,))
    agent_id = row["agent_id"] if row else new_id("ag")
    tx.emit(NewEvent(entity_id=agent_id, actor=by or "operator", role="operator",
                     payload=sev.AgentSpecSet(name=name, config=config.model_dump(mode="json"),
                                              source=source)))
    return str(agent_id)


def _default_spec(tx: WriteTx, by: str) -> AgentSpec:
    """The spec a session gets when none is named: "default", created on first use."""
    row = tx.one("SELECT * FROM agent_specs WHERE name=?", (DEFAULT_SPEC,))
    if row is None:
        _set_spec(tx, DEFAULT_SPEC, AgentSpecConfig(), "built-in", by)
        row = tx.one("SELECT * FROM agent_specs WHERE name=?", (DEFAULT_SPEC,))
    assert row is not None
    return AgentSpec.from_row(row)
