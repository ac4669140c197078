"""The traces a trace command reads (sim validate, replay, calibrate): each file's traces, checked against the
command's flags and device (sim.apps.trace.input_checks), and one capture given twice said or refused."""

from __future__ import annotations

import argparse
import sys

from sim.apps.trace.input_checks import (contended, inconsistent, overridden, repeated_captures, same_device,
                                         in_sample, truncated, unmodelled)
from sim.apps.trace.parser import load_trace
from sim.core.errors import ConfigError


def load_traces(args: argparse.Namespace, paths, machine=None) -> list:
    """The traces of `paths`; with `machine`, each checked to come from that kind of device (input_checks)."""
    traces = []
    for path in paths:
        for t in load_trace(path, args.model, args.tokens):
            if args.tp is None or all(s.tp == args.tp for s in t.steps):
                traces.append(t)
    sets = [x for x in getattr(args, "set", None) or [] if x.startswith("hw.")]   # the preset as --set changed it
    said = dict.fromkeys(w for t in traces if machine is not None and (w := same_device(t, machine, sets)))
    for w in said:   # once per file, not per TP degree of a vidur table
        print(w, file=sys.stderr)
    for t in traces:
        overridden(t, args.model, args.tokens)
        contended(t)
        unmodelled(t)
        truncated(t)
        inconsistent(t)
    return traces


def load_distinct(args: argparse.Namespace, paths, machine, refuse: bool = False, fitted=()) -> list:
    """load_traces, with one capture given twice (an .ops.csv and its .trace.json.gz, or one path twice) said: counted as
    two, a fit weighed it double and --min-traces passed on one run, and a held-out trace that was a fitted one gave
    an in-sample figure labelled held out (a trial's findings). `refuse`: a ConfigError (calibrate), else a warning
    (validate counts its ops twice, as given); `fitted`: the fit's traces, when these are held out."""
    traces = load_traces(args, paths, machine)
    fitted_sources = {str(t.source) for t in fitted}
    for later, earlier in repeated_captures(traces, fitted):
        if earlier in fitted_sources:
            raise ConfigError(f"--held-out {later}: the capture {earlier} is fitted on; a held-out figure needs "
                              "another capture")
        if refuse:
            raise ConfigError(f"{later}: the same capture as {earlier}; give each capture once (a fit counts it once)")
        print(f"warning: {later}: the same capture as {earlier}; its ops count twice", file=sys.stderr)
    if not refuse:   # validate: a trace the preset was calibrated on is in sample
        in_sample(traces, machine)
    return traces
