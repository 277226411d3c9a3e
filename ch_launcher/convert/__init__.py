"""VMI -> Cloud Hypervisor VmConfig, pure. The single source of truth for what is supported.

`translate()` runs the configurators in order, each a small function over a `Translation`
(KubeVirt's converter habit: one configurator per concern, each tested alone), collects every
problem, and raises `UnsupportedFeatures` with all of them, or returns a `Plan`. `check()` is
the same run for the admission webhook: it returns problems and warnings instead of raising.

Neither function does I/O and neither raises anything but `UnsupportedFeature(s)`: a VMI that
does not decode becomes problems with the offending field paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ch_launcher.convert.context import (
    LauncherEnv,
    LauncherOptions,
    PermittedHostDevices,
    PodFacts,
    SMBios,
    Translation,
)
from ch_launcher.convert.errors import Degradation, UnsupportedFeature, UnsupportedFeatures, naming_field
from ch_launcher.convert.memory import NoMemoryRequested
from ch_launcher.convert.plan import Plan
from ch_launcher.convert.registry import CONFIGURATORS
from ch_launcher.kubevirt.vmi import InvalidVMI, VirtualMachineInstance, parse_vmi

__all__ = [
    "Degradation", "LauncherEnv", "LauncherOptions", "NoMemoryRequested", "PermittedHostDevices", "Plan",
    "PodFacts", "SMBios", "Translation", "UnsupportedFeature", "UnsupportedFeatures", "Verdict", "check",
    "naming_field", "translate",
]


@dataclass
class Verdict:
    """Everything `check()` found: no problems means the VMI runs on Cloud Hypervisor."""

    problems: list[UnsupportedFeature] = field(default_factory=list)
    warnings: list[Degradation] = field(default_factory=list)
    plan: Plan | None = None
    # Why Cloud Hypervisor could not live-migrate it, `(reason, message)` (`convert/migration.py`),
    # found even when there are problems
    migration_blockers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.problems


def _run(vmi: VirtualMachineInstance, env: LauncherEnv, options: LauncherOptions) -> Translation:
    t = Translation(vmi, env, options)
    for configurator in CONFIGURATORS:
        with t.checking():
            configurator(t)
    return t


def check(vmi: VirtualMachineInstance | dict[str, Any] | bytes | str,
          env: LauncherEnv | None = None, options: LauncherOptions | None = None) -> Verdict:
    """Translate and report instead of raising. Used by the admission webhook."""
    try:
        model = vmi if isinstance(vmi, VirtualMachineInstance) else parse_vmi(vmi)
    except InvalidVMI as e:
        causes = e.causes or [("", str(e))]
        return Verdict(problems=[UnsupportedFeature(p, m, "FieldValueInvalid") for p, m in causes])
    t = _run(model, env or LauncherEnv(), options or LauncherOptions())
    plan = None if t.problems else t.plan()
    return Verdict(problems=t.problems, warnings=t.warnings, plan=plan, migration_blockers=list(t.migration_blockers))


def translate(vmi: VirtualMachineInstance | dict[str, Any] | bytes | str,
              env: LauncherEnv | None = None, options: LauncherOptions | None = None) -> Plan:
    """Translate a VMI into a Plan, or raise UnsupportedFeatures listing every problem."""
    verdict = check(vmi, env, options)
    if verdict.problems:
        raise UnsupportedFeatures(verdict.problems)
    assert verdict.plan is not None
    return verdict.plan
