"""The figures of ``benchmarks/fleet.py``: from a sweep's events and leases, the makespan
against its bounds (the device's core-seconds, the host's memory-seconds), the leased core time
in which no device work was done, the peak of host memory; and their report."""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from typing import Any

from fleet_model import DOWNLOADED_UNDER, GB, MAX_CORES, Model, size_label

TIB = 1024**4


# --- the figures ------------------------------------------------------------------------------


def peak_host(events: list[dict[str, Any]]) -> tuple[int, float]:
    """The most host memory the phases in progress held at once, and when."""
    steps = sorted(
        [(e["start"], e["host_bytes"]) for e in events]
        + [(e["end"], -e["host_bytes"]) for e in events],
        key=lambda step: (step[0], step[1]),  # a phase that ends frees before one starts
    )
    held, peak, when = 0, 0, 0.0
    for at, change in steps:
        held += change
        if held > peak:
            peak, when = held, at
    return peak, when


def figures(
    models: list[Model],
    events: list[dict[str, Any]],
    leases: dict[str, dict[str, Any]],
    t0: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The benchmark's figures, in simulated seconds (real ones x ``args.scale``)."""
    scale, cores, at_once = args.scale, args.cores, max(1, args.workers) * args.lanes
    run = [m for m in models if m.cores is not None]
    busy_core_s = sum(m.cores * m.busy_s for m in run if m.cores)
    longest = max((m.busy_s for m in run), default=0.0)
    by_pid: dict[int, list[dict[str, Any]]] = {}  # a run's events, by its pid or its parent's
    for event in events:  # (a rank's parent is the run, which holds the lease)
        by_pid.setdefault(event["pid"], []).append(event)
        if event["ppid"] != event["pid"]:
            by_pid.setdefault(event["ppid"], []).append(event)
    mine: dict[str, list[dict[str, Any]]] = {}  # lease token -> the events of its run
    for token, lease in leases.items():
        found = {id(e): e for pid in lease.get("pids", ()) for e in by_pid.get(pid, [])}
        if found:
            mine[token] = list(found.values())
    held = {t: leases[t] for t in mine}
    leased = sum(lz["count"] * (lz["end"] - lz["start"]) for lz in held.values())
    in_phase: dict[str, float] = {}
    for token, events_of_run in mine.items():
        for e in events_of_run:
            spent = held[token]["count"] * (e["end"] - e["start"])
            in_phase[e["phase"]] = in_phase.get(e["phase"], 0.0) + spent
    busy = in_phase.get("compile", 0.0) + in_phase.get("device", 0.0)
    idle_parts = {p: v / leased for p, v in in_phase.items() if p not in ("compile", "device")}
    idle_parts["the sweep's own (outside the run's phases)"] = 1 - sum(in_phase.values()) / leased
    # the sweep's own time, in real seconds: inside each lease (before and after its run's
    # phases), and between a worker's leases (plan, script, waiting for cores, the report)
    own = {
        t: lz["end"] - lz["start"] - sum(e["end"] - e["start"] for e in mine[t])
        for t, lz in held.items()
    }
    own_core_s = sum(held[t]["count"] * v for t, v in own.items())
    unscaled = leased - own_core_s + own_core_s / scale  # the sweep's own time at real speed
    by_worker: dict[int, list[dict[str, Any]]] = {}
    for lz in held.values() if args.lanes == 1 else ():  # a lane's leases are not told apart
        by_worker.setdefault(min(lz["pids"]), []).append(lz)  # the worker: its oldest holder
    gaps = [
        b["start"] - a["end"]
        for ordered in (sorted(v, key=lambda lz: lz["start"]) for v in by_worker.values())
        for a, b in itertools.pairwise(ordered)
    ]
    last = max(held, key=lambda t: held[t]["end"])
    end = held[last]["end"]
    peak, at = peak_host(events)
    holders = sorted(
        (e for e in events if e["start"] <= at < e["end"]), key=lambda e: -e["host_bytes"]
    )
    return {
        "makespan_s": (end - t0) * scale,
        "bound_s": max(busy_core_s / cores, longest),
        "busy_core_s": busy_core_s,
        "longest_s": longest,
        "leased_core_s": leased * scale,
        "idle": 1 - busy / leased,
        "idle_parts": idle_parts,
        "mean_cores_leased": leased / (end - t0),
        "last": {
            "model": mine[last][0]["model"],
            "cores": held[last]["count"],
            "leased_at_s": (held[last]["start"] - t0) * scale,
            "held_s": (end - held[last]["start"]) * scale,
        },
        "peak_host_bytes": peak,
        "peak_host_at_s": (at - t0) * scale,
        "peak_host_holders": [
            f"{e['model']} {e['phase']} {e['host_bytes'] / GB:.0f} GB" for e in holders[:4]
        ],
        "own_in_lease_ms": 1000 * statistics.median(own.values()),
        "own_between_leases_ms": 1000 * statistics.median(gaps) if gaps else None,
        "idle_own_unscaled": 1 - busy / unscaled,
        "runs": len(mine),
        "leases_without_a_run": sum(1 for t, lz in leases.items() if t not in mine),
        "workers_bound_s": sum(m.busy_s for m in run) / at_once,
        "workers_bound_today_s": sum(m.download_s + m.busy_s + m.reference_s for m in run)
        / at_once,
        "host_bound_s": host_bound(events, args) * scale,
        "references": sum(1 for e in events if e["phase"] == "reference"),
    }


def host_bound(events: list[dict[str, Any]], args: argparse.Namespace) -> float:
    """The host's lower bound on the makespan, in real seconds: the memory-seconds of the
    phases that ran (the references computed, the compiles and device runs) over the host's
    memory. A sweep that holds its phases' memory, and no more than the host has, takes at
    least that long; the references of the largest models dominate it."""
    area = sum((e["end"] - e["start"]) * e["host_bytes"] for e in events)
    return area / (args.host_tib * TIB)


def print_schedule(models: list[Model], cores: int, between_s: float, workers: int) -> None:
    """The makespan the sweep's policy would reach at each ``-n`` (``workers``, the run's, among
    them): modelled, not measured."""
    import fleet_schedule

    counts = sorted({workers, 16, 32, 48, 64, 96})
    cells = ", ".join(
        f"-n {n} {inline:.2f}x ({ahead:.2f}x)"
        for n, inline, ahead in fleet_schedule.table(models, cores, counts, between_s)
    )
    print(
        f"  modelled (fleet_schedule.py, {between_s:.0f} s of the sweep's own between leases): "
        f"makespan / bound {cells}; in brackets, were each reference computed ahead of its "
        "worker's path"
    )


def report(
    models: list[Model],
    found: dict[str, Any],
    args: argparse.Namespace,
    sweep: dict[str, Any],
) -> None:
    """The figures, in hours and shares of the simulated sweep."""
    run = [m for m in models if m.cores is not None]
    h = 3600.0
    print(
        f"fleet: {len(models)} models ({len(run)} sized to at most {MAX_CORES} cores, "
        f"{len(models) - len(run)} larger), {args.cores} simulated cores, -n {args.workers}, "
        f"{args.lanes} lane{'s' if args.lanes > 1 else ''}, "
        f"scale {args.scale:g}, downloads at {args.bandwidth:g} GB/s, seed {args.seed}"
    )
    shares = ", ".join(
        f"<{size_label(int(size))} {sum(m.parameters < size for m in models) / len(models):.0%}"
        f" (of downloads {share:.0%})"
        for size, share in DOWNLOADED_UNDER
    )
    print(f"  sizes, by model: {shares}")
    print(
        f"  sweep: {sweep['summary']}; {sweep['wall_s']:.0f} s real, the clock started "
        f"{sweep['warm_s']:.0f} s in, when {sweep['warm']}/{sweep['workers']} workers were warm"
    )
    ratio = found["makespan_s"] / found["bound_s"]
    print(
        f"makespan: {found['makespan_s'] / h:.2f} h, lower bound {found['bound_s'] / h:.2f} h "
        f"(device work {found['busy_core_s'] / h:.0f} core-h / {args.cores} cores; the longest "
        f"model's {found['longest_s'] / 60:.0f} min): {ratio:.2f}x (target <= 1.15)"
    )
    host_bound_s = found.get("host_bound_s", 0.0)
    print(
        f"  the host's bound: {host_bound_s / h:.2f} h (the memory-seconds of the phases that "
        f"ran, {found.get('references', 0)} CPU references among them, over "
        f"{args.host_tib:g} TiB): makespan / the larger bound "
        f"{found['makespan_s'] / max(found['bound_s'], host_bound_s):.2f}x"
    )
    at_once = max(1, args.workers) * args.lanes
    print(
        f"  {at_once} at once ({args.workers} workers, {args.lanes} lanes each), a model at a time "
        "each: their device work alone takes "
        f"{found['workers_bound_s'] / h:.2f} h, with today's phases "
        f"{found['workers_bound_today_s'] / h:.2f} h; cores leased on average "
        f"{found['mean_cores_leased']:.1f} of {args.cores}"
    )
    between_s = (found["own_between_leases_ms"] or 0.0) / 1000 * args.scale
    print_schedule(models, args.cores, between_s, at_once)
    last = found["last"]
    print(
        f"  last to finish: {last['model']} on {last['cores']} cores, leased "
        f"{last['leased_at_s'] / h:.2f} h in, for {last['held_s'] / h:.2f} h"
    )
    parts = ", ".join(f"{name} {share:.1%}" for name, share in found["idle_parts"].items())
    print(
        f"leased but idle: {found['idle']:.1%} of {found['leased_core_s'] / h:.0f} leased "
        f"core-h (target < 3%): {parts}"
    )
    gap = found["own_between_leases_ms"]
    between = "n/a (lanes)" if gap is None else f"{gap:.0f} ms"
    print(
        f"  the sweep's own time, real: {found['own_in_lease_ms']:.0f} ms inside a lease and "
        f"{between} between a worker's leases (medians), each "
        f"{args.scale:g} times that simulated; at real speed leased-idle would be "
        f"{found['idle_own_unscaled']:.1%}"
    )
    host, peak = args.host_tib * TIB, found["peak_host_bytes"]
    verdict = "overcommitted" if peak > host else "within it"
    print(
        f"peak host memory in use: {peak / TIB:.2f} TiB of {host / TIB:g} TiB ({verdict}), "
        f"{found['peak_host_at_s'] / h:.2f} h in: {'; '.join(found['peak_host_holders'])}"
    )
    print(
        f"  runs counted: {found['runs']}; leases without a run's phases: "
        f"{found['leases_without_a_run']} (the warm-ups; runs stopped before a phase)"
    )
    print(json.dumps({"args": vars(args) | {"keep": str(args.keep)}, **found}, default=str))
