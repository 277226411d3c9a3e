"""The add-on's configuration file (`ch-admission --config`), schema and loader.

`config.example.yaml` beside this module is the complete, commented example; it is also the
default the offline commands use when no `--config` is given. Unknown keys are refused, so a
typo fails at start-up with the key's path instead of being ignored. `load_config()` raises
`ConfigError` (a one-line message naming the file and the key) and nothing else.
"""

from __future__ import annotations

import pathlib
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from admission.versions import VersionRange

EXAMPLE = pathlib.Path(__file__).with_name("config.example.yaml")
DEFAULT_PATH = "/etc/kubevirt-ch/config.yaml"


class ConfigError(ValueError):
    """A configuration file that is missing, not YAML, or does not fit the schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LauncherConfig(_Strict):
    image: str = Field(min_length=1)
    command: list[str] = Field(min_length=1)
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None

    @field_validator("command")
    @classmethod
    def _no_empty_words(cls, v: list[str]) -> list[str]:
        if any(not word for word in v):
            raise ValueError("command words must not be empty")
        return v


class KubeVirtConfig(_Strict):
    supportedVersions: str = ""
    namespace: str = Field(default="kubevirt", min_length=1)
    name: str = Field(default="kubevirt", min_length=1)

    @field_validator("supportedVersions")
    @classmethod
    def _range(cls, v: str) -> str:
        VersionRange.parse(v)  # raises ValueError with the bad constraint
        return v

    @property
    def version_range(self) -> VersionRange:
        return VersionRange.parse(self.supportedVersions)


class OverheadConfig(_Strict):
    additionalGuestMemoryOverheadRatio: str = "1.0"
    launcherMiB: float | None = Field(default=None, gt=0)
    vmmMiB: float | None = Field(default=None, gt=0)

    @field_validator("additionalGuestMemoryOverheadRatio", mode="before")
    @classmethod
    def _ratio(cls, v: Any) -> str:
        # KubeVirt keeps the ratio as a string and refuses values below 1.0; so do we.
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(f"must be a number as a string, e.g. \"1.0\", got {v!r}")
        try:
            ratio = Decimal(str(v))
        except InvalidOperation:
            raise ValueError(f"must be a number, got {v!r}") from None
        if not ratio.is_finite() or ratio < 1:
            raise ValueError(f"must be at least 1.0, got {v!r}")
        return str(v)

    @property
    def ratio(self) -> Decimal:
        return Decimal(self.additionalGuestMemoryOverheadRatio)


class Config(_Strict):
    launcher: LauncherConfig
    kubevirt: KubeVirtConfig = Field(default_factory=KubeVirtConfig)
    overhead: OverheadConfig = Field(default_factory=OverheadConfig)


def parse_config(data: Any, source: str = "config") -> Config:
    """Validate an already decoded document. Raises ConfigError naming `source` and the keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with 'launcher', 'kubevirt' and 'overhead', "
                          f"got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors(include_url=False):
            path = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{path}: {msg}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


def load_config(path: str | pathlib.Path | None = None) -> Config:
    """Load and validate a YAML config file; `None` loads the packaged example (the defaults)."""
    p = pathlib.Path(path) if path is not None else EXAMPLE
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: configuration file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the configuration file: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}".replace("\n", " ")) from None
    return parse_config(data, str(p))
