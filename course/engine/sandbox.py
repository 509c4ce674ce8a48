"""Confine the worker with Linux Landlock before any learner code runs.

Landlock lets an unprivileged process give up rights for itself and its descendants. The worker
keeps the right to read everything (Python, numpy, the learner's own files) but may create,
write, truncate, rename or delete files only inside its scratch folder; where the kernel
supports it (Landlock ABI 4 and 6), it also may not open TCP connections nor signal processes
outside itself. So learner code cannot edit the workspace, the progress file or the course,
cannot kill or spoof the grader, and cannot leave a process behind that does so later.

On kernels without Landlock the worker runs unconfined (the rest of the grader's defences still
hold); ``confine`` returns the ABI version it used, 0 for none.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1

_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


def confine(writable: str) -> int:
    """Restrict this process to writing beneath ``writable``; returns the Landlock ABI used."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return 0
    create, add_rule, restrict = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(create, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if abi <= 0:
        return 0
    access = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    access |= (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    if abi >= 6:
        attr = struct.pack(
            "=QQQ", access, _NET_BIND_TCP | _NET_CONNECT_TCP, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        )
    elif abi >= 4:
        attr = struct.pack("=QQ", access, _NET_BIND_TCP | _NET_CONNECT_TCP)
    else:
        attr = struct.pack("=Q", access)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(create, buffer, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        return 0
    try:
        null = _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
        for path, allowed in ((writable, access), ("/dev/null", null)):
            folder = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, folder), 12)
                if libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, rule, 0) < 0:
                    return 0
            finally:
                os.close(folder)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(restrict, ruleset, 0) < 0:
            return 0
        return int(abi)
    finally:
        os.close(ruleset)
