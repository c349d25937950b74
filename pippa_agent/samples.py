"""What the model wrote: the ``samples`` verb reads a run's samples.jsonl from its end and answers the
chosen rows with the run's raised alarms (``pippa_contract.samples.answer``)."""

from __future__ import annotations

import os

from pippa_agent.host import AgentError, ErrorKind, runs_dir
from pippa_contract.names import NAME_RE
from pippa_contract.samples import answer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import SamplesAnswer, SamplesRequest


def run_dir_of(req: SamplesRequest) -> tuple[str, str]:
    """The run ``name`` means (a run id names its directory; a session or short id goes through
    ``pippa_contract.runpick``, as ``read_run``) and its directory."""
    base = runs_dir(req["remote_dir"])
    name = req.get("name")
    if name and NAME_RE.match(name) and os.path.isdir(os.path.join(base, name)):
        return name, os.path.join(base, name)
    from pippa_agent.runs import list_runs
    from pippa_contract.runpick import choose

    chosen = choose(list_runs({"remote_dir": req["remote_dir"], "limit": 1000}), name)
    if chosen is None:
        raise AgentError(ErrorKind.USAGE, f"no run named {name!r} on this host")
    return chosen, os.path.join(base, chosen)


def samples(req: SamplesRequest) -> SamplesAnswer:
    run_id, d = run_dir_of(req)
    return answer(run_id, d, dict(req))  # type: ignore[return-value]
