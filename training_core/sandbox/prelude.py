"""The few lines the sandboxed interpreter runs before the untrusted program.

Shipped as a string and run with ``python -I -S -c`` so it needs no package directory (the sandbox
sees only /usr). The program and the test calls arrive on an inherited file descriptor (a memfd,
marshalled by the trainer), are read, and the descriptor is closed before the program runs: no copy
sits in the sandbox's file system, and ``open(__file__)`` finds nothing.

Why a prelude rather than ``preexec_fn``: rlimits set here apply to the program and everything it
spawns, while the parent keeps using ``vfork``-fast spawning with no Python code between fork and exec.
Before the program, the prelude restricts what it can read with Landlock (``procview``: its own mounts
and its own process, nothing machine-wide) and sets the rlimits, also those that keep it out of the
per-user and global counters (locked memory, message queues, pending signals). The prelude compiles
the program itself, so a syntax error is told apart from a program that raises
``SyntaxError`` at run time.

Status fd protocol: ``S`` compile failed, ``R`` started, then for test calls one line
``V[...]\\n`` with every call's value encoded (``values.decode`` reads it outside), then ``D`` ran to
the end or ``X`` raised / exited early. Under gVisor, which passes the sandbox only stdio, the
program arrives on stdin and each status record travels on stderr as ``\\0pippa-status:<record>\\0``
(``gvisor.split_status``). Everything the prelude uses after the program started is
bound to its own locals first, so rebinding ``os.write`` or a builtin changes nothing (``traceback``,
which only formats the program's own error, is imported late because it costs ~30 ms). The program
shares the process, so whatever it writes on the status fd is untrusted: the trainer reads values
from it, never verdicts, and compares them with expected values the sandbox never saw.
"""

from __future__ import annotations

from training_core.sandbox.procview import PROC_SELF
from training_core.sandbox.values import LIMITS, Limits

SIGPENDING = 64  # queued signals a sandbox may hold: a program needs a few, not the user's 60,000

_TEMPLATE = r"""
import os, sys, resource, marshal
def _pippa_prelude():
    write, exit_ = os.write, os._exit
    src_fd, err_fd = int(sys.argv[1]), int(sys.argv[2])
    framed = sys.argv[3] == "-"  # gVisor passes only stdio: the status travels framed on stderr
    st = 2 if framed else int(sys.argv[3])
    def status(b, write=write, st=st, framed=framed):
        write(st, b"\0pippa-status:" + b + b"\0" if framed else b)
    mem, cpu, nproc, fsize, nofile = (int(x) for x in sys.argv[4].split(","))
    chunks = []
    while True:
        b = os.read(src_fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    if src_fd == 0:  # the program came on stdin: the program's stdin is empty, as elsewhere
        nul = os.open("/dev/null", os.O_RDONLY)
        os.dup2(nul, 0)
        os.close(nul)
    else:
        os.close(src_fd)
    if int(sys.argv[5]) >= 0:  # a fresh anonymous session keyring: the trainer's is left behind
        import ctypes
        ctypes.CDLL(None).syscall(int(sys.argv[5]), 1, None)
        del ctypes
    src, calls = marshal.loads(b"".join(chunks))
    del chunks
    if err_fd != 2:
        os.dup2(err_fd, 2)
        os.close(err_fd)
    if sys.argv[6] != "-":  # Landlock: files are read only under the sandbox's mounts and PROC_SELF
        import ctypes, struct
        sc = ctypes.CDLL(None, use_errno=True).syscall
        rs = sc(444, struct.pack("=Q", 4), 8, 0)  # handles LANDLOCK_ACCESS_FS_READ_FILE
        me = "/proc/%d/" % os.getpid()
        for path in sys.argv[6].split("|") + [me + e for e in "@PROC_SELF@".split(",")]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            sc(445, rs, 1, struct.pack("=Qi", 4, fd), 0)
            os.close(fd)
        if rs < 0 or sc(446, rs, 0) != 0:
            write(2, b"pippa sandbox: Landlock refused: the program does not run\n")
            exit_(125)
        os.close(rs)
        del ctypes, struct, sc
    R = resource
    # locked memory, message queues and pending signals are counted per host user and in global
    # counters: none for the program (mlock is also refused by the filter), a few pending signals;
    # gVisor's kernel counts the last two itself (and refuses to lower them)
    for res, val in ((R.RLIMIT_AS, mem), (R.RLIMIT_CPU, cpu), (R.RLIMIT_NPROC, nproc),
                     (R.RLIMIT_FSIZE, fsize), (R.RLIMIT_NOFILE, nofile), (R.RLIMIT_CORE, 0),
                     (R.RLIMIT_MEMLOCK, 0), (R.RLIMIT_MSGQUEUE, 0), (R.RLIMIT_SIGPENDING, @SIGPENDING@)):
        if val >= 0 and not (framed and res in (R.RLIMIT_MSGQUEUE, R.RLIMIT_SIGPENDING)):
            resource.setrlimit(res, (val, val))
    stderr = sys.stderr
    try:
        code = compile(src, "main.py", "exec", dont_inherit=True)
        tests = [compile(c, "<test %d>" % i, "eval", dont_inherit=True) for i, c in enumerate(calls)]
    except (SyntaxError, ValueError) as e:
        status(b"S")
        import traceback
        stderr.write("".join(traceback.format_exception_only(type(e), e)))
        stderr.flush()
        exit_(1)
    del src
    T, L, TU, ST, FS, D = type, list, tuple, set, frozenset, dict
    I, F, S, B, C, BO, N = int, float, str, bytes, complex, bool, type(None)
    join, hexs, fhex, ihex = ",".join, bytes.hex, float.hex, int.__format__
    tags = {L: "l", TU: "t", ST: "S", FS: "F"}

    def enc(v, depth, budget):
        t = T(v)
        budget[0] -= 1
        if depth > @DEPTH@ or budget[0] < 0:
            raise ValueError
        if t is N:
            return '["n"]'
        if t is BO:
            return '["T"]' if v else '["f"]'
        if t is I:
            h = ihex(v, "x")
            if len(h) > @INT_HEX@ + 1:
                raise ValueError
            return '["i","%s"]' % h
        if t is F:
            return '["d","%s"]' % fhex(v)
        if t is S:
            return '["s","%s"]' % hexs(S.encode(v, "utf-8", "surrogatepass"))
        if t is B:
            return '["b","%s"]' % hexs(v)
        if t is C:
            return '["c","%s","%s"]' % (fhex(v.real), fhex(v.imag))
        if t in tags or t is D:
            if len(v) > @ELEMENTS@:
                raise ValueError
            if t is D:
                return '["m",[%s]]' % join(["[%s,%s]" % (enc(k, depth + 1, budget), enc(x, depth + 1, budget))
                                             for k, x in L(D.items(v))])
            return '["%s",[%s]]' % (tags[t], join([enc(x, depth + 1, budget) for x in L(v)]))
        raise TypeError

    status(b"R")
    sys.argv = ["main.py"]
    env = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        exec(code, env)
        out = []
        budget = [@NODES@]
        size = 16
        for t in tests:
            try:
                v = eval(t, env)
            except BaseException as e:
                out.append('["e","%s"]' % hexs(S.encode(T(e).__name__)))
                continue
            try:
                e = enc(v, 0, budget)
                size += len(e) + 1
                out.append(e if size < @BYTES@ else '["o"]')
            except BaseException:
                out.append('["o"]')
        if tests:
            status(b"V[" + join(out).encode() + b"]\n")
    except SystemExit:
        status(b"X")
        raise
    except BaseException as e:
        status(b"X")
        import traceback  # only here: importing it costs more than starting the interpreter
        stderr.write("".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next)))
        stderr.flush()
        sys.stdout.flush()
        exit_(1)
    status(b"D")
_pippa_prelude()
"""


def _build(limits: Limits) -> str:
    """The prelude with the encoder's limits filled in (the decoder checks the same ones)."""
    text = _TEMPLATE
    for key, value in {
        "@DEPTH@": limits.depth,
        "@NODES@": limits.nodes,
        "@ELEMENTS@": limits.elements,
        "@INT_HEX@": limits.int_hex_digits,
        "@BYTES@": limits.bytes,
        "@PROC_SELF@": ",".join(PROC_SELF),
        "@SIGPENDING@": SIGPENDING,
    }.items():
        text = text.replace(key, str(value))
    return text


PRELUDE = _build(LIMITS)
