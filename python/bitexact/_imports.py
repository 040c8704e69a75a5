"""Code run right after a module's first import, without importing it: :func:`when_loaded`.

bitexact patches or configures parts of torch that cost a process seconds of CPU to import
(TorchDynamo, Inductor's config: about as much as torch itself). A program that never uses them
must not pay for them because bitexact is there; one that does gets them patched before its own
code can touch them.
"""

import sys

# Module name -> the finder waiting for it (at most one each, first on sys.meta_path).
_waiting = {}


def when_loaded(name, then):
    """Calls ``then(module)`` with the module ``name``: now when it is loaded (its code has run),
    else the moment its first import has executed it, before the importer gets it back, through
    a finder first on ``sys.meta_path`` (:class:`_AfterExec`). Returns a handle whose
    ``cancel()`` forgets ``then`` (None when it ran at once)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is not None and not getattr(spec, "_initializing", False):
        then(module)
        return None
    finder = _waiting.get(name)
    if finder is None or finder not in sys.meta_path:
        finder = _waiting[name] = _AfterExec(name)
        sys.meta_path.insert(0, finder)
    return finder.add(then)


class _AfterExec:
    """A ``sys.meta_path`` finder that calls each of its callbacks with the module ``name`` once
    that module has been executed, and does nothing else: the spec comes from the path finder,
    with its loader's ``exec_module`` followed by the callbacks. It leaves ``sys.meta_path`` once
    it has found the module."""

    def __init__(self, name):
        self.name, self.callbacks = name, []

    def add(self, then):
        """Calls ``then(module)`` after the module loads; returns a handle whose ``cancel()``
        takes it back."""
        self.callbacks.append(then)
        return _Cancel(self.callbacks, then)

    def find_spec(self, fullname, path, target=None):
        """The spec of ``self.name`` with the callbacks after its ``exec_module``; None for
        every other module."""
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, callbacks = spec.loader.exec_module, self.callbacks

        def exec_module(module):
            run(module)
            for then in list(callbacks):
                then(module)
            callbacks.clear()

        spec.loader.exec_module = exec_module
        return spec


class _Cancel:
    """The handle of one :func:`when_loaded` callback."""

    def __init__(self, callbacks, then):
        self.callbacks, self.then = callbacks, then

    def cancel(self):
        """Forgets the callback (it is not called when the module loads)."""
        if self.then in self.callbacks:
            self.callbacks.remove(self.then)


class Patch:
    """The handle of a patch made when a module loads (:func:`when_loaded`): a subclass's
    ``apply(module)`` makes it and returns what puts it back (an object with ``remove()``);
    :meth:`remove` puts it back, or stops waiting when the module never loaded."""

    def __init__(self, name):
        self.restore = None
        self.waiting = when_loaded(name, self._applied)

    def _applied(self, module):
        self.restore = self.apply(module)

    def apply(self, module):
        """Patches ``module``; returns the handle that puts it back."""
        raise NotImplementedError

    def remove(self):
        """Puts back what :meth:`apply` replaced, or stops waiting for the module to load."""
        if self.waiting is not None:
            self.waiting.cancel()
        if self.restore is not None:
            self.restore.remove()
