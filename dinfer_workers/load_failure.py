"""Why an engine could not be loaded, said so that its reader knows what to do. A failed
import names the module, the distribution that installed it and the fix: a reinstall, a
dependency to install, or two distributions that ship one import name (the clash of
docs/adr/039-prefixed-import-names.md, where transformers' `kernels` shadowed ours).
Any other failure is its exception's type and text."""

from __future__ import annotations

import sys
from importlib import metadata, util
from pathlib import Path
from types import TracebackType

OWN_DISTRIBUTION = "dinfer-batch"


def explain(exc: BaseException) -> str:
    """`Type: text` of the failure, and for a failed import what to do about it."""
    # an ImportError's text ends with the module's path: its distribution says more
    text = str(exc)
    if isinstance(exc, ImportError) and exc.path:
        text = text.replace(f" ({exc.path})", "")
    reason = f"{type(exc).__name__}: {text}"
    module = failed_module(exc)
    return reason if module is None else f"{reason}. {advice(module)}"


def failed_module(exc: BaseException) -> str | None:
    """The module an import failed on: the one an ImportError names, else the innermost
    module whose top-level code raised while it was being imported; None when no import
    failed."""
    if isinstance(exc, ImportError) and exc.name:
        return exc.name
    modules = [frame.tb_frame.f_globals.get("__name__") for frame in _frames(exc.__traceback__)
               if frame.tb_frame.f_code.co_name == "<module>"]
    named = [name for name in modules if isinstance(name, str)]
    return named[-1] if named else None


def advice(module: str) -> str:
    """Where the module came from (its distribution, or none) and what to do."""
    top = module.partition(".")[0]
    owners = sorted(set(metadata.packages_distributions().get(top, [])))
    if len(owners) > 1:
        return (f"The import name {top} is shipped by several installed distributions "
                f"({', '.join(_named(owner) for owner in owners)}): their files overwrite "
                f"each other. Uninstall the one {OWN_DISTRIBUTION} does not need "
                f"(`pip check` and `pip show` say which), then reinstall the other")
    if not owners:
        if top in sys.stdlib_module_names:
            return (f"The module {module} is the standard library's: a file or folder named "
                    f"{top} on sys.path (PYTHONPATH, the current directory) may shadow it")
        if not _importable(top):
            return (f"No installed distribution provides the module {module}: reinstall "
                    f"{OWN_DISTRIBUTION} with its dependencies (`pip install --force-reinstall "
                    f"{OWN_DISTRIBUTION}`, or `pip install -e .` in its checkout)")
        if not _is_own(top):
            return (f"The module {module} comes from no installed distribution (a folder on "
                    f"sys.path, e.g. PYTHONPATH or the current directory, holds it): remove "
                    f"it from the path, or install the package it belongs to")
        owners = [OWN_DISTRIBUTION]  # an editable install's modules are in no RECORD
    owner = owners[0]
    if owner == OWN_DISTRIBUTION:
        return (f"The module {module} is part of {_named(owner)}, whose installation is "
                f"incomplete or stale: reinstall it (`pip install --force-reinstall --no-deps "
                f"{OWN_DISTRIBUTION}`, or `pip install -e .` in its checkout)")
    return (f"The module {module} comes from the distribution {_named(owner)}. If that is "
            f"the package meant, reinstall it at a version {OWN_DISTRIBUTION} allows (`pip "
            f"check` says which); if not, two distributions ship the import name {top}: "
            f"uninstall {owner}")


def _frames(tb: TracebackType | None) -> list[TracebackType]:
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    return frames


def _named(distribution: str) -> str:
    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return distribution


def _importable(top: str) -> bool:
    try:
        return top in sys.modules or util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _is_own(top: str) -> bool:
    """A package of this project, installed editable (its files in no RECORD)."""
    if not top.startswith("dinfer_"):
        return False
    spec = util.find_spec(top)
    origin = None if spec is None else spec.origin
    return origin is not None and Path(origin).resolve().is_relative_to(
        Path(__file__).resolve().parents[1])
