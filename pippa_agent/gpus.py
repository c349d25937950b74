"""GPUs: nvidia-smi's GPU and compute-process queries in one request, each as its own argument list
(no shell); the laptop parses the CSV (``pippa_ops.gpu``)."""

from __future__ import annotations

from pippa_agent.host import AgentError, ErrorKind, run, which

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pippa_contract.messages import GpuReportAnswer, GpuReportRequest

NVIDIA_SMI = "nvidia-smi"


def gpu_report(req: GpuReportRequest) -> GpuReportAnswer:
    """``{"smi": false}`` without nvidia-smi; else each query's output (stdout then stderr)."""
    queries = [[str(w) for w in argv] for argv in (req["query"], req["apps"])]
    if any(not argv or argv[0] != NVIDIA_SMI for argv in queries):
        raise AgentError(ErrorKind.USAGE, "gpu_report runs nvidia-smi queries only")
    if which(NVIDIA_SMI) is None:
        return {"smi": False}
    import threading  # subprocess has imported it already

    out = ["", ""]

    def one(i: int) -> None:
        p = run(queries[i], timeout=60)
        out[i] = (p.stdout + p.stderr).decode(errors="replace")

    # The two queries at once: each nvidia-smi start is most of its cost (tens of ms on a GPU host).
    apps = threading.Thread(target=one, args=(1,))
    apps.start()
    one(0)
    apps.join()
    return {"smi": True, "gpus": out[0], "apps": out[1]}
