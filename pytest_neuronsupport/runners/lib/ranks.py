"""Several cores: ``run.py`` launches itself once per core as ``torch.distributed`` ranks.

Each rank is this script again with ``RANK``, ``WORLD_SIZE`` and a rendezvous address set (as
``torchrun`` sets them), pinned to its core by the device's ``rank_env``, and dies with the
launcher. Rank 0 writes the verdict. Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
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


def launch_ranks(params: dict[str, Any], ops_class: Any, argv: list[str]) -> int:
    """Run this script once per core, wait for the ranks, and report a rank that failed.

    Rank 0 writes the verdict. If another rank fails first (a crash, a failed phase), the others
    get a few seconds, then are killed, and the verdict is that rank's: FAIL(other) naming how it
    ended, or the phase it failed.
    """
    world = int(params["cores"])
    script = os.path.abspath(sys.argv[0])
    path = argv[argv.index("--result") + 1] if "--result" in argv else None
    said = [f"{path or script}.rank{rank}.json" for rank in range(world)]
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    base.update(WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    ranks = []
    for rank in range(world):
        env = {
            **base,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            **ops_class.rank_env(rank, world),
        }
        env[RANK_VERDICT_ENV] = said[rank]
        args = [sys.executable, script, *(argv if rank == 0 else [])]
        ranks.append(subprocess.Popen(args, env=env, preexec_fn=die_with_parent))
    failed: tuple[int, int] | None = None
    deadline = None
    while any(p.poll() is None for p in ranks):
        for rank, proc in enumerate(ranks):
            if failed is None and proc.returncode not in (None, 0):
                failed, deadline = (rank, proc.returncode), time.monotonic() + RANK_GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            for proc in ranks:
                proc.kill()
        time.sleep(0.05)
    failed = failed or next(((r, p.returncode) for r, p in enumerate(ranks) if p.returncode), None)
    if failed is not None and (failed[0] != 0 or not path or not os.path.exists(path)):
        rank, code = failed
        verdict = {"result": Result.FAIL_OTHER, "error": f"rank {rank} of {world} "}
        verdict["error"] += exit_description(code)
        if os.path.exists(said[rank]):  # a rank that failed a phase (load, gen) said which
            with open(said[rank], encoding="utf-8") as f:
                failure = json.load(f)
            verdict = {"result": failure["result"], "error": f"rank {rank} of {world}: "}
            verdict["error"] += failure["error"]
        write_verdict(verdict, argv)
    for name in filter(os.path.exists, said):
        os.unlink(name)
    return 0
