"""What a run records about its platform in ``.bitexact-platform.json``: library versions,
the seed used, torch's threads and CUDA devices (read, never initialised, unless asked)."""

import platform as _platform
import sys


def _version(module_name, dist_name):
    """Version of an imported module, else of its installed distribution, else ``None``
    (never imports the module: importing torch just to report it would cost seconds)."""
    mod = sys.modules.get(module_name)
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7
        return None
    try:
        return metadata.version(dist_name)
    except Exception:
        return None


def info(seed, seed_seconds, probe_cuda=False):
    """The dict written to ``.bitexact-platform.json``.

    Keys: ``python``, ``python_implementation``, ``os``, ``machine``, ``numpy``, ``torch``
    (versions or null), ``seed`` (what ``seed_everything`` used, or null) and
    ``seed_everything_seconds``, and when torch is imported: ``torch_num_threads``, ``cuda`` (torch's
    CUDA version), ``cudnn``, ``cuda_available``, ``gpu`` (device 0's name), ``gpu_capability``.
    The GPU is queried only when torch has already initialised CUDA, or when ``probe_cuda`` is
    true (querying it earlier would initialise CUDA in the parent of forked loader workers).
    """
    info = {
        "python": _platform.python_version(),
        "python_implementation": _platform.python_implementation(),
        "os": _platform.system(),
        "machine": _platform.machine(),
        "numpy": _version("numpy", "numpy"),
        "torch": _version("torch", "torch"),
        "seed": seed,
        "seed_everything_seconds": None if seed_seconds is None else round(seed_seconds, 3),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_num_threads"] = torch.get_num_threads()
        info["cuda"] = getattr(torch.version, "cuda", None)
        try:
            v = torch.backends.cudnn.version()
        except Exception:
            v = None
        info["cudnn"] = v
        try:
            if torch.cuda.is_initialized() or probe_cuda:
                info["cuda_available"] = bool(torch.cuda.is_available())
                if info["cuda_available"]:
                    info["gpu"] = torch.cuda.get_device_name(0)
                    info["gpu_capability"] = list(torch.cuda.get_device_capability(0))
        except Exception:
            pass
    return info
