"""The Report of flashref.check: the C++ judge's result as Python objects. str(report) is the
table `flashref check` prints, report.to_dict() the JSON of `flashref check --json`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

# Keys of a finding's JSON that are not its evidence.
_FINDING_KEYS = ("code", "tensors", "explanation")


@dataclass(frozen=True)
class Finding:
    """What the kernel most likely did wrong: a stable code (the CLI's), the tensors it
    explains, one line for people, and the values behind it."""

    code: str
    tensors: Tuple[str, ...]
    explanation: str
    evidence: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Finding":
        evidence = {k: v for k, v in j.items() if k not in _FINDING_KEYS}
        return cls(j["code"], tuple(j["tensors"]), j["explanation"], evidence)

    def __str__(self) -> str:
        return f"[{self.code}] ({', '.join(self.tensors)}) {self.explanation}"


@dataclass(frozen=True)
class TensorVerdict:
    """One tensor's judgement: its error against the gold next to the baseline's, the limit
    the rule allows, and where its worst element is."""

    name: str
    passed: bool
    error: float           # max |candidate - gold|
    baseline_error: float  # max |baseline - gold|
    limit: float           # k * baseline_error + floor
    ratio: float           # error / limit
    rel_l2: float
    nonfinite: int         # NaN and inf elements in the candidate
    worst: Dict[str, Any]  # b, h, s, i, candidate, gold, tile
    reason: str

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "TensorVerdict":
        c = j["candidate"]
        nonfinite = int(c.get("nan", 0)) + int(c.get("pos_inf", 0)) + int(c.get("neg_inf", 0))
        return cls(j["tensor"], bool(j["pass"]), _num(j["candidate_err"]), _num(j["baseline_err"]),
                   _num(j["limit"]), _num(j["ratio"]), _num(c["rel_l2"]), nonfinite,
                   dict(c["worst"]), j.get("reason", ""))


def _num(x: Any) -> float:
    # The JSON writes non-finite numbers as null.
    return float("nan") if x is None else float(x)


class Report:
    """The judgement of a candidate. `passed` is True when every given tensor passes."""

    def __init__(self, core_report: Any):
        self._table: str = core_report.table()
        self._dict: Dict[str, Any] = json.loads(core_report.json())
        d = self._dict
        self.passed: bool = bool(d["passed"])
        self.tensors: Dict[str, TensorVerdict] = {
            t["tensor"]: TensorVerdict.from_json(t) for t in d["tensors"]}
        self.findings: List[Finding] = [Finding.from_json(f) for f in d["findings"]]
        # Failed tensors no finding explains: where their wrong elements are.
        self.lead: List[Dict[str, Any]] = list(d.get("lead", []))
        self.problem: Dict[str, Any] = d["problem"]
        self.precision: Dict[str, Any] = d["precision"]

    @property
    def codes(self) -> List[str]:
        """The findings' codes, in the report's order."""
        return [f.code for f in self.findings]

    def __str__(self) -> str:
        return self._table

    def __repr__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        codes = f" findings={self.codes}" if self.findings else ""
        return f"<flashref.Report {verdict} tensors={list(self.tensors)}{codes}>"

    def to_dict(self) -> Dict[str, Any]:
        """The report as `flashref check --json` writes it (a fresh copy)."""
        return json.loads(json.dumps(self._dict))
