"""How `pippa doctor`'s results look in a terminal: one table per host (worst first), the verdict line
last, and the history table; `pippa up` prints the same verdict line."""

from __future__ import annotations

import time
from typing import Any

import typer

COLORS = {"ok": "green", "warn": "yellow", "fail": "red", "skipped": "bright_black"}


def render_result(res: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from pippa_ops.cli.common import console

    table = Table(title=res.get("host"), box=None, header_style="bold", title_justify="left", pad_edge=False)
    for col in ("STATUS", "CHECK", "GPU", "DETAIL"):
        table.add_column(col, overflow="fold")
    rank = {"fail": 0, "warn": 1, "skipped": 2, "ok": 3}
    for c in sorted(res.get("checks") or [], key=lambda c: rank.get(c.get("status"), 4)):
        status = str(c.get("status"))
        gpu = "-" if c.get("gpu") is None else str(c["gpu"])
        table.add_row(
            f"[{COLORS.get(status, 'white')}]{status}[/]",
            escape(str(c.get("check"))),
            gpu,
            escape(str(c.get("detail"))),
        )
    console().print(table)
    console().print(verdict_line(res))


def verdict_line(res: dict[str, Any]) -> str:
    """``t1: verdict fail (2 failed, 1 warning; passive + active checks)`` with colour markup."""
    checks = res.get("checks") or []
    n_fail = sum(c.get("status") == "fail" for c in checks)
    n_warn = sum(c.get("status") == "warn" for c in checks)
    verdict = str(res.get("verdict"))
    what = "passive checks only (--quick)" if res.get("quick") else "passive + active checks"
    return (
        f"{res.get('host')}: verdict [{COLORS.get(verdict, 'white')}]{verdict}[/] ({n_fail} failed, "
        f"{n_warn} warning(s); {what})"
    )


def render_history(host: str, results: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from pippa_ops.cli.common import console
    from pippa_ops.doctor import age

    if not results:
        typer.echo(f"{host}: no doctor results stored yet (run `pippa doctor {host}`)")
        return
    table = Table(title=host, box=None, header_style="bold", title_justify="left", pad_edge=False)
    for col in ("WHEN", "AGO", "VERDICT", "FAILED/WARNED", "GEMM TFLOPS (min-max)", "ALL-REDUCE GB/s"):
        table.add_column(col)
    now = time.time()
    for r in results:
        stamp = float(r.get("time") or 0.0)
        bad = sorted(
            {str(c.get("check")) for c in r.get("checks") or [] if c.get("status") in ("fail", "warn")}
        )
        gemm = [g.get("gemm_tflops") for g in ((r.get("measured") or {}).get("gpus") or {}).values()]
        gemm = [v for v in gemm if isinstance(v, (int, float))]
        figures = f"{min(gemm):.0f}-{max(gemm):.0f}" if gemm else "-"
        bw = (r.get("measured") or {}).get("allreduce_gbs")
        verdict = str(r.get("verdict"))
        shown = f"[{COLORS.get(verdict, 'white')}]{verdict}[/]" + (" (quick)" if r.get("quick") else "")
        table.add_row(
            time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)),
            age(now - stamp),
            shown,
            ", ".join(bad) or "-",
            figures,
            "-" if bw is None else f"{bw:.0f}",
        )
    console().print(table)
