"""The few lines the sandboxed interpreter runs before the untrusted program.

Shipped as a string and run with ``python -I -S -c`` so it needs no readable package directory
(the sandbox uid often cannot read the trainer's venv) and so it works on any Python >= 3.8.

Why a prelude rather than ``preexec_fn``: rlimits set here apply to the program and everything it
spawns, while the parent keeps using ``vfork``-fast spawning with no Python code between fork and
exec (``preexec_fn`` is unsafe with the pool's threads). The prelude also compiles the program
itself, so a syntax error is told apart from a program that raises ``SyntaxError`` at run time,
and it reports on a private status pipe whether the program ran to its end: a program that calls
``sys.exit(0)`` or ``os._exit(0)`` before its tests ran is not a pass.

Status bytes on the status fd: ``S`` compile failed, ``R`` started, ``D`` ran to the end, ``X`` it
raised or exited early.
"""

from __future__ import annotations

PRELUDE = r"""
import os, sys, resource
def _pippa_prelude():
    err_fd, st = int(sys.argv[1]), int(sys.argv[2])
    mem, cpu, nproc, fsize, nofile = (int(x) for x in sys.argv[3].split(","))
    os.dup2(err_fd, 2)
    os.close(err_fd)
    R = resource
    for res, val in ((R.RLIMIT_AS, mem), (R.RLIMIT_CPU, cpu), (R.RLIMIT_NPROC, nproc),
                     (R.RLIMIT_FSIZE, fsize), (R.RLIMIT_NOFILE, nofile), (R.RLIMIT_CORE, 0)):
        if val >= 0:
            resource.setrlimit(res, (val, val))
    with open("main.py", "rb") as f:
        src = f.read()
    try:
        code = compile(src, "main.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        os.write(st, b"S")
        import traceback
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
        sys.stderr.flush()
        os._exit(1)
    del src
    os.write(st, b"R")
    sys.argv = ["main.py"]
    env = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        exec(code, env)
    except SystemExit:
        os.write(st, b"X")
        raise
    except BaseException as e:
        os.write(st, b"X")
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    os.write(st, b"D")
_pippa_prelude()
"""
