"""The runbook engine: YAML runbooks, their validating loader, the command parser and evaluation.

Python here implements the step kinds and the condition language; what the runbook *says* (branches,
valid decisions, approval policies, preconditions, durations) lives only in ``runbooks/*.yaml``.
"""

from __future__ import annotations

from bot.runbook.evaluate import DecisionVerdict, Evaluation, check_decision, evaluate
from bot.runbook.helptext import help_text
from bot.runbook.installation import LimitSpec, ReconcilerSpec, WorkerSpec
from bot.runbook.loader import load_runbooks
from bot.runbook.model import BranchSpec, CommandSpec, DecisionSpec, RunbookSet
from bot.runbook.parser import ParsedCommand, decode_slack, parse_command
from bot.runbook.vocabulary import FACT_NAMES, STEP_KINDS

__all__ = [
    "DecisionVerdict",
    "Evaluation",
    "ParsedCommand",
    "decode_slack",
    "help_text",
    "parse_command",
    "check_decision",
    "evaluate",
    "FACT_NAMES",
    "STEP_KINDS",
    "BranchSpec",
    "CommandSpec",
    "DecisionSpec",
    "LimitSpec",
    "ReconcilerSpec",
    "RunbookSet",
    "WorkerSpec",
    "load_runbooks",
]
