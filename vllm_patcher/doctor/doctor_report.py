"""What doctor found, and what --fix wrote: the objects the text and --json outputs render."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..findings import PROBLEM, WARNING, Finding
from ..models.configs import AUX_KEY, DrafterModel, TargetModel
from ..models.hub import ModelSource
from .rules import GUESSED, AuxLayerPlan


@dataclass(frozen=True)
class WrittenValue:
    """One value ``--fix`` wrote, and whether it was known or guessed (and from what)."""

    key: str
    value: object
    basis: str  # KNOWN | GUESSED
    based_on: str


@dataclass(frozen=True)
class AppliedFix:
    config: str
    backup: str
    ids: tuple[int, ...]
    values: tuple[WrittenValue, ...] = ()

    @property
    def guessed(self) -> bool:
        return any(v.basis == GUESSED for v in self.values)

    def to_dict(self) -> dict[str, object]:
        return {
            "config": self.config,
            "backup": self.backup,
            AUX_KEY: list(self.ids),
            "written": [asdict(v) for v in self.values],
        }


@dataclass
class DoctorReport:
    vllm_version: str
    # None when the two arguments do not play their roles (swapped, or a drafter given as the
    # model): nothing else is judged then, because every other check would be about the wrong file.
    target: TargetModel | None
    drafter: DrafterModel | None
    aux: AuxLayerPlan | None
    findings: list[Finding] = field(default_factory=list)
    fix: AppliedFix | None = None  # what --fix wrote before these findings were taken
    model_source: ModelSource | None = None
    drafter_source: ModelSource | None = None

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == PROBLEM]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == WARNING]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        target: dict[str, object] | None = None
        if self.target is not None:
            target = asdict(self.target)
            target["source"] = self.model_source.to_dict() if self.model_source else None
        drafter: dict[str, object] | None = None
        if self.drafter is not None:
            drafter = {
                "path": self.drafter.path,
                "source": self.drafter_source.to_dict() if self.drafter_source else None,
                "architectures": self.drafter.config.get("architectures"),
                "weight_files": list(self.drafter.weight_files),
                "tensors": len(self.drafter.tensors),
            }
        return {
            "ok": self.ok,
            "vllm_version": self.vllm_version,
            "target": target,
            "drafter": drafter,
            "aux_layers": self.aux.to_dict() if self.aux is not None else None,
            "findings": [asdict(f) for f in self.findings],
            "problems": len(self.problems),
            "warnings": len(self.warnings),
            "fix": self.fix.to_dict() if self.fix else None,
        }
