"""YAML as Lobster reads it: the YAML 1.2 core schema, with core.safe_yaml's bounds.

PyYAML implements YAML 1.1, where `on`, `yes`, `no` are booleans, `1e3` is a string and
`2024-01-01` a date; Lobster (npm `yaml`) reads those as the strings "on", "yes", "no", the
number 1000 and the string "2024-01-01". Workflow args and stdin values must come out the same,
so the implicit resolvers are swapped for the 1.2 core ones; everything else (no aliases,
node, byte and depth caps, error wording) is the bounded loader's.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from .. import safe_yaml
from .jsvalues import MAX_SAFE

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_DROP = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
         "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value",
         "tag:yaml.org,2002:merge"}


class _Loader12(safe_yaml._BoundedLoader):
    yaml_implicit_resolvers: dict[Any, Any] = {
        k: [(tag, rx) for tag, rx in v if tag not in _DROP]
        for k, v in safe_yaml._BoundedLoader.yaml_implicit_resolvers.items()
    }


for _tag, _rx, _first in (
        ("tag:yaml.org,2002:bool", _BOOL, list("tTfF")),
        ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""]),
        ("tag:yaml.org,2002:int", _INT, list("-+0123456789")),
        ("tag:yaml.org,2002:float", _FLOAT, list("-+.0123456789"))):
    _Loader12.add_implicit_resolver(_tag, _rx, _first)


def _int12(loader: yaml.SafeLoader, node: yaml.Node) -> int | float:
    """An integer as JavaScript holds it: beyond 2**53, a double."""
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    if text.startswith("0o"):
        value = int(text[2:], 8)
    elif text.startswith("0x"):
        value = int(text[2:], 16)
    else:
        value = int(text, 10)
    return value if -MAX_SAFE <= value <= MAX_SAFE else float(value)


def _float12(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    text = str(loader.construct_scalar(node)).lower()  # type: ignore[arg-type]
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if text == ".nan":
        return float("nan")
    return float(text)


_Loader12.add_constructor("tag:yaml.org,2002:int", _int12)
_Loader12.add_constructor("tag:yaml.org,2002:float", _float12)


def loads(text: str, source: str) -> Any:
    """Parse YAML 1.2 (core schema) from `text`; ValidationError naming `source` on failure."""
    return safe_yaml.loads(text, source, _Loader12)
