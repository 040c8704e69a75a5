"""Which writes of a program are checkpoints, for the state recorder
(:mod:`bitexact._resume_state`), whose record is full at the first step after one.

A write is seen by an audit hook (:func:`sys.addaudithook`: ``open`` for writing,
``os.rename``, ``os.mkdir``, ``shutil.copyfile``, ``os.link``, ``os.symlink``) and by a wrapped
``torch.save``, which opens its path in native code (no audit event). A saver that opens its
path in other native code (safetensors' ``save_file``) is not seen. :func:`is_checkpoint`
decides as bitexact's checkpoint watch (``src/program/checkpoint.rs``) does, more widely.
"""

import fnmatch
import functools
import os
import sys

_callback = None
_watching = False

# Audit events that write a path, and where the path is among their arguments.
_WRITES = {"open": 0, "os.rename": 1, "os.mkdir": 0, "shutil.copyfile": 1, "os.link": 1,
           "os.symlink": 1}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT
_TEMPORARY_ENDS = (".tmp", ".temp", ".part", ".partial", ".swp", ".lock", "~")
_TEMPORARY_STARTS = ("tmp-", "tmp_", ".tmp", "~")


def _temporary(component):
    """As bitexact's checkpoint watch (``run/checkpoint.rs``): a name a saver renames away."""
    c = component.lower()
    return (c.endswith(_TEMPORARY_ENDS) or c.startswith(_TEMPORARY_STARTS) or ".tmp." in c
            or ".tmp-" in c)


def is_checkpoint(path, out, glob=None):
    """Whether ``path`` (written by the program) is a checkpoint, or lies in one, under
    ``out``: no part of it temporary, and a part matching ``glob``, or the whole path under
    ``out`` when the glob has a ``/``; without ``glob``, a part whose name contains ``ckpt``
    or ``checkpoint``. Wider than bitexact's watch (any part, not the name alone): a record
    made full once too often costs a little time, one missed loses the comparison."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    rel = os.path.relpath(os.path.abspath(path), out)
    if rel == os.curdir or rel.startswith(os.pardir):
        return False
    parts = rel.split(os.sep)
    if any(_temporary(c) for c in parts):
        return False
    if glob and "/" in glob:
        return fnmatch.fnmatchcase(rel.replace(os.sep, "/"), glob)
    if glob:
        return any(fnmatch.fnmatchcase(c, glob) for c in parts)
    return any("ckpt" in c.lower() or "checkpoint" in c.lower() for c in parts)


def _audit(event, args):
    """The audit hook (:func:`sys.addaudithook`): tells the callback each path written. Never
    raises (an audit hook that raises aborts the program's call)."""
    where = _WRITES.get(event)
    if where is None or _callback is None:
        return
    try:
        if event == "open":
            mode, flags = args[1], args[2]
            writes = any(c in mode for c in "wax+") if mode else bool(flags & _WRITE_FLAGS)
            if not writes:
                return
        _callback(args[where])
    except Exception:
        pass


def _watch_torch_save():
    """Wraps ``torch.save`` (once per process): it opens a path in native code, which makes
    no audit event. A file object it is given was opened in Python, and audited."""
    import torch
    import torch.serialization as serialization

    save = serialization.save
    if getattr(save, "_bitexact_state", False):
        return

    @functools.wraps(save)
    def wrapped(obj, f, *args, **kwargs):
        result = save(obj, f, *args, **kwargs)
        try:
            if _callback is not None:
                _callback(f)
        except Exception:
            pass
        return result

    wrapped._bitexact_state = True
    serialization.save = wrapped
    if torch.save is save:
        torch.save = wrapped


def watch_writes(callback):
    """Calls ``callback(path)`` for each path the program writes from now on (the last
    callback given wins; an audit hook cannot be removed, so it is installed once)."""
    global _callback, _watching
    _callback = callback
    if not _watching:
        sys.addaudithook(_audit)
        _watching = True
    _watch_torch_save()
