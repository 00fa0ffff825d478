"""The Report of flashref.check: the C++ judge's result as Python objects. str(report) is the
table `flashref check` prints, report.to_dict() the JSON of `flashref check --json`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

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
    # The JSON writes non-finite numbers as null (the states' values as "nan", "inf", "-inf").
    return float("nan") if x is None else float(x)


@dataclass(frozen=True)
class Divergence:
    """The first step (b, h, i, j) where the kernel's states leave Algorithm 1 or 2: the
    quantity ("m", "l", "acc"; "D", "P", "dP", "dS", "dQ_i", "dV_j", "dK_j"), the algorithm (1
    or 2) and its line that computes it, the worst row (a query index; a key index for dV_j and
    dK_j) and column (of d for acc, dQ_i, dV_j, dK_j, the key for P, dP, dS, None for m, l, D)
    with the gold's value there (expected, in the kernel's convention) and the kernel's (found),
    a known cause ("l_not_rescaled", "ds_without_D", ... or ""), and the verdicts of every state
    given at this step and at the step before (j - 1 in the forward and the dQ pass, i - 1 in
    the dK/dV pass). For D, a state of the query tile before any key tile, j is -1."""

    b: int
    h: int
    i: int
    j: int
    quantity: str
    line: int
    formula: str
    row: int
    col: Optional[int]
    expected: float
    found: float
    error: float   # max |found - gold| over the tile's rows
    limit: float   # 2 * the baseline state's error + floor
    ratio: float
    cause: str
    explanation: str
    this_step: List[Dict[str, Any]] = field(default_factory=list)
    previous_step: List[Dict[str, Any]] = field(default_factory=list)
    algorithm: int = 1

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Divergence":
        return cls(int(j["b"]), int(j["h"]), int(j["i"]), int(j["j"]), j["quantity"],
                   int(j["line"]), j["formula"], int(j["row"]),
                   int(j["col"]) if "col" in j else None, _num(j["expected"]), _num(j["found"]),
                   _num(j["candidate_err"]), _num(j["limit"]), _num(j["ratio"]), j["cause"],
                   j["explanation"], list(j["this_step"]), list(j["previous_step"]),
                   int(j.get("algorithm", 1)))

    def __str__(self) -> str:
        where = f"row {self.row}" + (f", column {self.col}" if self.col is not None else "")
        cause = f" [{self.cause}]" if self.cause else ""
        key_tile = f", key tile j = {self.j}" if self.j >= 0 else ""
        return (f"b = {self.b}, h = {self.h}, query tile i = {self.i}{key_tile}: "
                f"{self.quantity}, Alg. {self.algorithm} line {self.line}: {where}: expected "
                f"{self.expected:.7g}, found {self.found:.7g}{cause}")


@dataclass(frozen=True)
class StatesVerdict:
    """The judgement of a kernel's per-step states, of Algorithm 1 (report.states) or 2
    (report.backward_states): passed, the conventions found (m in log2 units, acc normalized at
    every step; dS, dQ, dK scaled inside the loop), per quantity the steps judged and failed
    and the worst step, and this part's first divergence (None when every state follows the
    algorithm)."""

    passed: bool
    tile: Tuple[int, int]
    files: Tuple[str, ...]
    conventions: Dict[str, Any]
    quantities: Dict[str, Dict[str, Any]]
    first_divergence: Optional[Divergence]

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "StatesVerdict":
        first = j["first_divergence"]
        return cls(bool(j["passed"]), (int(j["B_q"]), int(j["B_k"])), tuple(j["files"]),
                   dict(j["conventions"]), {q["quantity"]: dict(q) for q in j["quantities"]},
                   Divergence.from_json(first) if first is not None else None)


class Report:
    """The judgement of a candidate. `passed` is True when every given tensor passes."""

    def __init__(self, core_report: Any):
        self._table: str = core_report.table()
        self._dict: Dict[str, Any] = json.loads(core_report.json())
        d = self._dict
        self.passed: bool = bool(d["passed"])
        # With states= alone no output is judged: no tensors, findings or precision.
        self.tensors: Dict[str, TensorVerdict] = {
            t["tensor"]: TensorVerdict.from_json(t) for t in d.get("tensors", [])}
        self.findings: List[Finding] = [Finding.from_json(f) for f in d.get("findings", [])]
        # Failed tensors no finding explains: where their wrong elements are.
        self.lead: List[Dict[str, Any]] = list(d.get("lead", []))
        self.problem: Dict[str, Any] = d["problem"]
        self.precision: Dict[str, Any] = d.get("precision", {})
        # What another precision makes of a failed float32 candidate (it passes as 3xTF32).
        self.precision_notes: List[str] = list(d.get("precision_notes", []))
        # The states given to check(states=): their verdict, and the first step where they
        # leave Algorithm 1 (None when they follow it, or when no states were given).
        self.states: Optional[StatesVerdict] = (
            StatesVerdict.from_json(d["states"]) if "states" in d else None)
        # The backward states given (D, P, dP, dS, dQ, dV, dK): their verdict against
        # Algorithm 2.
        self.backward_states: Optional[StatesVerdict] = (
            StatesVerdict.from_json(d["backward_states"]) if "backward_states" in d else None)
        # The forward's first divergence when it has one (Algorithm 1 runs first), else the
        # backward's: the JSON's top-level first_divergence, as `flashref check` writes it.
        first = d.get("first_divergence")
        self.first_divergence: Optional[Divergence] = (
            Divergence.from_json(first) if first is not None else None)

    @property
    def codes(self) -> List[str]:
        """The findings' codes, in the report's order."""
        return [f.code for f in self.findings]

    def __str__(self) -> str:
        return self._table

    def __repr__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        codes = f" findings={self.codes}" if self.findings else ""
        states = ""
        given = [v for v in (self.states, self.backward_states) if v is not None]
        if given:
            f = self.first_divergence
            states = (" states=" + ",".join(n for v in given for n in v.files) +
                      (f" first_divergence=(b={f.b}, h={f.h}, i={f.i}, j={f.j}, {f.quantity})"
                       if f is not None else ""))
        return f"<flashref.Report {verdict} tensors={list(self.tensors)}{codes}{states}>"

    def to_dict(self) -> Dict[str, Any]:
        """The report as `flashref check --json` writes it (a fresh copy)."""
        return json.loads(json.dumps(self._dict))
