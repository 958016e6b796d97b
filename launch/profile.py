"""Deployment profiles: YAML files naming the model, the server arguments, the environment and
the health timeout. A profile may `extends:` another; the built-in ones are in launch/profiles/.

    description: what this deployment is for
    extends: cpu-demo              # optional: start from another profile
    build: cpu                     # cpu | gpu | any: which vLLM build it is meant for
    model: Qwen/Qwen2.5-7B-Instruct  # a hub id or a directory; `{models}` is slogate's model cache
    generate_model: demo           # optional: `slogate model make` it when missing (demo | tiny)
    served_model_name: qwen
    args:                          # server flags without the leading --
      max-model-len: 8192
      enable-prefix-caching: true  # true -> --flag, false -> --no-flag, null removes an inherited flag
    env: {HF_HUB_OFFLINE: "1"}
    health_timeout_s: 600
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from slogate.launch.installation import slogate_home

BUILTIN_DIR = Path(__file__).parent / "profiles"
_KEYS = {
    "description",
    "extends",
    "build",
    "model",
    "generate_model",
    "served_model_name",
    "args",
    "env",
    "health_timeout_s",
}
_BUILDS = ("cpu", "gpu", "any")


class ProfileError(ValueError):
    """A malformed or missing profile; str() names the file and the field."""


@dataclass(frozen=True)
class Profile:
    name: str
    source: Path
    model: str
    build: str = "any"
    description: str = ""
    generate_model: str | None = None
    served_model_name: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    health_timeout_s: float = 600.0

    @property
    def model_path(self) -> str:
        return self.model.replace("{models}", str(slogate_home() / "models"))

    def server_args(self) -> list[str]:
        """The flags after `--model`, in profile order."""
        out: list[str] = []
        if self.served_model_name:
            out += ["--served-model-name", self.served_model_name]
        for key, value in self.args.items():
            flag = f"--{key}"
            if value is True:
                out.append(flag)
            elif value is False:
                out.append(f"--no-{key}")
            elif isinstance(value, list):
                for item in value:
                    out += [flag, str(item)]
            elif isinstance(value, dict):
                out += [flag, json.dumps(value)]
            else:
                out += [flag, str(value)]
        return out


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ProfileError(f"{p}: profile file not found")
        return p
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if not builtin.exists():
        known = ", ".join(sorted(q.stem for q in BUILTIN_DIR.glob("*.yaml")))
        raise ProfileError(f"no profile named {name_or_path!r} (built-in: {known}; or give a .yaml path)")
    return builtin


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ProfileError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a mapping")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ProfileError(f"{path}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_KEYS))})")
    for key in ("args", "env"):
        if key in data and not isinstance(data[key], dict):
            raise ProfileError(f"{path}: field {key!r}: must be a mapping")
    return data


def load_profile(name_or_path: str, _seen: tuple[Path, ...] = ()) -> Profile:
    path = resolve_path(name_or_path).resolve()
    if path in _seen:
        raise ProfileError(f"{path}: field 'extends': cycle through {' -> '.join(p.stem for p in (*_seen, path))}")
    data = _read(path)
    merged: dict[str, Any] = {"args": {}, "env": {}}
    parent = data.get("extends")
    if parent is not None:
        if not isinstance(parent, str):
            raise ProfileError(f"{path}: field 'extends': must be a profile name or path")
        base_path = parent if not parent.endswith((".yaml", ".yml")) else str(path.parent / parent)
        base = load_profile(base_path, (*_seen, path))
        merged = {
            "model": base.model,
            "build": base.build,
            "description": base.description,
            "generate_model": base.generate_model,
            "served_model_name": base.served_model_name,
            "args": dict(base.args),
            "env": dict(base.env),
            "health_timeout_s": base.health_timeout_s,
        }
    for key, value in data.items():
        if key == "extends":
            continue
        if key in ("args", "env"):
            for k, v in value.items():
                if v is None:
                    merged[key].pop(k, None)
                else:
                    merged[key][k] = str(v) if key == "env" else v
        else:
            merged[key] = value
    if not isinstance(merged.get("model"), str) or not merged["model"]:
        raise ProfileError(f"{path}: field 'model': required (a hub id or a model directory)")
    if merged.get("build", "any") not in _BUILDS:
        raise ProfileError(f"{path}: field 'build': must be one of {', '.join(_BUILDS)}, got {merged['build']!r}")
    timeout = merged.get("health_timeout_s", 600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ProfileError(f"{path}: field 'health_timeout_s': must be a positive number, got {timeout!r}")
    for key in ("args",):
        for flag in merged[key]:
            if not isinstance(flag, str) or flag.startswith("-"):
                raise ProfileError(f"{path}: field 'args': write flag names without dashes, got {flag!r}")
    return Profile(name=path.stem, source=path, **{k: v for k, v in merged.items() if v is not None or k == "model"})
