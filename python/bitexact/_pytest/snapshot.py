"""``bitexact.assert_snapshot(name=None, **tensors)``: digests compared with a committed
snapshot, exactly as ``cargo test``'s ``bitexact::check(&case).assert_snapshot()`` compares
them.

The comparison, the file and its rules are the library's
(``bitexact._native.snapshot_check`` over ``bitexact::snapshot::check_matches``):

* the file is ``snapshots/<platform class>/<name>@<controls>.snap`` beside the test file, in
  insta's ``.snap`` format (run digest, then one digest per tensor leaf); the platform class
  (``cpu-x86_64``, ``cuda-sm90`` when a tensor is on a GPU) and the controls suffix
  (``seed0-det``, from ``BITEXACT_SEED``/``BITEXACT_DETERMINISTIC``/``BITEXACT_BENCHMARK``)
  are named as for Rust snapshots. The metadata records this machine's fingerprint plus
  Python's, numpy's and torch's versions (``program.*``), so a mismatch says what changed;
* the default name is the test's node id from its file on (``test_model.py::test_step[cpu]``);
  a second unnamed snapshot in one test is ``<node id>-2``, and so on (insta's rule);
* a missing or changed snapshot is written as pending ``.snap.new`` (never in CI: ``CI`` set)
  and the test fails, naming the tensors that changed and how to accept: ``pytest
  --bitexact-update`` (writes the ``.snap`` and passes, removing the pending file),
  ``bitexact snapshot review``, ``cargo insta review`` or ``mv``. insta's ``INSTA_UPDATE`` and
  ``INSTA_FORCE_PASS`` are honoured as in Rust.
"""

import json
import shlex
import sys

from .. import _digest, _outputs
from .leaves import leaves


def default_name(nodeid):
    """The node id from the test file's name on: ``a/b/test_x.py::T::test[1]`` →
    ``test_x.py::T::test[1]`` (the snapshot directory is beside the file already)."""
    path, sep, rest = nodeid.partition("::")
    return path.replace("\\", "/").rsplit("/", 1)[-1] + sep + rest


def _backend(flat):
    torch = sys.modules.get("torch")
    if torch is not None and any(isinstance(v, torch.Tensor) and v.is_cuda for _, v in flat):
        return "cuda"
    return "cpu"


def _program_platform():
    """Python, numpy and torch versions, as ``bitexact run`` records a program's."""
    info = {k: v for k, v in _outputs.platform_info().items()
            if v is not None and not k.startswith("seed")}
    return json.dumps(info, sort_keys=True)


class Snapshots:
    """The snapshots of one test: its directory, its node id and the unnamed-call counter."""

    def __init__(self, test_path, nodeid, update):
        self.dir = test_path.parent / "snapshots"
        self.nodeid, self.update, self.unnamed = nodeid, update, 0

    def assert_snapshot(self, name=None, **tensors):
        """Compares ``tensors`` (each a tensor, array, number, or nested dict/list/tuple of
        them) with the committed snapshot; fails the test on a missing or changed one."""
        __tracebackhide__ = True
        if not tensors:
            raise TypeError("bitexact.assert_snapshot: name the tensors, e.g. "
                            "assert_snapshot(logits=logits)")
        if name is None:
            self.unnamed += 1
            name = default_name(self.nodeid)
            if self.unnamed > 1:
                name = "%s-%d" % (name, self.unnamed)
        elif not isinstance(name, str) or not name.strip() or "\0" in name:
            raise ValueError("bitexact.assert_snapshot: name=%r must be a non-empty string" % (name,))
        flat = []
        for key, value in tensors.items():
            flat.extend(leaves(value, root=key, what="assert_snapshot(%s=...)" % key))
        digests = _digest.digests(**dict(flat))
        accept = "pytest --bitexact-update %s" % shlex.quote(self.nodeid)
        passed, message = _digest.native().snapshot_check(
            str(self.dir), name, _backend(flat), digests, _program_platform(), self.update,
            accept)
        if not passed:
            import pytest

            pytest.fail(message, pytrace=False)
        if message:
            sys.stderr.write("bitexact: %s\n" % message)
        return digests
