"""Stand-ins for torch.distributed's functions that the tests put in its place, held to the real ones: a stand-in
exists only for a name the installed torch.distributed has, and a call the real function would refuse (an
argument it does not take, one missing) fails the test as it would fail on a node."""

import inspect
from collections.abc import Callable
from typing import Any

import torch.distributed as dist


def like(name: str, fake: Callable[..., Any]) -> Callable[..., Any]:
    """``fake`` in the place of ``torch.distributed.<name>``, called only with arguments the real one accepts."""
    real = getattr(dist, name)  # AttributeError: the real module has no such function
    signature = inspect.signature(real)

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs)  # TypeError where the real function would raise it
        return fake(*args, **kwargs)

    return stand_in


def put(monkeypatch: Any, name: str, fake: Callable[..., Any]) -> None:
    """``monkeypatch.setattr(torch.distributed, name, like(name, fake))``."""
    monkeypatch.setattr(dist, name, like(name, fake))
