"""The host programs that run alone on a host (the run supervisor, the alerts program) still carry
copies of contract values: each copy must equal the contract's, so a change there cannot leave them
behind."""

from __future__ import annotations

from pippa_contract import names, rundir, runfacts, secrets
from pippa_ops.alerts import hostalerts
from pippa_ops.runs import supervise


def test_the_supervisor_s_copies_equal_the_contract() -> None:
    assert supervise.RUN_STATE_FILES == rundir.RUN_STATE_FILES
    assert supervise.SESSION_RE.pattern == names.SESSION_RE.pattern
    assert supervise._ERROR_LINE.pattern == runfacts.ERROR_LINE.pattern
    assert supervise.ATTEMPTS_FILE == rundir.ATTEMPTS_JSON


def test_the_alerts_program_s_copies_equal_the_contract() -> None:
    assert hostalerts.SECRETS_PATH == secrets.SECRETS_PATH
    assert hostalerts._ERROR_LINE.pattern == runfacts.ERROR_LINE.pattern
