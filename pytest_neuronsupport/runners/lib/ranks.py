"""Several cores: ``run.py`` starts one ``torch.distributed`` rank per core.

Each rank is forked from the launcher, which has imported torch and transformers but started
no device runtime (each rank's device ops start it), as the plugin's fork server forks a
one-core run: the imports are paid once, not once a rank. A rank gets ``RANK``, ``WORLD_SIZE``
and a rendezvous address (as ``torchrun`` sets them), is pinned to its core by the device's
``rank_env``, and dies with the launcher. Rank 0 writes the verdict. Standard library only.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from pytest_neuronsupport.runners.lib.processes import die_with_parent, exit_description
from pytest_neuronsupport.runners.lib.protocol import Result, write_verdict

#: How long the other ranks may take to finish once one rank has failed.
RANK_GRACE_S = 5.0
#: Where a rank other than 0 writes the failure it met, for the launcher to report.
RANK_VERDICT_ENV = "NEURONSUPPORT_RANK_VERDICT"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def be_rank(env: dict[str, str], argv: list[str], rank: Callable[[], int]) -> None:
    """In the forked rank: its environment and arguments, then its run."""
    die_with_parent()
    os.environ.update(env)
    sys.argv[1:] = argv
    sys.exit(rank())


def launch_ranks(params: dict[str, Any], ops_class: Any, rank: Callable[[], int]) -> int:
    """Start one rank per core (each runs ``rank()``), wait for them, and report one that failed.

    Rank 0 writes the verdict. If another rank fails first (a crash, a failed phase), the others
    get a few seconds, then are killed, and the verdict is that rank's: FAIL(other) naming how it
    ended, or the phase it failed.
    """
    world, argv = int(params["cores"]), sys.argv[1:]
    path = argv[argv.index("--result") + 1] if "--result" in argv else None
    said = [f"{path or os.path.abspath(sys.argv[0])}.rank{r}.json" for r in range(world)]
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    base.update(WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    sys.stdout.flush(), sys.stderr.flush()  # nothing buffered is printed twice
    ranks = []
    for r in range(world):
        env = {**base, "RANK": str(r), "LOCAL_RANK": str(r), **ops_class.rank_env(r, world)}
        env[RANK_VERDICT_ENV] = said[r]
        args = (env, argv if r == 0 else [], rank)
        ranks.append(multiprocessing.get_context("fork").Process(target=be_rank, args=args))
        ranks[-1].start()
    failed: tuple[int, int] | None = None
    deadline = None
    while any(p.exitcode is None for p in ranks):
        for r, proc in enumerate(ranks):
            if failed is None and proc.exitcode not in (None, 0):
                failed, deadline = (r, proc.exitcode), time.monotonic() + RANK_GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            for proc in ranks:
                proc.kill()
        time.sleep(0.05)
    failed = failed or next(((r, p.exitcode) for r, p in enumerate(ranks) if p.exitcode), None)
    if failed is not None and (failed[0] != 0 or not path or not os.path.exists(path)):
        r, code = failed
        verdict = {"result": Result.FAIL_OTHER, "error": f"rank {r} of {world} "}
        verdict["error"] += exit_description(code)
        if os.path.exists(said[r]):  # a rank that failed a phase (load, gen) said which
            with open(said[r], encoding="utf-8") as f:
                failure = json.load(f)
            prefix = f"rank {r} of {world}: "  # protocol.RANK_PREFIX reads it
            verdict = {"result": failure["result"], "error": prefix + failure["error"]}
            if failure.get("notes"):  # the error a wrapper (dynamo's) wraps, named
                verdict["notes"] = prefix + failure["notes"]
            verdict["error_site"] = failure.get("error_site")
        write_verdict(verdict, argv)
    for name in filter(os.path.exists, said):
        os.unlink(name)
    return 0
