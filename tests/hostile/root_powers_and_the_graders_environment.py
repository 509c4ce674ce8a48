# lesson: 1
# expect: environment=clean
# expect: capabilities=none
# expect: bpf=refused
# expect: perf_event_open=refused
# expect: userfaultfd=refused
# expect: user_namespace=refused
# expect: clone3=ENOSYS
# expect: terminal=not typed
# ---- l01_projections.py
import ctypes
import errno
import fcntl
import os
import termios

# What a learner running as root would try from inside the worker: read the grader's
# environment (its COURSE_HOSTILE_TAG stands for an instructor's token), keep root's powers,
# reach the kernel with bpf, perf_event_open or userfaultfd, make a user namespace, and type a
# command into a terminal (TIOCSTI) that a shell would run after the check.
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_CALLS = {"bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "clone3": 435}  # x86_64


def _outcome(result):
    if result >= 0:
        return "done"
    code = ctypes.get_errno()
    return "refused" if code in (errno.EPERM, errno.EACCES) else errno.errorcode.get(code, str(code))


def _report():
    found = ["environment=" + ("leaked" if "COURSE_HOSTILE_TAG" in os.environ else "clean")]
    status = open("/proc/self/status").read().splitlines()
    held = [line for line in status if line.startswith(("CapEff", "CapPrm", "CapAmb")) and not line.endswith("0" * 16)]
    found.append("capabilities=" + ("none" if not held else "kept"))
    for name, number in _CALLS.items():
        ctypes.set_errno(0)
        found.append(f"{name}={_outcome(_LIBC.syscall(number, 0, 0, 0, 0, 0))}")
    ctypes.set_errno(0)
    found.append(f"user_namespace={_outcome(_LIBC.unshare(0x10000000))}")
    typed = "not typed"
    for path in ("/dev/tty", f"/proc/{os.getppid()}/fd/0", "/dev/console"):
        try:
            with open(path, "wb", buffering=0) as terminal:
                fcntl.ioctl(terminal, termios.TIOCSTI, b"x")
            typed = "typed"
        except OSError:
            continue
    found.append(f"terminal={typed}")
    return " ".join(found)


def linear(x, w, b=None):
    raise RuntimeError(_report())


def head_projections(x, w_heads):
    raise NotImplementedError


def fuse_head_weights(w_heads):
    raise NotImplementedError
