"""Batch's autoscale arithmetic, played: the stack's own formula text run with Batch's documented semantics, and the
nodes Batch would add to a pool after a task is retried or requeued.

The rehearsal's pool holds exactly the nodes the job asks for; its other local nodes are Azure's reserve, which join
the pool only when the formula's target exceeds the nodes the pool holds, as Batch adds nodes up to the target
(https://learn.microsoft.com/azure/batch/batch-automatic-scaling: "Batch adjusts the target number of each type of
node in the pool to the number that your autoscale formula specifies"). A node taken out of scheduling still counts
in $CurrentDedicatedNodes ("The current number of dedicated compute nodes", the same page), so it gets the retry no
replacement unless it leaves the pool (Pool - Remove Nodes: training/cluster/keep_out.py).
"""
from __future__ import annotations

import re


class Interval(float):
    """A timeinterval (a double times TimeInterval_Minute stays one)."""

    def __mul__(self, other):
        return Interval(float(self) * other)

    __rmul__ = __mul__


class Window:
    """A metric sampled every 30 seconds, newest first ("A sample is 30 seconds worth of metrics data", the page's
    GetSample): GetSample(n) gives the newest n, GetSample(interval) the samples inside it."""

    def __init__(self, *values, percent=100):
        self.values, self.percent = list(values), percent

    def GetSample(self, arg):  # noqa: N802 - Batch's name
        return self.values[:int(float(arg) // 30)] if isinstance(arg, Interval) else self.values[:int(arg)]

    def GetSamplePercent(self, _interval):  # noqa: N802
        return self.percent


def _flatten(args):
    return [v for a in args for v in (a if isinstance(a, list) else [a])]


def evaluate_formula(formula: str, **metrics) -> dict:
    """Run an autoscale formula with Batch's documented semantics for what it uses: statements `$x = expr;`, the
    ternary, comparisons, + and *, max/min over doubles and vectors, GetSample(n) (the newest n samples),
    GetSample(interval) (the samples in it), GetSamplePercent (https://learn.microsoft.com/azure/batch/
    batch-automatic-scaling). Parsed by a small recursive-descent reader, so the formula text itself is what runs."""
    tokens = re.findall(r"\$?[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?|[?:;(),.*+<>=-]", formula)
    env = {"TimeInterval_Minute": Interval(60), **metrics}
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take(expected=None):
        nonlocal pos
        token = tokens[pos]
        assert expected is None or token == expected, (token, expected, formula)
        pos += 1
        return token

    def primary():
        token = take()
        if token == "(":
            value = ternary()
            take(")")
        elif token in ("max", "min"):
            take("(")
            args = [ternary()]
            while peek() == ",":
                take(",")
                args.append(ternary())
            take(")")
            value = (max if token == "max" else min)(_flatten(args))
        elif re.fullmatch(r"\d+(?:\.\d+)?", token):
            value = float(token)
        else:
            value = env[token]
        while peek() == ".":
            take(".")
            method = getattr(value, take())
            take("(")
            value = method(ternary())
            take(")")
        return value

    def product():
        value = primary()
        while peek() == "*":
            take()
            value = value * primary()
        return value

    def total():
        value = product()
        while peek() in ("+", "-"):
            value = value + product() if take() == "+" else value - product()
        return value

    def comparison():
        value = total()
        while peek() in ("<", ">"):
            value = float(value < total()) if take() == "<" else float(value > total())
        return value

    def ternary():
        condition = comparison()
        if peek() != "?":
            return condition
        take("?")
        yes = ternary()
        take(":")
        no = ternary()
        return yes if condition else no

    while peek() is not None:
        name = take()
        take("=")
        env[name] = ternary() if name != "$NodeDeallocationOption" else take()
        take(";")
    return env


def target_after_retry(formula: str, instances: int, current: int, spot: bool = False) -> int:
    """The formula's target the moment a task of `instances` instances that ran until the previous sample waits
    again (a retry, a requeue), on a pool whose nodes of the stack's kind number `current` (offline ones included):
    the newest samples say it waits and nothing runs, the 10 before that (5 minutes) that it ran."""
    kind, other = ("LowPriority", "Dedicated") if spot else ("Dedicated", "LowPriority")
    history = 10
    env = evaluate_formula(formula, **{
        "$ActiveTasks": Window(instances, *[0] * history), "$RunningTasks": Window(0, *[1] * history),
        "$PendingTasks": Window(instances, *[1] * history),
        f"$Current{kind}Nodes": float(current), f"$Current{other}Nodes": 0.0})
    return int(env[f"$Target{kind}Nodes"])


def nodes_added(formula: str, instances: int, in_pool: int, spot: bool = False) -> int:
    """How many nodes Batch adds for a retried or requeued task of `instances` instances to a pool holding `in_pool`
    nodes (offline ones included): the formula's target beyond the pool, never fewer than 0."""
    return max(0, target_after_retry(formula, instances, in_pool, spot) - in_pool)
